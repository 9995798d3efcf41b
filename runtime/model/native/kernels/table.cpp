// One kernel variant: the table of kernel_table.h filled from the common code and one
// instruction set's kernels, chosen by the SGLC_LEVEL_* macro the build passes with that
// instruction set's compiler flags (native/build.py: VARIANTS). Compiled with
// -fvisibility=hidden: only sglc_kernels() leaves the library, so variants loaded side by side
// never share an inline function compiled for another instruction set.
#include "kernel_table.h"

#include <type_traits>

#include "common/attention.h"
#include "common/small_ops.h"

#if defined(SGLC_LEVEL_AVX512)
#include "arch/x86/avx512/attention.h"
#include "arch/x86/avx512/half_linear.h"
#include "arch/x86/avx512/int_linear.h"
namespace arch = sglc::avx512;
#define SGLC_LEVEL_NAME "avx512"
#define SGLC_INT_LINEAR "avx512-vnni (vpdpbusd)"
#define SGLC_ATTENTION "avx512 registers"
#define SGLC_HALF_LINEAR "avx512 fma"
#elif defined(SGLC_LEVEL_AVX2)
#include "arch/x86/avx2/attention.h"
#include "arch/x86/avx2/half_linear.h"
#include "arch/x86/avx2/int_linear.h"
namespace arch = sglc::avx2;
#define SGLC_LEVEL_NAME "avx2"
#define SGLC_INT_LINEAR "avx2 (vpmaddubsw)"
#define SGLC_ATTENTION "avx2 registers"
#define SGLC_HALF_LINEAR "avx2 fma"
#elif defined(SGLC_LEVEL_NEON_DOTPROD)
#include "arch/arm/neon/attention.h"
#include "arch/arm/neon/half_linear.h"
#include "arch/arm/neon/int_linear.h"
namespace arch = sglc::neon;
#define SGLC_LEVEL_NAME "neon_dotprod"
#define SGLC_INT_LINEAR "neon-dotprod (sdot)"
#define SGLC_ATTENTION "neon registers"
#define SGLC_HALF_LINEAR "neon fma"
#else
#include "arch/generic/kernels.h"
namespace arch = sglc::generic;
#define SGLC_LEVEL_NAME "generic"
#define SGLC_INT_LINEAR "scalar reference"
#define SGLC_ATTENTION "generic loop"
#define SGLC_HALF_LINEAR "scalar reference"
#endif

namespace {

using sglc::bf16;
using sglc::f16;

template <typename T>
void attend(const void* q, int64_t q_stride, const void* k, const void* v, int64_t row_stride, const int64_t* slots,
            int64_t len, int64_t heads, int64_t group, int64_t d, float scale, float softcap, float* scratch, float* m,
            float* l, float* acc) {
  const T* qp = static_cast<const T*>(q);
  const T* kp = static_cast<const T*>(k);
  const T* vp = static_cast<const T*>(v);
  if constexpr (!std::is_same_v<T, double>) {  // NOTE: float64 stays on the generic loop
    if (group <= arch::kRegisterMaxGroup &&
        arch::attend_registers<T>(qp, q_stride, kp, vp, row_stride, slots, len, heads, group, d, scale, softcap,
                                  scratch, m, l, acc)) {
      return;
    }
  }
  sglc::attend_generic<T>(qp, q_stride, kp, vp, row_stride, slots, len, heads, group, d, scale, softcap, scratch, m,
                          l, acc);
}

template <typename T>
void shared_prefix(int nc, const float* qt, int64_t rows, const void* k, const void* v, int64_t row_stride,
                   int64_t head_off, const int64_t* slots, int64_t len, int64_t d, int64_t dp, float softcap, float* s,
                   float* kv, float* m, float* l, float* acc) {
  const T* kp = static_cast<const T*>(k);
  const T* vp = static_cast<const T*>(v);
  switch (nc) {
    case 1: return sglc::shared_prefix_state<1, T, arch::add_weighted_rows>(qt, rows, kp, vp, row_stride, head_off, slots, len, d, dp, softcap, s, kv, m, l, acc);
    case 2: return sglc::shared_prefix_state<2, T, arch::add_weighted_rows>(qt, rows, kp, vp, row_stride, head_off, slots, len, d, dp, softcap, s, kv, m, l, acc);
    case 3: return sglc::shared_prefix_state<3, T, arch::add_weighted_rows>(qt, rows, kp, vp, row_stride, head_off, slots, len, d, dp, softcap, s, kv, m, l, acc);
    default: return sglc::shared_prefix_state<4, T, arch::add_weighted_rows>(qt, rows, kp, vp, row_stride, head_off, slots, len, d, dp, softcap, s, kv, m, l, acc);
  }
}

// The integer linears: the level's row-group kernels with each GGUF type's scale policy.
template <typename T>
void q8_tile(const int8_t* w, const float* scales, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows,
             int64_t n, const void* bias, void* out) {
  arch::q8_rows<T>(w, scales, nullptr, act, t, r0, rows, n, bias, out);
}
template <typename T>
void q8b_tile(const int8_t* w, const uint16_t* d, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows,
              int64_t n, const void* bias, void* out) {
  arch::q8_rows<T>(w, nullptr, d, act, t, r0, rows, n, bias, out);
}
template <typename T>
void q4_tile(const uint8_t* w, const uint16_t* d, const uint16_t* m, const sglc_quantized_rows* act, int64_t t,
             int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  arch::q4_rows<T, 4>(w, sglc::Q41Scales{d, m}, act, t, r0, rows, n, bias, out);
}
template <typename T>
void q5_tile(const uint8_t* w, const uint16_t* d, const uint16_t* m, const sglc_quantized_rows* act, int64_t t,
             int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  if (m == nullptr) return arch::q4_rows<T, 5>(w, sglc::Q50Scales{d}, act, t, r0, rows, n, bias, out);
  arch::q4_rows<T, 5>(w, sglc::Q41Scales{d, m}, act, t, r0, rows, n, bias, out);
}
template <typename T>
void q4k_tile(const uint8_t* w, const uint16_t* d, const uint16_t* dmin, const uint8_t* sc, const uint8_t* mn,
              const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  arch::q4_rows<T, 4>(w, sglc::Q4KScales{d, dmin, sc, mn}, act, t, r0, rows, n, bias, out);
}
template <typename T>
void q5k_tile(const uint8_t* w, const uint16_t* d, const uint16_t* dmin, const uint8_t* sc, const uint8_t* mn,
              const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  arch::q4_rows<T, 5>(w, sglc::Q4KScales{d, dmin, sc, mn}, act, t, r0, rows, n, bias, out);
}

template <typename T>
void q6k_tile(const uint8_t* w, const uint16_t* d, const int8_t* sc, const sglc_quantized_rows* act, int64_t t,
              int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  arch::q6k_rows<T>(w, d, sc, act, t, r0, rows, n, bias, out);
}

// The float-weight linears: bf16 or float16 tiles.
template <typename T>
void bf16w_tile(const uint16_t* w, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n,
                const void* bias, void* out) {
  arch::half_rows<T, sglc::BF16Weights>(w, act, t, r0, rows, n, bias, out);
}
template <typename T>
void f16w_tile(const uint16_t* w, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n,
               const void* bias, void* out) {
  arch::half_rows<T, sglc::F16Weights>(w, act, t, r0, rows, n, bias, out);
}

void merge_state(float* m, float* l, float* acc, float m2, float l2, const float* acc2, int64_t d) {
  sglc::merge_state(m, l, acc, m2, l2, acc2, d);
}

const sglc_kernel_table kTable = {
    SGLC_KERNEL_ABI,
    SGLC_LEVEL_NAME,
    SGLC_INT_LINEAR,
    SGLC_ATTENTION,
    arch::kIntRowsPerPass,
    static_cast<int32_t>(arch::kRegisterHeadDim),
    arch::kRegisterMaxGroup,
    {sglc::rms_norm_rows<float>, sglc::rms_norm_rows<bf16>, sglc::rms_norm_rows<f16>, sglc::rms_norm_rows<double>},
    {sglc::add_rms_norm_rows<float>, sglc::add_rms_norm_rows<bf16>, sglc::add_rms_norm_rows<f16>,
     sglc::add_rms_norm_rows<double>},
    {sglc::rope_rows<float>, sglc::rope_rows<bf16>, sglc::rope_rows<f16>, sglc::rope_rows<double>},
    {sglc::silu_mul_rows<float>, sglc::silu_mul_rows<bf16>, sglc::silu_mul_rows<f16>, sglc::silu_mul_rows<double>},
    {sglc::gelu_tanh_mul_rows<float>, sglc::gelu_tanh_mul_rows<bf16>, sglc::gelu_tanh_mul_rows<f16>,
     sglc::gelu_tanh_mul_rows<double>},
    {attend<float>, attend<bf16>, attend<f16>, attend<double>},
    {shared_prefix<float>, shared_prefix<bf16>, shared_prefix<f16>, shared_prefix<double>},
    merge_state,
    {sglc::write_normalised<float>, sglc::write_normalised<bf16>, sglc::write_normalised<f16>,
     sglc::write_normalised<double>},
    {arch::quantize_rows<float>, arch::quantize_rows<bf16>, arch::quantize_rows<f16>},
    {q8_tile<float>, q8_tile<bf16>, q8_tile<f16>},
    {q4_tile<float>, q4_tile<bf16>, q4_tile<f16>},
    {q8b_tile<float>, q8b_tile<bf16>, q8b_tile<f16>},
    {q4k_tile<float>, q4k_tile<bf16>, q4k_tile<f16>},
    {q6k_tile<float>, q6k_tile<bf16>, q6k_tile<f16>},
    {q5_tile<float>, q5_tile<bf16>, q5_tile<f16>},
    {q5k_tile<float>, q5k_tile<bf16>, q5k_tile<f16>},
    SGLC_HALF_LINEAR,
    sglc::kHalfRowsPerPass,
    {bf16w_tile<float>, bf16w_tile<bf16>, bf16w_tile<f16>},
    {f16w_tile<float>, f16w_tile<bf16>, f16w_tile<f16>},
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const sglc_kernel_table* sglc_kernels(void) { return &kTable; }

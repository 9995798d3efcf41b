// The generic variant: portable C++ only (the compiler vectorises the loops for the target's
// baseline: SSE2 on x86-64, NEON on aarch64). Every op exists, so any CPU runs the same
// operations; the integer linears are the scalar reference, slower than torch's own kernels, so
// capabilities.py sends them to torch at this level.
#pragma once

#include "../../common/attention.h"
#include "../../common/half_linear.h"
#include "../../common/int_linear.h"

namespace sglc::generic {

constexpr int kIntRowsPerPass = 8;
constexpr int64_t kRegisterHeadDim = 0;
constexpr int kRegisterMaxGroup = 0;

template <typename T>
bool attend_registers(const T*, int64_t, const T*, const T*, int64_t, const int64_t*, int64_t, int64_t, int64_t, int64_t,
                      float, float, float*, float*, float*, float*) {
  return false;
}

inline void add_weighted_rows(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int64_t n,
                              float* acc, int64_t acc_stride, int64_t nr) {
  add_weighted_rows_generic(p, p_stride, v, v_stride, n, acc, acc_stride, nr);
}

template <typename T>
void quantize_rows(const void* x, int64_t stride, int64_t rows, int64_t k, int8_t* q, float* dx, float* sx,
                   int32_t* sq, int32_t* sq16) {
  quantize_rows_ref<T>(x, stride, rows, k, q, dx, sx, sq, sq16);
}

template <typename T>
void q8_rows(const int8_t* w, const float* scales, const uint16_t* block_d, const sglc_quantized_rows* act, int64_t t,
             int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  if (block_d != nullptr) return q8b_tile_ref<T>(w, block_d, act, t, r0, rows, n, bias, out);
  q8_tile_ref<T>(w, scales, act, t, r0, rows, n, bias, out);
}

template <typename T>
void q6k_rows(const uint8_t* w, const uint16_t* d, const int8_t* sc, const sglc_quantized_rows* act, int64_t t,
              int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  q6k_tile_ref<T>(w, d, sc, act, t, r0, rows, n, bias, out);
}

template <typename T, int Bits, typename Scales>
void q4_rows(const uint8_t* w, const Scales& sc, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows,
             int64_t n, const void* bias, void* out) {
  q4_tile_scaled_ref<T, Bits>(w, sc, act, t, r0, rows, n, bias, out);
}

template <typename T, typename W>
void half_rows(const uint16_t* w, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n,
               const void* bias, void* out) {
  half_tile_ref<T, W>(w, act, t, r0, rows, n, bias, out);
}

}  // namespace sglc::generic

// The contract between the torch binding (binding/cpu_ops.cpp) and one kernel variant.
//
// A variant is this directory compiled for one instruction set (generic C++, AVX2+FMA+F16C,
// AVX512 with VNNI, NEON with dotprod) into a shared library of its own, the way ggml builds one
// CPU backend per instruction set and loads the best at run time. The binding checks arguments,
// spreads work over ATen's thread pool and calls the active variant's table for each piece of
// work; nothing here includes torch, so the same sources build and run anywhere (cross-compiled
// for aarch64 and run under qemu in the tests).
//
// Pointers to element data are void*, typed by the table slot they are passed to: slot
// [SGLC_F32] takes float, [SGLC_BF16] bfloat16, [SGLC_F16] IEEE half, [SGLC_F64] double.
#pragma once

#include <stdint.h>

#define SGLC_KERNEL_ABI 7

#ifdef __cplusplus
extern "C" {
#endif

enum sglc_dtype { SGLC_F32 = 0, SGLC_BF16 = 1, SGLC_F16 = 2, SGLC_F64 = 3, SGLC_NUM_DTYPES = 4 };
// The integer linears' activation/output dtypes: f32, bf16, f16 (no f64).
#define SGLC_NUM_INT_DTYPES 3

// Activation rows quantized to int8 per block of 32 inputs (llama.cpp's Q8_0 / Q8_1 rows):
// x[r, 32b + i] ~ dx[r, b] * q[r, 32b + i]; sx = dx * sum(q), sq = sum(q) per block, sq16 = sum(q)
// per half block (16 inputs: the scale groups of Q6_K). x and x_stride are the rows themselves
// (the slot's dtype, x_stride elements apart): what the float-weight tiles read instead of the
// levels (which a call with only float-weight tiles leaves unset).
struct sglc_quantized_rows {
  const int8_t* q;    // [rows, k]
  const float* dx;    // [rows, k / 32]
  const float* sx;    // [rows, k / 32]
  const int32_t* sq;  // [rows, k / 32]
  const int32_t* sq16;  // [rows, k / 16]
  int64_t k;
  const void* x;      // [rows, k], rows x_stride elements apart
  int64_t x_stride;
};

// --- the fused small ops of a decoder layer (rows [0, rows) of each operand) ---
// out = x / sqrt(mean(x^2) + eps) * w
typedef void (*sglc_rms_norm_fn)(const void* x, int64_t x_stride, const void* w, void* out, int64_t out_stride,
                                 int64_t rows, int64_t d, float eps);
// h += delta (rounded to h's dtype); out = rms_norm(h)
typedef void (*sglc_add_rms_norm_fn)(void* h, int64_t h_stride, const void* delta, int64_t delta_stride,
                                     const void* w, void* out, int64_t out_stride, int64_t rows, int64_t d,
                                     float eps);
// rotates the first num_heads heads of each row in place (Hugging Face's rotate_half layout)
typedef void (*sglc_rope_fn)(void* x, int64_t x_stride, const int64_t* positions, const float* cos,
                             const float* sin, int64_t rows, int64_t num_heads, int64_t head_dim);
// out[r] = silu(gate[r]) * up[r], gate_up rows = [gate | up]; gelu_tanh_mul (GeGLU) has the same
// signature: out[r] = gelu_tanh(gate[r]) * up[r] (GELU's tanh approximation)
typedef void (*sglc_silu_mul_fn)(const void* gate_up, int64_t stride, void* out, int64_t out_stride, int64_t rows,
                                 int64_t inter);

// --- decode attention ---
// The attention state of one request's `heads` query rows (q rows q_stride apart) over the keys
// slots[0, len): key t of kv head g is k + slots[t] * row_stride + g * d; query head h reads kv
// head h / group. Writes m, l [heads] (max score, sum of exp) and acc [heads * d] (unnormalised
// P.V). scratch: at least sglc_attend_scratch(heads, kv_heads, d, len) floats. softcap > 0: each
// (scaled) score s becomes softcap * tanh(s / softcap) before the softmax (Gemma 2); 0: none.
typedef void (*sglc_attend_fn)(const void* q, int64_t q_stride, const void* k, const void* v, int64_t row_stride,
                               const int64_t* slots, int64_t len, int64_t heads, int64_t group, int64_t d,
                               float scale, float softcap, float* scratch, float* m, float* l, float* acc);
// The state of `rows` query rows of one kv head over shared-prefix keys (cascade): qt [d][nc * 16]
// (rows transposed, scaled, padding zero). s: [len * nc * 16], kv: [16 * dp] scratch (dp = d
// rounded up to 64). Writes m, l [nc * 16] and acc [rows * dp]. softcap as for sglc_attend_fn.
typedef void (*sglc_shared_prefix_fn)(int nc, const float* qt, int64_t rows, const void* k, const void* v,
                                      int64_t row_stride, int64_t head_off, const int64_t* slots, int64_t len,
                                      int64_t d, int64_t dp, float softcap, float* s, float* kv, float* m, float* l,
                                      float* acc);
// (m, l, acc) <- the merge of itself with (m2, l2, acc2): one query row of d values
typedef void (*sglc_merge_state_fn)(float* m, float* l, float* acc, float m2, float l2, const float* acc2, int64_t d);
// out[0, d) = acc / l in the slot's dtype
typedef void (*sglc_write_normalised_fn)(const float* acc, float l, int64_t d, void* out);

// --- weight-only integer linears (16 output channels per tile, blocks of 32 inputs) ---
// x rows [0, rows) -> their quantization (see sglc_quantized_rows; q/dx/sx/sq/sq16 sized by the caller)
typedef void (*sglc_quantize_rows_fn)(const void* x, int64_t stride, int64_t rows, int64_t k, int8_t* q, float* dx,
                                      float* sx, int32_t* sq, int32_t* sq16);
// out[r0 + r, 16t : 16t + 16] for r < rows (<= rows_per_pass) from tile t of int8 weights
// [tiles, k/32, 8, 64] (byte 4c + j of load i of a block: input 4i + j of channel c) and one
// scale per channel; bias [n] or NULL; out rows n apart.
typedef void (*sglc_q8_tile_fn)(const int8_t* w, const float* scales, const struct sglc_quantized_rows* act,
                                int64_t t, int64_t r0, int rows, int64_t n, const void* bias, void* out);
// The same for Q4_1 levels [tiles, k/32, 4, 64] (low nibble: input 4i + j, high: 16 + 4i + j)
// with float16 d and m [tiles, k/32, 16]: w = d * q + m.
typedef void (*sglc_q4_tile_fn)(const uint8_t* w, const uint16_t* d, const uint16_t* m,
                                const struct sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n,
                                const void* bias, void* out);
// GGUF's Q8_0: the q8 tiles' levels with a float16 scale per block and channel d [tiles, k/32, 16]:
// w = d * q.
typedef void (*sglc_q8b_tile_fn)(const int8_t* w, const uint16_t* d, const struct sglc_quantized_rows* act, int64_t t,
                                 int64_t r0, int rows, int64_t n, const void* bias, void* out);
// GGUF's Q4_K: levels in q4 tiles; float16 d and dmin per super-block of 256 inputs [tiles,
// k/256, 16], 6-bit scale and min per block as bytes sc, mn [tiles, k/32, 16]:
// w = (d * sc) * q - (dmin * mn).
// GGUF's Q6_K: 6-bit levels (0..63) as q6k tiles [tiles, k/32, 6, 64] (a q4 tile of the low 4 bits,
// then two loads of the high 2 bits: common/int_linear.h); float16 d per
// super-block of 256 inputs [tiles, k/256, 16] and an int8 scale per 16 inputs [tiles, k/16, 16]:
// w = (d * sc) * (q - 32).
typedef void (*sglc_q6k_tile_fn)(const uint8_t* w, const uint16_t* d, const int8_t* sc,
                                 const struct sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n,
                                 const void* bias, void* out);
typedef void (*sglc_q4k_tile_fn)(const uint8_t* w, const uint16_t* d, const uint16_t* dmin, const uint8_t* sc,
                                 const uint8_t* mn, const struct sglc_quantized_rows* act, int64_t t, int64_t r0,
                                 int rows, int64_t n, const void* bias, void* out);

// GGUF's Q5_0 / Q5_1 / Q5_K: 5-bit levels (0..31) as q5 tiles [tiles, k/32, 5, 64] (a q4 tile of the
// low 4 bits, then one load of the fifth bits: common/int_linear.h). q5_tile takes Q4_1's d and
// m per block (Q5_1: w = d * q + m), or m NULL for Q5_0 (w = d * (q - 16)); q5k_tile Q4_K's
// scales and mins.

// --- float-weight linears (bf16 or float16 weights as shipped, 16 output channels per tile) ---
// out[r0 + r, 16t : 16t + 16] for r < rows (<= half_rows_per_pass) from tile t of half tiles
// uint16 [tiles, k, 16] (element 16 i + c: input i of channel c; bf16 or IEEE half bits by the
// table slot) and act's rows x, in float32 with one fused multiply-add per input in input order;
// bias [n] or NULL; out rows n apart.
typedef void (*sglc_half_tile_fn)(const uint16_t* w, const struct sglc_quantized_rows* act, int64_t t, int64_t r0,
                                  int rows, int64_t n, const void* bias, void* out);

struct sglc_kernel_table {
  int32_t abi;                 // SGLC_KERNEL_ABI
  const char* level;           // "generic", "avx2", "avx512", "neon_dotprod"
  const char* int_linear;      // what the integer linears run on, e.g. "avx512-vnni"
  const char* attention;       // what the register attention kernel runs on, or "generic loop"
  int32_t int_rows_per_pass;   // rows one q8/q4 tile call takes at most
  int32_t register_head_dim;   // the attention kernel holds queries in registers for this head_dim
  int32_t register_max_group;  // ... and up to this many query heads per kv head (0: never)

  sglc_rms_norm_fn rms_norm[SGLC_NUM_DTYPES];
  sglc_add_rms_norm_fn add_rms_norm[SGLC_NUM_DTYPES];
  sglc_rope_fn rope[SGLC_NUM_DTYPES];
  sglc_silu_mul_fn silu_mul[SGLC_NUM_DTYPES];
  sglc_silu_mul_fn gelu_tanh_mul[SGLC_NUM_DTYPES];

  sglc_attend_fn attend[SGLC_NUM_DTYPES];
  sglc_shared_prefix_fn shared_prefix[SGLC_NUM_DTYPES];
  sglc_merge_state_fn merge_state;
  sglc_write_normalised_fn write_normalised[SGLC_NUM_DTYPES];

  sglc_quantize_rows_fn quantize_rows[SGLC_NUM_INT_DTYPES];
  sglc_q8_tile_fn q8_tile[SGLC_NUM_INT_DTYPES];
  sglc_q4_tile_fn q4_tile[SGLC_NUM_INT_DTYPES];
  sglc_q8b_tile_fn q8b_tile[SGLC_NUM_INT_DTYPES];
  sglc_q4k_tile_fn q4k_tile[SGLC_NUM_INT_DTYPES];
  sglc_q6k_tile_fn q6k_tile[SGLC_NUM_INT_DTYPES];
  sglc_q4_tile_fn q5_tile[SGLC_NUM_INT_DTYPES];
  sglc_q4k_tile_fn q5k_tile[SGLC_NUM_INT_DTYPES];
  const char* half_linear;     // what the float-weight linears run on, e.g. "avx2 fma"
  int32_t half_rows_per_pass;  // rows one half tile call takes at most
  sglc_half_tile_fn bf16w_tile[SGLC_NUM_INT_DTYPES];
  sglc_half_tile_fn f16w_tile[SGLC_NUM_INT_DTYPES];
};

// Scratch floats sglc_attend_fn needs.
static inline int64_t sglc_attend_scratch(int64_t heads, int64_t kv_heads, int64_t d, int64_t len) {
  return heads * d + heads * len + kv_heads * d;
}

// Every variant library exports exactly this symbol.
const struct sglc_kernel_table* sglc_kernels(void);

#ifdef __cplusplus
}
#endif

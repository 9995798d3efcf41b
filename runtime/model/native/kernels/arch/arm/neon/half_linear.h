// The float-weight linears on NEON (common/half_linear.h): a tile's 16 channels are 4 registers;
// each input's 16 weights are widened once (bf16: shift into the high half; half: fcvtl) and
// multiplied into up to 4 rows with vfmaq_n_f32 (a fused multiply-add, as the reference's).
#pragma once

#include <arm_neon.h>

#include "../../../common/half_linear.h"
#include "int_linear.h"  // load4, store_tile, kIntRowsPerPass

namespace sglc::neon {

inline float32x4_t widen4(const uint16_t* p, BF16Weights) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
inline float32x4_t widen4(const uint16_t* p, F16Weights) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

template <int R, typename T, typename W>
void half_tile_rows(const uint16_t* w, const sglc_quantized_rows* act, int64_t t, int64_t r0, int64_t n,
                    const void* bias, void* out) {
  const int64_t k = act->k, stride = act->x_stride;
  const uint16_t* wt = w + t * k * kQTile;
  const T* x = static_cast<const T*>(act->x) + r0 * stride;
  float32x4_t acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = vdupq_n_f32(0.f);
  float xf[R][kQBlock];
  for (int64_t b = 0; b < k; b += kQBlock) {
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < 8; ++j) vst1q_f32(xf[r] + 4 * j, load4(x + r * stride + b + 4 * j));
    const uint16_t* wb = wt + b * kQTile;
    for (int i = 0; i < kQBlock; ++i) {
      float32x4_t wv[4];
      for (int c = 0; c < 4; ++c) wv[c] = widen4(wb + kQTile * i + 4 * c, W{});
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < 4; ++c) acc[r][c] = vfmaq_n_f32(acc[r][c], wv[c], xf[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) store_tile(acc[r], bias, t, static_cast<T*>(out) + (r0 + r) * n + t * kQTile);
}

template <typename T, typename W>
void half_rows(const uint16_t* w, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n,
               const void* bias, void* out) {
  switch (rows) {
    case 1: return half_tile_rows<1, T, W>(w, act, t, r0, n, bias, out);
    case 2: return half_tile_rows<2, T, W>(w, act, t, r0, n, bias, out);
    case 3: return half_tile_rows<3, T, W>(w, act, t, r0, n, bias, out);
    case 4: return half_tile_rows<4, T, W>(w, act, t, r0, n, bias, out);
    default:  // NOTE: more rows (prefill): groups of 4, each widening the weights again
      for (int g = 0; g < rows; g += 4) half_rows<T, W>(w, act, t, r0 + g, std::min(4, rows - g), n, bias, out);
  }
}

}  // namespace sglc::neon

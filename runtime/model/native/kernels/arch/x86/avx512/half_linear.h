// The float-weight linears on AVX512F (common/half_linear.h): a tile's 16 channels are one
// register; each input's 16 weights are widened (bf16: zero-extend and shift into the high half;
// half: vcvtph2ps) and multiplied into up to 8 rows. The rows' inputs are widened to float32 32 at
// a time into a small buffer and broadcast from there. More rows (prefill) widen a block of 32
// inputs once into an L1 buffer and run every group of 8 rows over it (as the AVX2 variant does).
#pragma once

#include <immintrin.h>

#include "../../../common/half_linear.h"
#include "int_linear.h"  // load16_any, store_tile, add_bias, kIntRowsPerPass

namespace sglc::avx512 {

inline __m512 widen16(const uint16_t* p, BF16Weights) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
inline __m512 widen16(const uint16_t* p, F16Weights) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

template <int R, typename T, typename W>
void half_tile_rows(const uint16_t* w, const sglc_quantized_rows* act, int64_t t, int64_t r0, int64_t n,
                    const void* bias, void* out) {
  const int64_t k = act->k, stride = act->x_stride;
  const uint16_t* wt = w + t * k * kQTile;
  const T* x = static_cast<const T*>(act->x) + r0 * stride;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  alignas(64) float xf[R][kQBlock];
  for (int64_t b = 0; b < k; b += kQBlock) {
    for (int r = 0; r < R; ++r) {
      _mm512_store_ps(xf[r], load16_any(x + r * stride + b));
      _mm512_store_ps(xf[r] + 16, load16_any(x + r * stride + b + 16));
    }
    const uint16_t* wb = wt + b * kQTile;
    for (int i = 0; i < kQBlock; ++i) {
      const __m512 wv = widen16(wb + kQTile * i, W{});
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(xf[r][i]), wv, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) store_tile(static_cast<T*>(out) + (r0 + r) * n + t * kQTile, add_bias<T>(acc[r], bias, t));
}

// R rows' sums (acc: R x 16 floats) over one block of 32 inputs of widened weights wf [32][16].
template <int R, typename T>
inline void half_block_rows(const float* wf, const T* x, int64_t stride, float* acc) {
  __m512 a[R];
  alignas(64) float xf[R][kQBlock];
  for (int r = 0; r < R; ++r) {
    a[r] = _mm512_load_ps(acc + kQTile * r);
    _mm512_store_ps(xf[r], load16_any(x + r * stride));
    _mm512_store_ps(xf[r] + 16, load16_any(x + r * stride + 16));
  }
  for (int i = 0; i < kQBlock; ++i) {
    const __m512 wv = _mm512_load_ps(wf + kQTile * i);
    for (int r = 0; r < R; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(xf[r][i]), wv, a[r]);
  }
  for (int r = 0; r < R; ++r) _mm512_store_ps(acc + kQTile * r, a[r]);
}

template <typename T>
inline void half_block_tail(int rows, const float* wf, const T* x, int64_t stride, float* acc) {
  switch (rows) {
    case 7: return half_block_rows<7>(wf, x, stride, acc);
    case 6: return half_block_rows<6>(wf, x, stride, acc);
    case 5: return half_block_rows<5>(wf, x, stride, acc);
    case 4: return half_block_rows<4>(wf, x, stride, acc);
    case 3: return half_block_rows<3>(wf, x, stride, acc);
    case 2: return half_block_rows<2>(wf, x, stride, acc);
    case 1: return half_block_rows<1>(wf, x, stride, acc);
    default: return;
  }
}

template <typename T, typename W>
void half_tile_many(const uint16_t* w, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n,
                    const void* bias, void* out) {
  const int64_t k = act->k, stride = act->x_stride;
  const uint16_t* wt = w + t * k * kQTile;
  const T* x = static_cast<const T*>(act->x) + r0 * stride;
  alignas(64) float wf[kQBlock * kQTile];
  alignas(64) float acc[kHalfRowsPerPass * kQTile];
  std::memset(acc, 0, sizeof(float) * kQTile * rows);  // NOTE: only the rows of this call
  for (int64_t b = 0; b < k; b += kQBlock) {
    const uint16_t* wb = wt + b * kQTile;
    for (int i = 0; i < kQBlock * kQTile; i += kQTile) _mm512_store_ps(wf + i, widen16(wb + i, W{}));
    int g = 0;
    for (; g + 8 <= rows; g += 8) half_block_rows<8>(wf, x + g * stride + b, stride, acc + kQTile * g);
    half_block_tail(rows - g, wf, x + g * stride + b, stride, acc + kQTile * g);
  }
  for (int r = 0; r < rows; ++r) {
    store_tile(static_cast<T*>(out) + (r0 + r) * n + t * kQTile, add_bias<T>(_mm512_load_ps(acc + kQTile * r), bias, t));
  }
}

template <typename T, typename W>
void half_rows(const uint16_t* w, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n,
               const void* bias, void* out) {
  switch (rows) {
    case 1: return half_tile_rows<1, T, W>(w, act, t, r0, n, bias, out);
    case 2: return half_tile_rows<2, T, W>(w, act, t, r0, n, bias, out);
    case 3: return half_tile_rows<3, T, W>(w, act, t, r0, n, bias, out);
    case 4: return half_tile_rows<4, T, W>(w, act, t, r0, n, bias, out);
    case 5: return half_tile_rows<5, T, W>(w, act, t, r0, n, bias, out);
    case 6: return half_tile_rows<6, T, W>(w, act, t, r0, n, bias, out);
    case 7: return half_tile_rows<7, T, W>(w, act, t, r0, n, bias, out);
    case 8: return half_tile_rows<8, T, W>(w, act, t, r0, n, bias, out);
    default: return half_tile_many<T, W>(w, act, t, r0, rows, n, bias, out);
  }
}

}  // namespace sglc::avx512

// The float-weight linears on AVX2 + FMA + F16C (common/half_linear.h): a tile's 16 channels are
// two halves of 8 lanes; each input's 16 weights are widened (bf16: zero-extend and shift into the
// high half; half: vcvtph2ps) and multiplied into up to 4 rows (8 accumulators). The rows' inputs
// are widened to float32 32 at a time into a small buffer and broadcast from there.
// Up to 4 rows (decode) widen each weight as it streams in. More rows (prefill) widen a block of 32
// inputs once into an L1 buffer and run every group of 6 rows over it (12 accumulators), their
// sums kept in a buffer between blocks: widening per group of 4 rows left the FMA ports idle a
// third of the time (64 rows x 4096 x 1024, one thread: 9.5 ms per group, 5.5 ms this way).
#pragma once

#include <immintrin.h>

#include "../../../common/half_linear.h"
#include "int_linear.h"  // load8, store8, add_bias8, kIntRowsPerPass

namespace sglc::avx2 {

inline __m256 widen8(const uint16_t* p, BF16Weights) {
  const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
inline __m256 widen8(const uint16_t* p, F16Weights) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

template <int R, typename T, typename W>
void half_tile_rows(const uint16_t* w, const sglc_quantized_rows* act, int64_t t, int64_t r0, int64_t n,
                    const void* bias, void* out) {
  const int64_t k = act->k, stride = act->x_stride;
  const uint16_t* wt = w + t * k * kQTile;
  const T* x = static_cast<const T*>(act->x) + r0 * stride;
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  alignas(32) float xf[R][kQBlock];
  for (int64_t b = 0; b < k; b += kQBlock) {
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < 4; ++j) _mm256_store_ps(xf[r] + 8 * j, load8(x + r * stride + b + 8 * j));
    }
    const uint16_t* wb = wt + b * kQTile;
    for (int i = 0; i < kQBlock; ++i) {
      const __m256 w0 = widen8(wb + kQTile * i, W{}), w1 = widen8(wb + kQTile * i + 8, W{});
      for (int r = 0; r < R; ++r) {
        const __m256 xv = _mm256_broadcast_ss(&xf[r][i]);
        acc[r][0] = _mm256_fmadd_ps(xv, w0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(xv, w1, acc[r][1]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    T* o = static_cast<T*>(out) + (r0 + r) * n + t * kQTile;
    for (int h = 0; h < 2; ++h) store8(o + 8 * h, add_bias8<T>(acc[r][h], bias, t * kQTile + 8 * h));
  }
}

// R rows' sums (acc: R x 16 floats) over one block of 32 inputs of widened weights wf [32][16].
template <int R, typename T>
inline void half_block_rows(const float* wf, const T* x, int64_t stride, float* acc) {
  __m256 a[R][2];
  alignas(32) float xf[R][kQBlock];
  for (int r = 0; r < R; ++r) {
    a[r][0] = _mm256_load_ps(acc + kQTile * r);
    a[r][1] = _mm256_load_ps(acc + kQTile * r + 8);
    for (int j = 0; j < 4; ++j) _mm256_store_ps(xf[r] + 8 * j, load8(x + r * stride + 8 * j));
  }
  for (int i = 0; i < kQBlock; ++i) {
    const __m256 w0 = _mm256_load_ps(wf + kQTile * i), w1 = _mm256_load_ps(wf + kQTile * i + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_broadcast_ss(&xf[r][i]);
      a[r][0] = _mm256_fmadd_ps(xv, w0, a[r][0]);
      a[r][1] = _mm256_fmadd_ps(xv, w1, a[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(acc + kQTile * r, a[r][0]);
    _mm256_store_ps(acc + kQTile * r + 8, a[r][1]);
  }
}

template <typename T, typename W>
void half_tile_many(const uint16_t* w, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n,
                    const void* bias, void* out) {
  const int64_t k = act->k, stride = act->x_stride;
  const uint16_t* wt = w + t * k * kQTile;
  const T* x = static_cast<const T*>(act->x) + r0 * stride;
  alignas(32) float wf[kQBlock * kQTile];
  alignas(32) float acc[kHalfRowsPerPass * kQTile];
  std::memset(acc, 0, sizeof(float) * kQTile * rows);  // NOTE: only the rows of this call
  for (int64_t b = 0; b < k; b += kQBlock) {
    const uint16_t* wb = wt + b * kQTile;
    for (int i = 0; i < kQBlock * kQTile; i += 8) _mm256_store_ps(wf + i, widen8(wb + i, W{}));
    int g = 0;
    for (; g + 6 <= rows; g += 6) half_block_rows<6>(wf, x + g * stride + b, stride, acc + kQTile * g);
    switch (rows - g) {
      case 5: half_block_rows<5>(wf, x + g * stride + b, stride, acc + kQTile * g); break;
      case 4: half_block_rows<4>(wf, x + g * stride + b, stride, acc + kQTile * g); break;
      case 3: half_block_rows<3>(wf, x + g * stride + b, stride, acc + kQTile * g); break;
      case 2: half_block_rows<2>(wf, x + g * stride + b, stride, acc + kQTile * g); break;
      case 1: half_block_rows<1>(wf, x + g * stride + b, stride, acc + kQTile * g); break;
      default: break;
    }
  }
  for (int r = 0; r < rows; ++r) {
    T* o = static_cast<T*>(out) + (r0 + r) * n + t * kQTile;
    for (int h = 0; h < 2; ++h) {
      store8(o + 8 * h, add_bias8<T>(_mm256_load_ps(acc + kQTile * r + 8 * h), bias, t * kQTile + 8 * h));
    }
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
    default: return half_tile_many<T, W>(w, act, t, r0, rows, n, bias, out);
  }
}

}  // namespace sglc::avx2

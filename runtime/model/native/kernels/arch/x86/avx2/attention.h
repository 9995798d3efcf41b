// AVX2+FMA decode attention: the register kernel for head_dim 64 and up to 4 query heads per kv
// head (16 ymm registers, half of AVX-512's 32 of half the width: the query rows stay in L1 and
// each key's converted 8-float chunk is used by every query head of its kv head; P.V keeps a
// column chunk of every head's accumulators in registers per pass over the keys), and the
// cascade's P.V update.
#pragma once

#include <immintrin.h>

#include "../../../common/attention.h"

namespace sglc::avx2 {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const bf16* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}
inline __m256 load8(const f16* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

// The horizontal sums of up to 4 vectors at once: three hadds and one add instead of four
// separate reductions.
template <int G>
inline void hsum_into(const __m256* s, float* out, int64_t stride) {
  if constexpr (G == 1) {
    out[0] = hsum(s[0]);
  } else {
    const __m256 z = _mm256_setzero_ps();
    const __m256 ab = _mm256_hadd_ps(s[0], s[1]);
    const __m256 cd = _mm256_hadd_ps(G > 2 ? s[2] : z, G > 3 ? s[3] : z);
    const __m256 abcd = _mm256_hadd_ps(ab, cd);  // per 128-bit half: a, b, c, d partial sums
    alignas(16) float r[4];
    _mm_store_ps(r, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
    for (int j = 0; j < G; ++j) out[j * stride] = r[j];
  }
}

constexpr int64_t kRegisterHeadDim = 64;
constexpr int kRegisterMaxGroup = 4;

// C: 8-float column chunks of every head's P.V accumulators kept per pass over the keys
// (G * C accumulators + G weights + one V chunk within the 16 registers).
template <int G>
constexpr int kValueChunks = G == 1 ? 8 : (G <= 3 ? 4 : 2);

// Scratch: scores [heads * len].
template <int G, typename T>
void attend_d64(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k, const T* __restrict__ v,
                int64_t row_stride, const int64_t* __restrict__ slots, int64_t len, int64_t kv_heads, float scale,
                float softcap, float* __restrict__ scores, float* __restrict__ m, float* __restrict__ l,
                float* __restrict__ acc) {
  constexpr int64_t d = 64;
  constexpr int64_t seg_bytes = d * static_cast<int64_t>(sizeof(T));
  constexpr int C = kValueChunks<G>;
  const __m256 sv = _mm256_set1_ps(scale);
  alignas(32) float qs[G][d];
  for (int64_t g = 0; g < kv_heads; ++g) {
    for (int j = 0; j < G; ++j) {
      for (int c = 0; c < 8; ++c) _mm256_store_ps(qs[j] + 8 * c, _mm256_mul_ps(load8(q + (g * G + j) * q_stride + 8 * c), sv));
    }
    float* sg = scores + g * G * len;
    const T* kg = k + g * d;
    for (int64_t t = 0; t < len; ++t) {
      if (t + kPrefetchAhead < len) prefetch_row(kg + slots[t + kPrefetchAhead] * row_stride, seg_bytes);
      const T* kr = kg + slots[t] * row_stride;
      __m256 s[G];
      for (int j = 0; j < G; ++j) s[j] = _mm256_setzero_ps();
      for (int c = 0; c < 8; ++c) {
        const __m256 kc = load8(kr + 8 * c);
        for (int j = 0; j < G; ++j) s[j] = _mm256_fmadd_ps(kc, _mm256_load_ps(qs[j] + 8 * c), s[j]);
      }
      hsum_into<G>(s, sg + t, len);
    }
    for (int j = 0; j < G; ++j) exponentiate_scores(sg + j * len, len, softcap, m[g * G + j], l[g * G + j]);
    const T* vg = v + g * d;
    for (int c0 = 0; c0 < 8; c0 += C) {
      __m256 a[G][C];
      for (int j = 0; j < G; ++j) {
        for (int c = 0; c < C; ++c) a[j][c] = _mm256_setzero_ps();
      }
      for (int64_t t = 0; t < len; ++t) {
        if (c0 == 0 && t + kPrefetchAhead < len) prefetch_row(vg + slots[t + kPrefetchAhead] * row_stride, seg_bytes);
        const T* vr = vg + slots[t] * row_stride + 8 * c0;
        __m256 p[G];
        for (int j = 0; j < G; ++j) p[j] = _mm256_broadcast_ss(sg + j * len + t);
        for (int c = 0; c < C; ++c) {
          const __m256 vc = load8(vr + 8 * c);
          for (int j = 0; j < G; ++j) a[j][c] = _mm256_fmadd_ps(p[j], vc, a[j][c]);
        }
      }
      for (int j = 0; j < G; ++j) {
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(acc + (g * G + j) * d + 8 * (c0 + c), a[j][c]);
      }
    }
  }
}

template <typename T>
bool attend_registers(const T* q, int64_t q_stride, const T* k, const T* v, int64_t row_stride, const int64_t* slots,
                      int64_t len, int64_t heads, int64_t group, int64_t d, float scale, float softcap,
                      float* scores, float* m, float* l, float* acc) {
  const int64_t kv_heads = heads / group;
  if (d != kRegisterHeadDim) return false;
  switch (group) {
    case 1: attend_d64<1>(q, q_stride, k, v, row_stride, slots, len, kv_heads, scale, softcap, scores, m, l, acc); return true;
    case 2: attend_d64<2>(q, q_stride, k, v, row_stride, slots, len, kv_heads, scale, softcap, scores, m, l, acc); return true;
    case 3: attend_d64<3>(q, q_stride, k, v, row_stride, slots, len, kv_heads, scale, softcap, scores, m, l, acc); return true;
    case 4: attend_d64<4>(q, q_stride, k, v, row_stride, slots, len, kv_heads, scale, softcap, scores, m, l, acc); return true;
    default: return false;
  }
}

// add_weighted_rows_generic with 2 rows x 32 columns of accumulators in registers per pass.
inline void add_weighted_rows(const float* __restrict__ p, int64_t p_stride, const float* __restrict__ v,
                              int64_t v_stride, int64_t n, float* __restrict__ acc, int64_t acc_stride, int64_t nr) {
  for (int64_t k0 = 0; k0 < nr; k0 += 2) {
    const int64_t rows = std::min<int64_t>(2, nr - k0);
    for (int c0 = 0; c0 < 8; c0 += 4) {
      __m256 a[2][4];
      for (int k = 0; k < 2; ++k) {
        for (int c = 0; c < 4; ++c) {
          a[k][c] = k < rows ? _mm256_loadu_ps(acc + (k0 + k) * acc_stride + 8 * (c0 + c)) : _mm256_setzero_ps();
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        const float* vi = v + i * v_stride + 8 * c0;
        // NOTE: p holds 4 readable values per i, so k0 + 1 may be read for a single row
        const __m256 p0 = _mm256_broadcast_ss(p + i * p_stride + k0), p1 = _mm256_broadcast_ss(p + i * p_stride + k0 + 1);
        for (int c = 0; c < 4; ++c) {
          const __m256 vc = _mm256_loadu_ps(vi + 8 * c);
          a[0][c] = _mm256_fmadd_ps(p0, vc, a[0][c]);
          a[1][c] = _mm256_fmadd_ps(p1, vc, a[1][c]);
        }
      }
      for (int64_t k = 0; k < rows; ++k) {
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(acc + (k0 + k) * acc_stride + 8 * (c0 + c), a[k][c]);
      }
    }
  }
}

}  // namespace sglc::avx2

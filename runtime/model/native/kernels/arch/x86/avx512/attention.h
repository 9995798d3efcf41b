// AVX-512 decode attention: the register kernel for head_dim 64 and up to 4 query heads per kv
// head, and the cascade's P.V update with its 4 x 64 accumulators in zmm registers.
#pragma once

#include <immintrin.h>

#include "../../../common/attention.h"

namespace sglc::avx512 {

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const bf16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 load16(const f16* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

// a[0:4] += p * v[0:4]: one 64-wide row of P.V accumulators updated by one weighted V row.
inline void add_scaled_row(__m512* __restrict__ a, __m512 p, const __m512* __restrict__ v) {
  for (int c = 0; c < 4; ++c) a[c] = _mm512_fmadd_ps(p, v[c], a[c]);
}

constexpr int64_t kRegisterHeadDim = 64;
constexpr int kRegisterMaxGroup = 4;

// One kv head at a time, its G query rows (scaled) and their accumulators held in registers
// through the keys: each key's 64 values are read once per kv head and only one horizontal sum
// per key and head is left (the generic loop reloads both from memory for every key and head).
// Scratch: scores [heads * len].
template <int G, typename T>
void attend_d64(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k, const T* __restrict__ v,
                int64_t row_stride, const int64_t* __restrict__ slots, int64_t len, int64_t kv_heads, float scale,
                float softcap, float* __restrict__ scores, float* __restrict__ m, float* __restrict__ l,
                float* __restrict__ acc) {
  constexpr int64_t d = 64;
  constexpr int64_t seg_bytes = d * static_cast<int64_t>(sizeof(T));
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t g = 0; g < kv_heads; ++g) {
    __m512 qv[G][4];
    for (int j = 0; j < G; ++j) {
      for (int c = 0; c < 4; ++c) qv[j][c] = _mm512_mul_ps(load16(q + (g * G + j) * q_stride + c * 16), sv);
    }
    float* sg = scores + g * G * len;
    const T* kg = k + g * d;
    for (int64_t t = 0; t < len; ++t) {
      if (t + kPrefetchAhead < len) prefetch_row(kg + slots[t + kPrefetchAhead] * row_stride, seg_bytes);
      const T* kr = kg + slots[t] * row_stride;
      const __m512 k0 = load16(kr), k1 = load16(kr + 16), k2 = load16(kr + 32), k3 = load16(kr + 48);
      for (int j = 0; j < G; ++j) {
        __m512 sj = _mm512_mul_ps(qv[j][0], k0);
        sj = _mm512_fmadd_ps(qv[j][1], k1, sj);
        sj = _mm512_fmadd_ps(qv[j][2], k2, sj);
        sj = _mm512_fmadd_ps(qv[j][3], k3, sj);
        sg[j * len + t] = _mm512_reduce_add_ps(sj);
      }
    }
    for (int j = 0; j < G; ++j) exponentiate_scores(sg + j * len, len, softcap, m[g * G + j], l[g * G + j]);
    __m512 a[G][4];
    for (int j = 0; j < G; ++j) {
      for (int c = 0; c < 4; ++c) a[j][c] = _mm512_setzero_ps();
    }
    const T* vg = v + g * d;
    for (int64_t t = 0; t < len; ++t) {
      if (t + kPrefetchAhead < len) prefetch_row(vg + slots[t + kPrefetchAhead] * row_stride, seg_bytes);
      const T* vr = vg + slots[t] * row_stride;
      const __m512 vt[4] = {load16(vr), load16(vr + 16), load16(vr + 32), load16(vr + 48)};
      for (int j = 0; j < G; ++j) add_scaled_row(a[j], _mm512_set1_ps(sg[j * len + t]), vt);
    }
    for (int j = 0; j < G; ++j) {
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(acc + (g * G + j) * d + c * 16, a[j][c]);
    }
  }
}

// The register kernel where it applies (returns false otherwise: the caller runs the generic loop).
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

// add_weighted_rows_generic with the 4 x 64 accumulators in registers, each V load used by 4 rows.
inline void add_weighted_rows(const float* __restrict__ p, int64_t p_stride, const float* __restrict__ v,
                              int64_t v_stride, int64_t n, float* __restrict__ acc, int64_t acc_stride, int64_t nr) {
  __m512 a[4][4];
  for (int k = 0; k < 4; ++k) {
    for (int c = 0; c < 4; ++c) a[k][c] = k < nr ? _mm512_loadu_ps(acc + k * acc_stride + c * 16) : _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* vi = v + i * v_stride;
    const __m512 vi4[4] = {_mm512_loadu_ps(vi), _mm512_loadu_ps(vi + 16), _mm512_loadu_ps(vi + 32),
                           _mm512_loadu_ps(vi + 48)};
    for (int k = 0; k < 4; ++k) add_scaled_row(a[k], _mm512_set1_ps(p[i * p_stride + k]), vi4);
  }
  for (int64_t k = 0; k < nr; ++k) {
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(acc + k * acc_stride + c * 16, a[k][c]);
  }
}

}  // namespace sglc::avx512

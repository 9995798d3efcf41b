// Decode attention pieces every variant shares: the generic per-request loop (any head layout,
// any dtype), the softmax-state algebra, and the cascade over a shared prefix. A variant adds
// its register kernel for the common layouts (arch/*/attention.h) and its add_weighted_rows.
//
// Attention state of query rows over a run of keys: per row m = the largest score, l = the sum
// of exp(score - m), acc = the sum of exp(score - m) * v (unnormalised). States over disjoint
// runs of keys merge exactly (merge_state): split-K pieces of one request and a shared prefix's
// chunks join each request's own keys this way.
#pragma once

#include <algorithm>
#include <cmath>

#include "convert.h"

namespace sglc {

constexpr int64_t kPrefetchAhead = 6;  // keys

// Touches the cache lines of a K/V row a few keys ahead: a step's K/V were last read one step
// (and all the weights) ago, so they come from DRAM, and slots need not be contiguous.
inline void prefetch_row(const void* row, int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
}

template <typename T>
inline float dot_row(const float* q, const T* k, int64_t d) {
  float acc = 0.f;
  _Pragma("omp simd reduction(+ : acc)")
  for (int64_t i = 0; i < d; ++i) acc += q[i] * to_float(k[i]);
  return acc;
}

// softcap > 0: s <- softcap * tanh(s / softcap) over s[0, n) (Gemma 2's attention soft-cap;
// scalar tanh, so every level caps alike).
inline void softcap_scores(float* __restrict__ s, int64_t n, float softcap) {
  if (softcap > 0.f) {
    for (int64_t t = 0; t < n; ++t) s[t] = softcap * std::tanh(s[t] / softcap);
  }
}

// Scores s[0, len) of one query row -> exp(s - m) in place (soft-capped first where softcap > 0);
// m = the largest score, l = their sum.
inline void exponentiate_scores(float* __restrict__ s, int64_t len, float softcap, float& m, float& l) {
  softcap_scores(s, len, softcap);
  float mh = s[0];
  _Pragma("omp simd reduction(max : mh)")
  for (int64_t t = 1; t < len; ++t) mh = std::max(mh, s[t]);
  float sum = 0.f;
  _Pragma("omp simd reduction(+ : sum)")
  for (int64_t t = 0; t < len; ++t) {
    const float e = exp_approx(s[t] - mh);
    s[t] = e;
    sum += e;
  }
  m = mh;
  l = sum;
}

inline void merge_state(float* m, float* l, float* __restrict__ acc, float m2, float l2,
                        const float* __restrict__ acc2, int64_t d) {
  const float mn = std::max(*m, m2);
  const float a = exp_approx(*m - mn), b = exp_approx(m2 - mn);
  *l = *l * a + l2 * b;
  *m = mn;
  _Pragma("omp simd")
  for (int64_t i = 0; i < d; ++i) acc[i] = acc[i] * a + acc2[i] * b;
}

template <typename T>
void write_normalised(const float* __restrict__ acc, float l, int64_t d, void* out) {
  const float inv = 1.f / l;
  T* o = static_cast<T*>(out);
  _Pragma("omp simd")
  for (int64_t i = 0; i < d; ++i) o[i] = from_float<T>(acc[i] * inv);
}

// The generic loop: key-major, each K/V row read once for all heads and converted to float once
// (kv heads are shared by `group` query heads). Scratch: qf [heads * d], scores [heads * len],
// row [row_stride].
template <typename T>
void attend_generic(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k, const T* __restrict__ v,
                    int64_t row_stride, const int64_t* __restrict__ slots, int64_t len, int64_t heads, int64_t group,
                    int64_t d, float scale, float softcap, float* __restrict__ scratch, float* __restrict__ m,
                    float* __restrict__ l, float* __restrict__ acc) {
  float* qf = scratch;
  float* scores = qf + heads * d;
  float* row = scores + heads * len;
  const int64_t row_bytes = row_stride * static_cast<int64_t>(sizeof(T));
  for (int64_t h = 0; h < heads; ++h) {
    _Pragma("omp simd")
    for (int64_t i = 0; i < d; ++i) qf[h * d + i] = to_float(q[h * q_stride + i]) * scale;
  }
  for (int64_t t = 0; t < len; ++t) {
    if (t + kPrefetchAhead < len) prefetch_row(k + slots[t + kPrefetchAhead] * row_stride, row_bytes);
    const T* kr = k + slots[t] * row_stride;
    _Pragma("omp simd")
    for (int64_t i = 0; i < row_stride; ++i) row[i] = to_float(kr[i]);
    for (int64_t h = 0; h < heads; ++h) scores[h * len + t] = dot_row(qf + h * d, row + (h / group) * d, d);
  }
  for (int64_t h = 0; h < heads; ++h) exponentiate_scores(scores + h * len, len, softcap, m[h], l[h]);
  std::fill(acc, acc + heads * d, 0.f);
  for (int64_t t = 0; t < len; ++t) {
    if (t + kPrefetchAhead < len) prefetch_row(v + slots[t + kPrefetchAhead] * row_stride, row_bytes);
    const T* vr = v + slots[t] * row_stride;
    _Pragma("omp simd")
    for (int64_t i = 0; i < row_stride; ++i) row[i] = to_float(vr[i]);
    for (int64_t h = 0; h < heads; ++h) {
      const float p = scores[h * len + t];
      const float* vh = row + (h / group) * d;
      float* ah = acc + h * d;
      _Pragma("omp simd")
      for (int64_t i = 0; i < d; ++i) ah[i] += p * vh[i];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Cascade over a prefix several decode requests share (the same slots: the radix cache hands
// every request that matched a prefix the same KV slots). The query rows of all sharing requests
// for one kv head (W = rows rounded up to 16) are transposed once, so each key's scores for all
// rows are d broadcast-FMAs of W-wide vectors, and each K/V row is converted once for them all.

constexpr int kLanes = 16;           // query rows per vector of scores
constexpr int64_t kValueBlock = 16;  // V rows converted at a time
constexpr int64_t kAccWidth = 64;    // accumulator columns of add_weighted_rows

// acc[k][0:64] += sum_i p[i * p_stride + k] * v[i * v_stride + 0:64] for the first nr of 4 rows
// k (p holds 4 readable values per i), over n rows of v. The portable form; variants with wide
// registers keep the 4 x 64 accumulators in them.
inline void add_weighted_rows_generic(const float* __restrict__ p, int64_t p_stride, const float* __restrict__ v,
                                      int64_t v_stride, int64_t n, float* __restrict__ acc, int64_t acc_stride,
                                      int64_t nr) {
  for (int64_t k = 0; k < nr; ++k) {
    float* ak = acc + k * acc_stride;
    for (int64_t i = 0; i < n; ++i) {
      const float pk = p[i * p_stride + k];
      _Pragma("omp simd")
      for (int64_t j = 0; j < kAccWidth; ++j) ak[j] += pk * v[i * v_stride + j];
    }
  }
}

// State of `rows` query rows over keys slots[0, len) of one kv head (at head_off in a slot's
// row); see sglc_shared_prefix_fn. AddRows: add_weighted_rows of the variant.
template <int NC, typename T, void (*AddRows)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t,
                                              int64_t)>
void shared_prefix_state(const float* __restrict__ qt, int64_t rows, const T* __restrict__ k, const T* __restrict__ v,
                         int64_t row_stride, int64_t head_off, const int64_t* __restrict__ slots, int64_t len,
                         int64_t d, int64_t dp, float softcap, float* __restrict__ s, float* __restrict__ kv,
                         float* __restrict__ m, float* __restrict__ l, float* __restrict__ acc) {
  constexpr int W = NC * kLanes;
  constexpr int64_t kKeys = NC <= 2 ? 16 / NC : 4;  // keys scored together
  const int64_t bytes = d * static_cast<int64_t>(sizeof(T));
  for (int64_t t0 = 0; t0 < len; t0 += kKeys) {
    const int64_t nk = std::min(kKeys, len - t0);
    for (int64_t i = 0; i < kKeys; ++i) {
      float* dst = kv + i * dp;
      if (i >= nk) {
        std::fill(dst, dst + d, 0.f);
        continue;
      }
      if (t0 + i + kPrefetchAhead < len) prefetch_row(k + slots[t0 + i + kPrefetchAhead] * row_stride + head_off, bytes);
      const T* kr = k + slots[t0 + i] * row_stride + head_off;
      _Pragma("omp simd")
      for (int64_t j = 0; j < d; ++j) dst[j] = to_float(kr[j]);
    }
    float a[kKeys][W];
    for (int64_t i = 0; i < kKeys; ++i) {
      _Pragma("omp simd")
      for (int c = 0; c < W; ++c) a[i][c] = 0.f;
    }
    for (int64_t j = 0; j < d; ++j) {
      const float* qj = qt + j * W;
      for (int64_t i = 0; i < kKeys; ++i) {
        const float x = kv[i * dp + j];
        _Pragma("omp simd")
        for (int c = 0; c < W; ++c) a[i][c] += x * qj[c];
      }
    }
    for (int64_t i = 0; i < nk; ++i) std::memcpy(s + (t0 + i) * W, a[i], sizeof(a[i]));
  }
  softcap_scores(s, len * W, softcap);
  float mx[W], sum[W];
  for (int c = 0; c < W; ++c) mx[c] = s[c];
  for (int64_t t = 1; t < len; ++t) {
    _Pragma("omp simd")
    for (int c = 0; c < W; ++c) mx[c] = std::max(mx[c], s[t * W + c]);
  }
  std::fill(sum, sum + W, 0.f);
  for (int64_t t = 0; t < len; ++t) {
    _Pragma("omp simd")
    for (int c = 0; c < W; ++c) {
      const float e = exp_approx(s[t * W + c] - mx[c]);
      s[t * W + c] = e;
      sum[c] += e;
    }
  }
  std::memcpy(m, mx, sizeof(mx));
  std::memcpy(l, sum, sizeof(sum));
  // P V: a block of V rows converted once, then every row's accumulator runs over the block.
  std::fill(acc, acc + rows * dp, 0.f);
  for (int64_t t0 = 0; t0 < len; t0 += kValueBlock) {
    const int64_t nb = std::min(kValueBlock, len - t0);
    for (int64_t i = 0; i < nb; ++i) {
      if (t0 + i + kPrefetchAhead < len) prefetch_row(v + slots[t0 + i + kPrefetchAhead] * row_stride + head_off, bytes);
      const T* vr = v + slots[t0 + i] * row_stride + head_off;
      float* dst = kv + i * dp;
      _Pragma("omp simd")
      for (int64_t j = 0; j < d; ++j) dst[j] = to_float(vr[j]);
    }
    // NOTE: four rows at a time share each V load (rows + 3 < W: W is a multiple of 16).
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
      const int64_t nr = std::min<int64_t>(4, rows - r0);
      for (int64_t j0 = 0; j0 < dp; j0 += kAccWidth) {
        AddRows(s + t0 * W + r0, W, kv + j0, dp, nb, acc + r0 * dp + j0, dp, nr);
      }
    }
  }
}

}  // namespace sglc

// NEON decode attention (aarch64): the register kernel for head_dim 64 and up to 4 query heads
// per kv head. 32 registers of 4 floats: each key's converted 4-float chunk is used by every query
// head of its kv head (query rows from L1), and P.V keeps a column chunk of every head's
// accumulators in registers per pass over the keys. The cascade uses the portable P.V update.
#pragma once

#include <arm_neon.h>

#include "../../../common/attention.h"

namespace sglc::neon {

inline float32x4_t load4(const float* p) { return vld1q_f32(p); }
inline float32x4_t load4(const bf16* p) {
  return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p)), 16));
}
inline float32x4_t load4(const f16* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
}

constexpr int64_t kRegisterHeadDim = 64;
constexpr int kRegisterMaxGroup = 4;

// 4-float column chunks of every head's accumulators per pass (G * C + G + 1 of 32 registers).
template <int G>
constexpr int kValueChunks = G == 1 ? 16 : (G <= 3 ? 8 : 4);

// Scratch: scores [heads * len].
template <int G, typename T>
void attend_d64(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k, const T* __restrict__ v,
                int64_t row_stride, const int64_t* __restrict__ slots, int64_t len, int64_t kv_heads, float scale,
                float softcap, float* __restrict__ scores, float* __restrict__ m, float* __restrict__ l,
                float* __restrict__ acc) {
  constexpr int64_t d = 64;
  constexpr int64_t seg_bytes = d * static_cast<int64_t>(sizeof(T));
  constexpr int C = kValueChunks<G>;
  alignas(16) float qs[G][d];
  for (int64_t g = 0; g < kv_heads; ++g) {
    for (int j = 0; j < G; ++j) {
      for (int c = 0; c < 16; ++c) vst1q_f32(qs[j] + 4 * c, vmulq_n_f32(load4(q + (g * G + j) * q_stride + 4 * c), scale));
    }
    float* sg = scores + g * G * len;
    const T* kg = k + g * d;
    for (int64_t t = 0; t < len; ++t) {
      if (t + kPrefetchAhead < len) prefetch_row(kg + slots[t + kPrefetchAhead] * row_stride, seg_bytes);
      const T* kr = kg + slots[t] * row_stride;
      float32x4_t s[G];
      for (int j = 0; j < G; ++j) s[j] = vdupq_n_f32(0.f);
      for (int c = 0; c < 16; ++c) {
        const float32x4_t kc = load4(kr + 4 * c);
        for (int j = 0; j < G; ++j) s[j] = vfmaq_f32(s[j], kc, vld1q_f32(qs[j] + 4 * c));
      }
      for (int j = 0; j < G; ++j) sg[j * len + t] = vaddvq_f32(s[j]);
    }
    for (int j = 0; j < G; ++j) exponentiate_scores(sg + j * len, len, softcap, m[g * G + j], l[g * G + j]);
    const T* vg = v + g * d;
    for (int c0 = 0; c0 < 16; c0 += C) {
      float32x4_t a[G][C];
      for (int j = 0; j < G; ++j) {
        for (int c = 0; c < C; ++c) a[j][c] = vdupq_n_f32(0.f);
      }
      for (int64_t t = 0; t < len; ++t) {
        if (c0 == 0 && t + kPrefetchAhead < len) prefetch_row(vg + slots[t + kPrefetchAhead] * row_stride, seg_bytes);
        const T* vr = vg + slots[t] * row_stride + 4 * c0;
        float p[G];
        for (int j = 0; j < G; ++j) p[j] = sg[j * len + t];
        for (int c = 0; c < C; ++c) {
          const float32x4_t vc = load4(vr + 4 * c);
          for (int j = 0; j < G; ++j) a[j][c] = vfmaq_n_f32(a[j][c], vc, p[j]);
        }
      }
      for (int j = 0; j < G; ++j) {
        for (int c = 0; c < C; ++c) vst1q_f32(acc + (g * G + j) * d + 4 * (c0 + c), a[j][c]);
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

inline void add_weighted_rows(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int64_t n,
                              float* acc, int64_t acc_stride, int64_t nr) {
  add_weighted_rows_generic(p, p_stride, v, v_stride, n, acc, acc_stride, nr);
}

}  // namespace sglc::neon

// The integer linears on NEON with the dotprod extension (ARMv8.2+: Apple M1 and later,
// Graviton 2+, Cortex-A76+): sdot multiplies 16 weight bytes (4 channels x 4 inputs) with 4
// activation bytes picked by lane and adds into each channel's int32 lane, vpdpbusd's shape on
// 128-bit registers, so a 16-channel tile is 4 registers. Q4_1 levels (0..15) and int8 weights
// both go in as signed bytes. Loads are unpacked once for up to 4 rows.
#pragma once

#include <arm_neon.h>

#include "../../../common/int_linear.h"
#include "attention.h"  // load4

namespace sglc::neon {

constexpr int kIntRowsPerPass = 4;

// quantize_rows_ref 4 floats at a time; vcvtnq rounds to nearest even as nearbyint does.
template <typename T>
void quantize_rows(const void* x, int64_t stride, int64_t rows, int64_t k, int8_t* q, float* dx, float* sx,
                   int32_t* sq, int32_t* sq16) {
  const int64_t blocks = k / kQBlock;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = static_cast<const T*>(x) + r * stride;
    for (int64_t b = 0; b < blocks; ++b) {
      float32x4_t v[8];
      float32x4_t mx = vdupq_n_f32(0.f);
      for (int i = 0; i < 8; ++i) {
        v[i] = load4(xr + b * kQBlock + 4 * i);
        mx = vmaxq_f32(mx, vabsq_f32(v[i]));
      }
      const float amax = vmaxvq_f32(mx);
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      int32x4_t sum[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
      int8_t* dst = q + r * k + b * kQBlock;
      for (int i = 0; i < 8; i += 2) {
        const int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(v[i], inv)), c = vcvtnq_s32_f32(vmulq_n_f32(v[i + 1], inv));
        sum[i / 4] = vaddq_s32(sum[i / 4], vaddq_s32(a, c));
        const int16x8_t h = vcombine_s16(vqmovn_s32(a), vqmovn_s32(c));
        vst1_s8(dst + 4 * i, vqmovn_s16(h));
      }
      const int64_t i = r * blocks + b;
      sq16[2 * i] = vaddvq_s32(sum[0]);
      sq16[2 * i + 1] = vaddvq_s32(sum[1]);
      sq[i] = sq16[2 * i] + sq16[2 * i + 1];
      dx[i] = amax / 127.f;
      sx[i] = dx[i] * static_cast<float>(sq[i]);
    }
  }
}

template <typename T>
inline void store4(T* out, float32x4_t v) {
  float tmp[4];
  vst1q_f32(tmp, v);
  for (int i = 0; i < 4; ++i) out[i] = from_float<T>(tmp[i]);
}
inline void store4(float* out, float32x4_t v) { vst1q_f32(out, v); }

template <typename T>
inline void store_tile(const float32x4_t* acc, const void* bias, int64_t t, T* out) {
  for (int c = 0; c < 4; ++c) {
    float32x4_t v = acc[c];
    if (bias != nullptr) v = vaddq_f32(v, load4(static_cast<const T*>(bias) + t * kQTile + 4 * c));
    store4(out + 4 * c, v);
  }
}

// sdot of a weight register with lane `lane` (0..3) of an activation register.
#define SGLC_SDOT_LANE(acc, w, x, lane) vdotq_laneq_s32(acc, w, x, lane)

inline float32x4_t load_half4(const uint16_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
inline float32x4_t load_byte4(const uint8_t* p) {
  const uint32_t lanes[4] = {p[0], p[1], p[2], p[3]};
  return vcvtq_f32_u32(vld1q_u32(lanes));
}

// Quarter `c` (4 channels) of a q4 tile's block scales and offsets (common/int_linear.h's policies).
inline void block_scales(const Q41Scales& s, int64_t t, int64_t b, int64_t blocks, int c, float32x4_t& dv,
                         float32x4_t& mv) {
  const int64_t sb = (t * blocks + b) * kQTile + 4 * c;
  dv = load_half4(s.d + sb);
  mv = load_half4(s.m + sb);
}
inline void block_scales(const Q50Scales& s, int64_t t, int64_t b, int64_t blocks, int c, float32x4_t& dv,
                         float32x4_t& mv) {
  dv = load_half4(s.d + (t * blocks + b) * kQTile + 4 * c);
  mv = vmulq_n_f32(dv, -16.f);
}
inline void block_scales(const Q4KScales& s, int64_t t, int64_t b, int64_t blocks, int c, float32x4_t& dv,
                         float32x4_t& mv) {
  const int64_t sup = (t * (blocks / kKBlocks) + b / kKBlocks) * kQTile + 4 * c;
  const int64_t sb = (t * blocks + b) * kQTile + 4 * c;
  dv = vmulq_f32(load_half4(s.d + sup), load_byte4(s.sc + sb));
  mv = vnegq_f32(vmulq_f32(load_half4(s.dmin + sup), load_byte4(s.mn + sb)));
}

// block_d: Q8_0's float16 scale per block and channel (applied per block); else one float scale
// per channel (at the end).
template <int R, typename T>
void q8_tile_rows(const int8_t* w, const float* scales, const uint16_t* block_d, const sglc_quantized_rows* act,
                  int64_t t, int64_t r0, int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  float32x4_t acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < 4; ++c) acc[r][c] = vdupq_n_f32(0.f);
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* wb = w + (t * blocks + b) * kQ8BlockBytes;
    int8x16_t x[R][2];
    int32x4_t s[R][4];
    for (int r = 0; r < R; ++r) {
      const int8_t* xq = act->q + (r0 + r) * k + b * kQBlock;
      x[r][0] = vld1q_s8(xq);
      x[r][1] = vld1q_s8(xq + 16);
      for (int c = 0; c < 4; ++c) s[r][c] = vdupq_n_s32(0);
    }
    for (int i = 0; i < 8; ++i) {
      int8x16_t wv[4];
      for (int c = 0; c < 4; ++c) wv[c] = vld1q_s8(wb + 64 * i + 16 * c);
      for (int r = 0; r < R; ++r) {
        for (int c = 0; c < 4; ++c) {
          switch (i) {  // NOTE: the lane must be a constant
            case 0: s[r][c] = SGLC_SDOT_LANE(s[r][c], wv[c], x[r][0], 0); break;
            case 1: s[r][c] = SGLC_SDOT_LANE(s[r][c], wv[c], x[r][0], 1); break;
            case 2: s[r][c] = SGLC_SDOT_LANE(s[r][c], wv[c], x[r][0], 2); break;
            case 3: s[r][c] = SGLC_SDOT_LANE(s[r][c], wv[c], x[r][0], 3); break;
            case 4: s[r][c] = SGLC_SDOT_LANE(s[r][c], wv[c], x[r][1], 0); break;
            case 5: s[r][c] = SGLC_SDOT_LANE(s[r][c], wv[c], x[r][1], 1); break;
            case 6: s[r][c] = SGLC_SDOT_LANE(s[r][c], wv[c], x[r][1], 2); break;
            default: s[r][c] = SGLC_SDOT_LANE(s[r][c], wv[c], x[r][1], 3); break;
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float dx = act->dx[(r0 + r) * blocks + b];
      for (int c = 0; c < 4; ++c) {
        if (block_d == nullptr) {
          acc[r][c] = vfmaq_n_f32(acc[r][c], vcvtq_f32_s32(s[r][c]), dx);
        } else {
          const float32x4_t bd = load_half4(block_d + (t * blocks + b) * kQTile + 4 * c);
          acc[r][c] = vfmaq_f32(acc[r][c], vcvtq_f32_s32(s[r][c]), vmulq_n_f32(bd, dx));
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    if (block_d == nullptr) {
      for (int c = 0; c < 4; ++c) acc[r][c] = vmulq_f32(acc[r][c], vld1q_f32(scales + t * kQTile + 4 * c));
    }
    store_tile(acc[r], bias, t, static_cast<T*>(out) + (r0 + r) * n + t * kQTile);
  }
}

// Bits 5 (q5 tiles): each nibble gets its fifth bit as bit 4 (plane bit i for the low nibbles of
// load i, bit 4 + i for the high ones); levels 0..31 still fit a signed byte.
template <int R, typename T, typename Scales, int Bits>
void q4_tile_rows(const uint8_t* w, const Scales& scales, const sglc_quantized_rows* act, int64_t t, int64_t r0,
                  int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  constexpr int64_t kBytes = block_bytes<Bits>();
  const uint8x16_t nibble = vdupq_n_u8(0x0F);
  float32x4_t acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < 4; ++c) acc[r][c] = vdupq_n_f32(0.f);
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + (t * blocks + b) * kBytes;
    int8x16_t x[R][2];
    int32x4_t s[R][4];
    for (int r = 0; r < R; ++r) {
      const int8_t* xq = act->q + (r0 + r) * k + b * kQBlock;
      x[r][0] = vld1q_s8(xq);
      x[r][1] = vld1q_s8(xq + 16);
      for (int c = 0; c < 4; ++c) s[r][c] = vdupq_n_s32(0);
    }
    for (int i = 0; i < 4; ++i) {
      int8x16_t lo[4], hi[4];
      for (int c = 0; c < 4; ++c) {
        const uint8x16_t wv = vld1q_u8(wb + 64 * i + 16 * c);
        uint8x16_t l = vandq_u8(wv, nibble), h = vshrq_n_u8(wv, 4);
        if constexpr (Bits == 5) {
          const uint8x16_t plane = vld1q_u8(wb + 256 + 16 * c), five = vdupq_n_u8(0x10);
          l = vorrq_u8(l, vandq_u8(vshlq_u8(plane, vdupq_n_s8(static_cast<int8_t>(4 - i))), five));
          h = vorrq_u8(h, vandq_u8(vshlq_u8(plane, vdupq_n_s8(static_cast<int8_t>(-i))), five));
        }
        lo[c] = vreinterpretq_s8_u8(l);
        hi[c] = vreinterpretq_s8_u8(h);
      }
      for (int r = 0; r < R; ++r) {
        for (int c = 0; c < 4; ++c) {
          switch (i) {  // low nibbles: inputs 4i + j (x[0] lane i); high: 16 + 4i + j (x[1] lane i)
            case 0:
              s[r][c] = SGLC_SDOT_LANE(s[r][c], lo[c], x[r][0], 0);
              s[r][c] = SGLC_SDOT_LANE(s[r][c], hi[c], x[r][1], 0);
              break;
            case 1:
              s[r][c] = SGLC_SDOT_LANE(s[r][c], lo[c], x[r][0], 1);
              s[r][c] = SGLC_SDOT_LANE(s[r][c], hi[c], x[r][1], 1);
              break;
            case 2:
              s[r][c] = SGLC_SDOT_LANE(s[r][c], lo[c], x[r][0], 2);
              s[r][c] = SGLC_SDOT_LANE(s[r][c], hi[c], x[r][1], 2);
              break;
            default:
              s[r][c] = SGLC_SDOT_LANE(s[r][c], lo[c], x[r][0], 3);
              s[r][c] = SGLC_SDOT_LANE(s[r][c], hi[c], x[r][1], 3);
              break;
          }
        }
      }
    }
    float32x4_t dv[4], mv[4];
    for (int c = 0; c < 4; ++c) block_scales(scales, t, b, blocks, c, dv[c], mv[c]);
    for (int r = 0; r < R; ++r) {
      const int64_t xb = (r0 + r) * blocks + b;
      for (int c = 0; c < 4; ++c) {
        acc[r][c] = vfmaq_f32(acc[r][c], vcvtq_f32_s32(s[r][c]), vmulq_n_f32(dv[c], act->dx[xb]));
        acc[r][c] = vfmaq_n_f32(acc[r][c], mv[c], act->sx[xb]);
      }
    }
  }
  for (int r = 0; r < R; ++r) store_tile(acc[r], bias, t, static_cast<T*>(out) + (r0 + r) * n + t * kQTile);
}

#undef SGLC_SDOT_LANE

template <typename T>
void q8_rows(const int8_t* w, const float* scales, const uint16_t* block_d, const sglc_quantized_rows* act, int64_t t,
             int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  switch (rows) {
    case 1: return q8_tile_rows<1, T>(w, scales, block_d, act, t, r0, n, bias, out);
    case 2: return q8_tile_rows<2, T>(w, scales, block_d, act, t, r0, n, bias, out);
    case 3: return q8_tile_rows<3, T>(w, scales, block_d, act, t, r0, n, bias, out);
    default: return q8_tile_rows<4, T>(w, scales, block_d, act, t, r0, n, bias, out);
  }
}

// One of a q6k tile block's level vectors (0..63) for the 4 channels at wb: inputs 16g + 4i + j,
// nibble g of load i ORed with its 2 high bits (bits 2i of plane g) moved to bits 4-5.
inline int8x16_t q6_level_vector(const uint8_t* wb, int g, int i) {
  const uint8x16_t wv = vld1q_u8(wb + 64 * i), plane = vld1q_u8(wb + 256 + 64 * g);
  const uint8x16_t nib = g == 0 ? vandq_u8(wv, vdupq_n_u8(0x0F)) : vshrq_n_u8(wv, 4);
  const uint8x16_t high = vandq_u8(vshlq_u8(plane, vdupq_n_s8(static_cast<int8_t>(4 - 2 * i))), vdupq_n_u8(0x30));
  return vreinterpretq_s8_u8(vorrq_u8(nib, high));
}

// Q6_K: levels 0..63 fit a signed byte, so sdot takes them as they are; each half block (inputs
// 0-15, 16-31) keeps its own sums, corrected by 32 * its activation sum.
template <int R, typename T>
void q6k_tile_rows(const uint8_t* w, const uint16_t* d, const int8_t* sc, const sglc_quantized_rows* act, int64_t t,
                   int64_t r0, int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  float32x4_t acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < 4; ++c) acc[r][c] = vdupq_n_f32(0.f);
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + (t * blocks + b) * kQ6BlockBytes;
    const int64_t sup = (t * (blocks / kKBlocks) + b / kKBlocks) * kQTile;
    const int8_t* scb = sc + (t * blocks * 2 + 2 * b) * kQTile;
    float32x4_t scale[2][4];
    for (int h = 0; h < 2; ++h) {
      for (int c = 0; c < 4; ++c) {
        const float lanes[4] = {static_cast<float>(scb[h * kQTile + 4 * c]), static_cast<float>(scb[h * kQTile + 4 * c + 1]),
                                static_cast<float>(scb[h * kQTile + 4 * c + 2]), static_cast<float>(scb[h * kQTile + 4 * c + 3])};
        scale[h][c] = vmulq_f32(load_half4(d + sup + 4 * c), vld1q_f32(lanes));
      }
    }
    for (int c = 0; c < 4; ++c) {
      int8x16_t lv[2][4];
      for (int g = 0; g < 2; ++g) {
        for (int i = 0; i < 4; ++i) lv[g][i] = q6_level_vector(wb + 16 * c, g, i);
      }
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = act->q + (r0 + r) * k + b * kQBlock;
        const int8x16_t x0 = vld1q_s8(xq), x1 = vld1q_s8(xq + 16);
        const int64_t xb = (r0 + r) * blocks + b;
        int32x4_t h0 = vdupq_n_s32(0), h1 = vdupq_n_s32(0);
        h0 = vdotq_laneq_s32(h0, lv[0][0], x0, 0);
        h0 = vdotq_laneq_s32(h0, lv[0][1], x0, 1);
        h0 = vdotq_laneq_s32(h0, lv[0][2], x0, 2);
        h0 = vdotq_laneq_s32(h0, lv[0][3], x0, 3);
        h1 = vdotq_laneq_s32(h1, lv[1][0], x1, 0);
        h1 = vdotq_laneq_s32(h1, lv[1][1], x1, 1);
        h1 = vdotq_laneq_s32(h1, lv[1][2], x1, 2);
        h1 = vdotq_laneq_s32(h1, lv[1][3], x1, 3);
        h0 = vsubq_s32(h0, vdupq_n_s32(32 * act->sq16[2 * xb]));
        h1 = vsubq_s32(h1, vdupq_n_s32(32 * act->sq16[2 * xb + 1]));
        acc[r][c] = vfmaq_f32(acc[r][c], vcvtq_f32_s32(h0), vmulq_n_f32(scale[0][c], act->dx[xb]));
        acc[r][c] = vfmaq_f32(acc[r][c], vcvtq_f32_s32(h1), vmulq_n_f32(scale[1][c], act->dx[xb]));
      }
    }
  }
  for (int r = 0; r < R; ++r) store_tile(acc[r], bias, t, static_cast<T*>(out) + (r0 + r) * n + t * kQTile);
}

template <typename T>
void q6k_rows(const uint8_t* w, const uint16_t* d, const int8_t* sc, const sglc_quantized_rows* act, int64_t t,
              int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  switch (rows) {
    case 1: return q6k_tile_rows<1, T>(w, d, sc, act, t, r0, n, bias, out);
    case 2: return q6k_tile_rows<2, T>(w, d, sc, act, t, r0, n, bias, out);
    case 3: return q6k_tile_rows<3, T>(w, d, sc, act, t, r0, n, bias, out);
    default: return q6k_tile_rows<4, T>(w, d, sc, act, t, r0, n, bias, out);
  }
}

template <typename T, int Bits, typename Scales>
void q4_rows(const uint8_t* w, const Scales& sc, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows,
             int64_t n, const void* bias, void* out) {
  switch (rows) {
    case 1: return q4_tile_rows<1, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
    case 2: return q4_tile_rows<2, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
    case 3: return q4_tile_rows<3, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
    default: return q4_tile_rows<4, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
  }
}

}  // namespace sglc::neon

// The integer linears on AVX512-VNNI: vpdpbusd multiplies a 64-byte load of 16 channels x 4
// inputs (unsigned) with 4 activation bytes broadcast to every lane (signed) and adds the 4
// products into each channel's int32 lane. Each weight load is unpacked once for up to 8 rows.
// (A first version, one channel at a time with a reduction tree per 8 blocks, ran the lm_head at
// ~0.45 ms per row and measured no faster than torch's int4 kernel.)
#pragma once

#include <immintrin.h>

#include "../../../common/int_linear.h"

namespace sglc::avx512 {

constexpr int kIntRowsPerPass = 8;

inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

inline __m512 load16_any(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16_any(const bf16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 load16_any(const f16* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

// quantize_rows_ref, 32 inputs in two registers: the same float products, rounded to nearest
// even by vcvtps2dq as nearbyint does, so the levels are bit-identical.
template <typename T>
void quantize_rows(const void* x, int64_t stride, int64_t rows, int64_t k, int8_t* q, float* dx, float* sx,
                   int32_t* sq, int32_t* sq16) {
  const int64_t blocks = k / kQBlock;
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = static_cast<const T*>(x) + r * stride;
    for (int64_t b = 0; b < blocks; ++b) {
      const __m512 x0 = load16_any(xr + b * kQBlock), x1 = load16_any(xr + b * kQBlock + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x0, sign), _mm512_and_ps(x1, sign)));
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      const __m512 iv = _mm512_set1_ps(inv);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, iv)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, iv));
      int8_t* dst = q + r * k + b * kQBlock;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtsepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), _mm512_cvtsepi32_epi8(q1));
      const int64_t i = r * blocks + b;
      sq16[2 * i] = _mm512_reduce_add_epi32(q0);
      sq16[2 * i + 1] = _mm512_reduce_add_epi32(q1);
      sq[i] = sq16[2 * i] + sq16[2 * i + 1];
      dx[i] = amax / 127.f;
      sx[i] = dx[i] * static_cast<float>(sq[i]);
    }
  }
}

template <typename T>
inline void store_tile(T* out, __m512 v) {
  alignas(64) float tmp[kQTile];
  _mm512_store_ps(tmp, v);
  for (int64_t i = 0; i < kQTile; ++i) out[i] = from_float<T>(tmp[i]);
}
inline void store_tile(float* out, __m512 v) { _mm512_storeu_ps(out, v); }

template <typename T>
inline __m512 add_bias(__m512 acc, const void* bias, int64_t t) {
  if (bias == nullptr) return acc;
  return _mm512_add_ps(acc, load16_any(static_cast<const T*>(bias) + t * kQTile));
}

inline __m512 load_half16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 load_byte16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 negate(__m512 v) { return _mm512_xor_ps(v, _mm512_set1_ps(-0.f)); }

// A q4 tile's block scales and offsets as 16 lanes (see common/int_linear.h's policies).
inline void block_scales(const Q41Scales& s, int64_t t, int64_t b, int64_t blocks, __m512& dv, __m512& mv) {
  const int64_t sb = (t * blocks + b) * kQTile;
  dv = load_half16(s.d + sb);
  mv = load_half16(s.m + sb);
}
inline void block_scales(const Q50Scales& s, int64_t t, int64_t b, int64_t blocks, __m512& dv, __m512& mv) {
  dv = load_half16(s.d + (t * blocks + b) * kQTile);
  mv = _mm512_mul_ps(dv, _mm512_set1_ps(-16.f));
}
inline void block_scales(const Q4KScales& s, int64_t t, int64_t b, int64_t blocks, __m512& dv, __m512& mv) {
  const int64_t sup = (t * (blocks / kKBlocks) + b / kKBlocks) * kQTile, sb = (t * blocks + b) * kQTile;
  dv = _mm512_mul_ps(load_half16(s.d + sup), load_byte16(s.sc + sb));
  mv = negate(_mm512_mul_ps(load_half16(s.dmin + sup), load_byte16(s.mn + sb)));
}

// int8 weights (signed; +128 here makes them vpdpbusd's unsigned operand, and the sum is
// corrected by 128 * sum(xq), which does not depend on the channel). block_d: Q8_0's float16
// scale per block and channel (applied per block); else one float scale per channel (at the end).
template <int R, typename T>
void q8_tile_rows(const int8_t* w, const float* scales, const uint16_t* block_d, const sglc_quantized_rows* act,
                  int64_t t, int64_t r0, int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const int8_t* wb = w + (t * blocks + b) * kQ8BlockBytes;
    prefetch_block(wb, blocks * kQ8BlockBytes, 8);
    __m512i wv[8];
    for (int i = 0; i < 8; ++i) wv[i] = _mm512_xor_si512(_mm512_loadu_si512(wb + 64 * i), offset);
    for (int r = 0; r < R; ++r) {
      const int8_t* xq = act->q + (r0 + r) * k + b * kQBlock;
      __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[0], broadcast4(xq));
      __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[1], broadcast4(xq + 4));
      for (int i = 2; i < 8; i += 2) {
        s0 = _mm512_dpbusd_epi32(s0, wv[i], broadcast4(xq + 4 * i));
        s1 = _mm512_dpbusd_epi32(s1, wv[i + 1], broadcast4(xq + 4 * i + 4));
      }
      const int64_t xb = (r0 + r) * blocks + b;
      const __m512i sum = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(128 * act->sq[xb]));
      const __m512 dx = _mm512_set1_ps(act->dx[xb]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                               block_d == nullptr ? dx : _mm512_mul_ps(load_half16(block_d + (t * blocks + b) * kQTile), dx),
                               acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 y = block_d == nullptr ? _mm512_mul_ps(acc[r], _mm512_loadu_ps(scales + t * kQTile)) : acc[r];
    store_tile(static_cast<T*>(out) + (r0 + r) * n + t * kQTile, add_bias<T>(y, bias, t));
  }
}

// A q5 tile block's fifth bits ORed into its nibbles as bit 4: lo[i] takes plane bit i, hi[i] bit
// 4 + i (the 16-bit shifts carry bits across bytes only into positions the 0x10 mask drops).
inline void add_fifth_bits(const uint8_t* wb, __m512i lo[4], __m512i hi[4]) {
  const __m512i plane = _mm512_loadu_si512(wb + 256), five = _mm512_set1_epi8(0x10);
  // NOTE: 0xF8 is A | (B & C) for A = the nibbles, B = the shifted plane, C = 0x10
  lo[0] = _mm512_ternarylogic_epi32(lo[0], _mm512_slli_epi16(plane, 4), five, 0xF8);
  lo[1] = _mm512_ternarylogic_epi32(lo[1], _mm512_slli_epi16(plane, 3), five, 0xF8);
  lo[2] = _mm512_ternarylogic_epi32(lo[2], _mm512_slli_epi16(plane, 2), five, 0xF8);
  lo[3] = _mm512_ternarylogic_epi32(lo[3], _mm512_slli_epi16(plane, 1), five, 0xF8);
  hi[0] = _mm512_ternarylogic_epi32(hi[0], plane, five, 0xF8);
  hi[1] = _mm512_ternarylogic_epi32(hi[1], _mm512_srli_epi16(plane, 1), five, 0xF8);
  hi[2] = _mm512_ternarylogic_epi32(hi[2], _mm512_srli_epi16(plane, 2), five, 0xF8);
  hi[3] = _mm512_ternarylogic_epi32(hi[3], _mm512_srli_epi16(plane, 3), five, 0xF8);
}

// Q4_1: a block's dot is d * dx * sum(q * xq) + m * dx * sum(xq); the levels are vpdpbusd's
// unsigned operand as they are (3 ops unpack a load). Bits 5: q5 tiles, the fifth bits added.
template <int R, typename T, typename Scales, int Bits>
void q4_tile_rows(const uint8_t* w, const Scales& scales, const sglc_quantized_rows* act, int64_t t, int64_t r0,
                  int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  constexpr int64_t kBytes = block_bytes<Bits>();
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + (t * blocks + b) * kBytes;
    prefetch_block(wb, blocks * kBytes, Bits);
    __m512i lo[4], hi[4];
    for (int i = 0; i < 4; ++i) {
      const __m512i wv = _mm512_loadu_si512(wb + 64 * i);
      lo[i] = _mm512_and_si512(wv, nibble);
      hi[i] = _mm512_and_si512(_mm512_srli_epi16(wv, 4), nibble);
    }
    if constexpr (Bits == 5) add_fifth_bits(wb, lo, hi);
    __m512 dv, mv;
    block_scales(scales, t, b, blocks, dv, mv);
    for (int r = 0; r < R; ++r) {
      const int8_t* xq = act->q + (r0 + r) * k + b * kQBlock;
      __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], broadcast4(xq));
      __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0], broadcast4(xq + 16));
      for (int i = 1; i < 4; ++i) {
        s0 = _mm512_dpbusd_epi32(s0, lo[i], broadcast4(xq + 4 * i));
        s1 = _mm512_dpbusd_epi32(s1, hi[i], broadcast4(xq + 16 + 4 * i));
      }
      const int64_t xb = (r0 + r) * blocks + b;
      const __m512 sum = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
      acc[r] = _mm512_fmadd_ps(sum, _mm512_mul_ps(dv, _mm512_set1_ps(act->dx[xb])), acc[r]);
      acc[r] = _mm512_fmadd_ps(mv, _mm512_set1_ps(act->sx[xb]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    store_tile(static_cast<T*>(out) + (r0 + r) * n + t * kQTile, add_bias<T>(acc[r], bias, t));
  }
}

// A q6k tile block's 8 level vectors, 0..63 each: lo[i] inputs 4i + j, hi[i] 16 + 4i + j (the q4
// tile's nibbles, each ORed with its 2 high bits moved from bits 2i of the plane to bits 4-5).
// The 16-bit shifts carry bits across bytes only into positions the 0x30 mask drops.
inline void q6_levels(const uint8_t* wb, __m512i lo[4], __m512i hi[4]) {
  const __m512i nibble = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
  const __m512i p0 = _mm512_loadu_si512(wb + 256), p1 = _mm512_loadu_si512(wb + 320);
  const __m512i h0[4] = {_mm512_slli_epi16(p0, 4), _mm512_slli_epi16(p0, 2), p0, _mm512_srli_epi16(p0, 2)};
  const __m512i h1[4] = {_mm512_slli_epi16(p1, 4), _mm512_slli_epi16(p1, 2), p1, _mm512_srli_epi16(p1, 2)};
  for (int i = 0; i < 4; ++i) {
    const __m512i wv = _mm512_loadu_si512(wb + 64 * i);
    // NOTE: 0xEC is (A & C) | B for A = levels, B = high bits (already masked), C = 0x0F
    lo[i] = _mm512_ternarylogic_epi32(wv, _mm512_and_si512(h0[i], top), nibble, 0xEC);
    hi[i] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(wv, 4), _mm512_and_si512(h1[i], top), nibble, 0xEC);
  }
}

// Q6_K: levels 0..63 are vpdpbusd's unsigned operand as they are; the low half (inputs 0-15) and
// the high half (16-31) each have their own scale, so each half's sum is kept apart and
// corrected by 32 * that half's activation sum.
template <int R, typename T>
void q6k_tile_rows(const uint8_t* w, const uint16_t* d, const int8_t* sc, const sglc_quantized_rows* act, int64_t t,
                   int64_t r0, int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + (t * blocks + b) * kQ6BlockBytes;
    prefetch_block(wb, blocks * kQ6BlockBytes, 6);
    __m512i lo[4], hi[4];
    q6_levels(wb, lo, hi);
    const __m512 dv = load_half16(d + (t * (blocks / kKBlocks) + b / kKBlocks) * kQTile);
    const int8_t* scb = sc + (t * blocks * 2 + 2 * b) * kQTile;
    const __m512 s0 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scb)))));
    const __m512 s1 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scb + kQTile)))));
    for (int r = 0; r < R; ++r) {
      const int8_t* xq = act->q + (r0 + r) * k + b * kQBlock;
      __m512i h0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], broadcast4(xq));
      __m512i h1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0], broadcast4(xq + 16));
      for (int i = 1; i < 4; ++i) {
        h0 = _mm512_dpbusd_epi32(h0, lo[i], broadcast4(xq + 4 * i));
        h1 = _mm512_dpbusd_epi32(h1, hi[i], broadcast4(xq + 16 + 4 * i));
      }
      const int64_t xb = (r0 + r) * blocks + b;
      const __m512 dx = _mm512_set1_ps(act->dx[xb]);
      h0 = _mm512_sub_epi32(h0, _mm512_set1_epi32(32 * act->sq16[2 * xb]));
      h1 = _mm512_sub_epi32(h1, _mm512_set1_epi32(32 * act->sq16[2 * xb + 1]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(h0), _mm512_mul_ps(s0, dx), acc[r]);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(h1), _mm512_mul_ps(s1, dx), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) store_tile(static_cast<T*>(out) + (r0 + r) * n + t * kQTile, add_bias<T>(acc[r], bias, t));
}

// R as a template argument: the accumulators stay in registers.
template <typename T>
void q8_rows(const int8_t* w, const float* scales, const uint16_t* block_d, const sglc_quantized_rows* act, int64_t t,
             int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  switch (rows) {
    case 1: return q8_tile_rows<1, T>(w, scales, block_d, act, t, r0, n, bias, out);
    case 2: return q8_tile_rows<2, T>(w, scales, block_d, act, t, r0, n, bias, out);
    case 3: return q8_tile_rows<3, T>(w, scales, block_d, act, t, r0, n, bias, out);
    case 4: return q8_tile_rows<4, T>(w, scales, block_d, act, t, r0, n, bias, out);
    case 5: return q8_tile_rows<5, T>(w, scales, block_d, act, t, r0, n, bias, out);
    case 6: return q8_tile_rows<6, T>(w, scales, block_d, act, t, r0, n, bias, out);
    case 7: return q8_tile_rows<7, T>(w, scales, block_d, act, t, r0, n, bias, out);
    default: return q8_tile_rows<8, T>(w, scales, block_d, act, t, r0, n, bias, out);
  }
}

template <typename T>
void q6k_rows(const uint8_t* w, const uint16_t* d, const int8_t* sc, const sglc_quantized_rows* act, int64_t t,
              int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  switch (rows) {
    case 1: return q6k_tile_rows<1, T>(w, d, sc, act, t, r0, n, bias, out);
    case 2: return q6k_tile_rows<2, T>(w, d, sc, act, t, r0, n, bias, out);
    case 3: return q6k_tile_rows<3, T>(w, d, sc, act, t, r0, n, bias, out);
    case 4: return q6k_tile_rows<4, T>(w, d, sc, act, t, r0, n, bias, out);
    case 5: return q6k_tile_rows<5, T>(w, d, sc, act, t, r0, n, bias, out);
    case 6: return q6k_tile_rows<6, T>(w, d, sc, act, t, r0, n, bias, out);
    case 7: return q6k_tile_rows<7, T>(w, d, sc, act, t, r0, n, bias, out);
    default: return q6k_tile_rows<8, T>(w, d, sc, act, t, r0, n, bias, out);
  }
}

template <typename T, int Bits, typename Scales>
void q4_rows(const uint8_t* w, const Scales& sc, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows,
             int64_t n, const void* bias, void* out) {
  switch (rows) {
    case 1: return q4_tile_rows<1, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
    case 2: return q4_tile_rows<2, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
    case 3: return q4_tile_rows<3, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
    case 4: return q4_tile_rows<4, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
    case 5: return q4_tile_rows<5, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
    case 6: return q4_tile_rows<6, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
    case 7: return q4_tile_rows<7, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
    default: return q4_tile_rows<8, T, Scales, Bits>(w, sc, act, t, r0, n, bias, out);
  }
}

}  // namespace sglc::avx512

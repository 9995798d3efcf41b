// The integer linears on AVX2 (x86-64-v3: every x86 CPU since Haswell / Zen 1). There is no
// vpdpbusd: vpmaddubsw multiplies unsigned by signed bytes into saturating int16 pair sums and
// vpmaddwd with ones adds the pairs into int32, so 4 inputs x 8 channels per 32-byte half of a
// tile load take two instructions. A tile's 16 channels are two halves of 8 lanes.
// - Q4_1 levels are 0..15 and activations -127..127: a pair sum is at most 3,810, so the 8
//   products of a block (per half) add up in int16 (<= 30,480) before one vpmaddwd.
// - int8 weights are signed: |w| (unsigned) times x with w's sign (vpsignb), pair sums at most
//   32,258, so each load goes through vpmaddwd on its own.
// Loads are unpacked once and used for up to 4 rows (16 registers: 4 sums, 4 accumulators, the
// weights in flight).
#pragma once

#include <immintrin.h>

#include "../../../common/int_linear.h"
#include "attention.h"  // load8

namespace sglc::avx2 {

constexpr int kIntRowsPerPass = 4;

inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

// quantize_rows_ref with 32 inputs in four registers; vcvtps2dq rounds to nearest even as
// nearbyint does, so the levels are bit-identical.
template <typename T>
void quantize_rows(const void* x, int64_t stride, int64_t rows, int64_t k, int8_t* q, float* dx, float* sx,
                   int32_t* sq, int32_t* sq16) {
  const int64_t blocks = k / kQBlock;
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undoes the packs' lane interleave
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = static_cast<const T*>(x) + r * stride;
    for (int64_t b = 0; b < blocks; ++b) {
      __m256 v[4];
      for (int i = 0; i < 4; ++i) v[i] = load8(xr + b * kQBlock + 8 * i);
      const __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], sign), _mm256_and_ps(v[1], sign)),
                                      _mm256_max_ps(_mm256_and_ps(v[2], sign), _mm256_and_ps(v[3], sign)));
      const float amax = hmax(mx);
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      const __m256 iv = _mm256_set1_ps(inv);
      __m256i qi[4];
      for (int i = 0; i < 4; ++i) qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], iv));

      const __m256i p16a = _mm256_packs_epi32(qi[0], qi[1]), p16b = _mm256_packs_epi32(qi[2], qi[3]);
      const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + r * k + b * kQBlock), p8);
      const int64_t i = r * blocks + b;
      sq16[2 * i] = hsum_epi32(_mm256_add_epi32(qi[0], qi[1]));
      sq16[2 * i + 1] = hsum_epi32(_mm256_add_epi32(qi[2], qi[3]));
      sq[i] = sq16[2 * i] + sq16[2 * i + 1];
      dx[i] = amax / 127.f;
      sx[i] = dx[i] * static_cast<float>(sq[i]);
    }
  }
}

template <typename T>
inline void store8(T* out, __m256 v) {
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (int i = 0; i < 8; ++i) out[i] = from_float<T>(tmp[i]);
}
inline void store8(float* out, __m256 v) { _mm256_storeu_ps(out, v); }

template <typename T>
inline __m256 add_bias8(__m256 acc, const void* bias, int64_t channel) {
  return bias == nullptr ? acc : _mm256_add_ps(acc, load8(static_cast<const T*>(bias) + channel));
}

inline __m256 load_half8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load_byte8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 negate(__m256 v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.f)); }

// Half `half` (8 channels) of a q4 tile's block scales and offsets (common/int_linear.h's policies).
inline void block_scales(const Q41Scales& s, int64_t t, int64_t b, int64_t blocks, int half, __m256& dv, __m256& mv) {
  const int64_t sb = (t * blocks + b) * kQTile + 8 * half;
  dv = load_half8(s.d + sb);
  mv = load_half8(s.m + sb);
}
inline void block_scales(const Q50Scales& s, int64_t t, int64_t b, int64_t blocks, int half, __m256& dv, __m256& mv) {
  dv = load_half8(s.d + (t * blocks + b) * kQTile + 8 * half);
  mv = _mm256_mul_ps(dv, _mm256_set1_ps(-16.f));
}
inline void block_scales(const Q4KScales& s, int64_t t, int64_t b, int64_t blocks, int half, __m256& dv, __m256& mv) {
  const int64_t sup = (t * (blocks / kKBlocks) + b / kKBlocks) * kQTile + 8 * half;
  const int64_t sb = (t * blocks + b) * kQTile + 8 * half;
  dv = _mm256_mul_ps(load_half8(s.d + sup), load_byte8(s.sc + sb));
  mv = negate(_mm256_mul_ps(load_half8(s.dmin + sup), load_byte8(s.mn + sb)));
}

// block_d: Q8_0's float16 scale per block and channel (applied per block); else one float scale
// per channel (at the end).
template <int R, typename T>
void q8_tile_rows(const int8_t* w, const float* scales, const uint16_t* block_d, const sglc_quantized_rows* act,
                  int64_t t, int64_t r0, int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int half = 0; half < 2; ++half) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const int8_t* wb = w + (t * blocks + b) * kQ8BlockBytes + 32 * half;
      const int8_t* xq = act->q + r0 * k + b * kQBlock;
      if (half == 0) prefetch_block(wb, blocks * kQ8BlockBytes, 8);
      __m256i s[R];
      for (int r = 0; r < R; ++r) s[r] = _mm256_setzero_si256();
#pragma GCC unroll 1  // as in q4_tile_rows: unrolled, the re-associated adds spill
      for (int i = 0; i < 8; ++i) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * i));
        const __m256i aw = _mm256_sign_epi8(wv, wv);  // |w|
        for (int r = 0; r < R; ++r) {
          const __m256i xs = _mm256_sign_epi8(broadcast4(xq + r * k + 4 * i), wv);  // x * sign(w)
          s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xs), ones));
        }
      }
      const __m256 bd = block_d == nullptr ? _mm256_setzero_ps() : load_half8(block_d + (t * blocks + b) * kQTile + 8 * half);
      for (int r = 0; r < R; ++r) {
        const __m256 dx = _mm256_set1_ps(act->dx[(r0 + r) * blocks + b]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r]), block_d == nullptr ? dx : _mm256_mul_ps(bd, dx), acc[r]);
      }
    }
    const int64_t channel = t * kQTile + 8 * half;
    for (int r = 0; r < R; ++r) {
      const __m256 y = block_d == nullptr ? _mm256_mul_ps(acc[r], _mm256_loadu_ps(scales + channel)) : acc[r];
      store8(static_cast<T*>(out) + (r0 + r) * n + channel, add_bias8<T>(y, bias, channel));
    }
  }
}

// Bits 4 (q4 tiles): levels 0..15, a pair sum at most 3,810, so a block's 8 products (per half)
// add up in int16 before one vpmaddwd. Bits 5 (q5 tiles): the fifth bits ORed in as bit 4; a
// pair sum is at most 7,874, so each load's two products (<= 15,748) go through vpmaddwd.
template <int R, typename T, typename Scales, int Bits>
void q4_tile_rows(const uint8_t* w, const Scales& scales, const sglc_quantized_rows* act, int64_t t, int64_t r0,
                  int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  constexpr int64_t kBytes = block_bytes<Bits>();
  const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int half = 0; half < 2; ++half) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* wb = w + (t * blocks + b) * kBytes + 32 * half;
      const int8_t* xq = act->q + r0 * k + b * kQBlock;
      if (half == 0) prefetch_block(wb, blocks * kBytes, Bits);
      __m256i s[R];
      for (int r = 0; r < R; ++r) s[r] = _mm256_setzero_si256();
      // NOTE: not unrolled: unrolled, GCC re-associates each row's chain of int16 adds into a
      // tree that keeps every product alive (~35 register spills a block at R = 4).
#pragma GCC unroll 1
      for (int i = 0; i < 4; ++i) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * i));
        __m256i lo = _mm256_and_si256(wv, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), nibble);
        if constexpr (Bits == 5) {  // plane bit i -> lo's bit 4, bit 4 + i -> hi's (see the avx512 kernel)
          const __m256i plane = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 256));
          const __m256i five = _mm256_set1_epi8(0x10);
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_sll_epi16(plane, _mm_cvtsi32_si128(4 - i)), five));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srl_epi16(plane, _mm_cvtsi32_si128(i)), five));
        }
        for (int r = 0; r < R; ++r) {
          const int8_t* xr = xq + r * k;
          const __m256i plo = _mm256_maddubs_epi16(lo, broadcast4(xr + 4 * i));
          const __m256i phi = _mm256_maddubs_epi16(hi, broadcast4(xr + 16 + 4 * i));
          if constexpr (Bits == 4) {
            s[r] = _mm256_add_epi16(_mm256_add_epi16(s[r], plo), phi);
          } else {
            s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(_mm256_add_epi16(plo, phi), ones));
          }
        }
      }
      __m256 dv, mv;
      block_scales(scales, t, b, blocks, half, dv, mv);
      for (int r = 0; r < R; ++r) {
        const int64_t xb = (r0 + r) * blocks + b;
        const __m256i s32 = Bits == 4 ? _mm256_madd_epi16(s[r], ones) : s[r];
        const __m256 sum = _mm256_cvtepi32_ps(s32);
        acc[r] = _mm256_fmadd_ps(sum, _mm256_mul_ps(dv, _mm256_set1_ps(act->dx[xb])), acc[r]);
        acc[r] = _mm256_fmadd_ps(mv, _mm256_set1_ps(act->sx[xb]), acc[r]);
      }
    }
    const int64_t channel = t * kQTile + 8 * half;
    for (int r = 0; r < R; ++r) {
      store8(static_cast<T*>(out) + (r0 + r) * n + channel, add_bias8<T>(acc[r], bias, channel));
    }
  }
}

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

// One of a q6k tile block's 8 level vectors (0..63) for the 8 channels at wb: inputs 16g + 4i + j,
// the nibble g of load i ORed with its 2 high bits moved from bits 2i of plane g to bits 4-5 (the
// 16-bit shifts carry bits across bytes only into positions the 0x30 mask drops).
template <int G, int I>
inline __m256i q6_level_vector(const uint8_t* wb) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * I));
  const __m256i plane = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 256 + 64 * G));
  const __m256i nib = _mm256_and_si256(G == 0 ? wv : _mm256_srli_epi16(wv, 4), _mm256_set1_epi8(0x0F));
  const __m256i high = I < 2 ? _mm256_slli_epi16(plane, 4 - 2 * I) : I == 2 ? plane : _mm256_srli_epi16(plane, 2);
  return _mm256_or_si256(nib, _mm256_and_si256(high, _mm256_set1_epi8(0x30)));
}

// Half g of a block (inputs 16g .. 16g + 15) for R rows: a vpmaddubsw pair sum is at most
// 2 * 63 * 127 = 16,002, so two loads' products add in int16 (<= 32,004) before each vpmaddwd.
template <int G, int R>
inline void q6_half_sums(const uint8_t* wb, const int8_t* xq, int64_t k, __m256i h[R]) {
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i v0 = q6_level_vector<G, 0>(wb), v1 = q6_level_vector<G, 1>(wb);
  for (int r = 0; r < R; ++r) {
    const int8_t* x = xq + r * k + 16 * G;
    const __m256i pair = _mm256_add_epi16(_mm256_maddubs_epi16(v0, broadcast4(x)), _mm256_maddubs_epi16(v1, broadcast4(x + 4)));
    h[r] = _mm256_madd_epi16(pair, ones);
  }
  const __m256i v2 = q6_level_vector<G, 2>(wb), v3 = q6_level_vector<G, 3>(wb);
  for (int r = 0; r < R; ++r) {
    const int8_t* x = xq + r * k + 16 * G;
    const __m256i pair = _mm256_add_epi16(_mm256_maddubs_epi16(v2, broadcast4(x + 8)), _mm256_maddubs_epi16(v3, broadcast4(x + 12)));
    h[r] = _mm256_add_epi32(h[r], _mm256_madd_epi16(pair, ones));
  }
}

// Q6_K: levels 0..63 (unsigned) times activations; each half block (inputs 0-15, 16-31) keeps its
// own sums, corrected by 32 * its activation sum and scaled by its own d * sc.
template <int R, typename T>
void q6k_tile_rows(const uint8_t* w, const uint16_t* d, const int8_t* sc, const sglc_quantized_rows* act, int64_t t,
                   int64_t r0, int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  for (int half = 0; half < 2; ++half) {
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* wb = w + (t * blocks + b) * kQ6BlockBytes + 32 * half;
      if (half == 0) prefetch_block(wb, blocks * kQ6BlockBytes, 6);
      const __m256 dv = load_half8(d + (t * (blocks / kKBlocks) + b / kKBlocks) * kQTile + 8 * half);
      const int8_t* scb = sc + (t * blocks * 2 + 2 * b) * kQTile + 8 * half;
      const __m256 sc0 = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scb)))));
      const __m256 sc1 = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scb + kQTile)))));
      const int8_t* xq = act->q + r0 * k + b * kQBlock;
      __m256i h0[R], h1[R];
      q6_half_sums<0, R>(wb, xq, k, h0);
      q6_half_sums<1, R>(wb, xq, k, h1);
      for (int r = 0; r < R; ++r) {
        const int64_t xb = (r0 + r) * blocks + b;
        const __m256 dx = _mm256_set1_ps(act->dx[xb]);
        const __m256i c0 = _mm256_sub_epi32(h0[r], _mm256_set1_epi32(32 * act->sq16[2 * xb]));
        const __m256i c1 = _mm256_sub_epi32(h1[r], _mm256_set1_epi32(32 * act->sq16[2 * xb + 1]));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c0), _mm256_mul_ps(sc0, dx), acc[r]);
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c1), _mm256_mul_ps(sc1, dx), acc[r]);
      }
    }
    const int64_t channel = t * kQTile + 8 * half;
    for (int r = 0; r < R; ++r) store8(static_cast<T*>(out) + (r0 + r) * n + channel, add_bias8<T>(acc[r], bias, channel));
  }
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

}  // namespace sglc::avx2

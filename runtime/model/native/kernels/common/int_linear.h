// Weight-only integer linears, computed the way llama.cpp runs Q8_0 and Q4_1 matmuls: each
// activation row is quantized to int8 in blocks of 32 inputs (x ~ dx * xq, one float scale per
// block) and the products are integer dot products, scaled once per block.
//
// Output channels are the vector lanes: weights are stored in tiles of 16 channels, interleaved
// so that 4 consecutive inputs of each of the 16 channels are 64 contiguous bytes; a SIMD
// kernel multiplies such a load with 4 activation bytes broadcast to every lane, so a block of
// 32 inputs ends as 16 channel sums with no horizontal reduction, and each weight load serves
// several activation rows. Layouts (packed by models/quantized_linear.py):
// - q8 tiles: int8 [N/16, K/32, 8, 64]: byte 4c + j of load i of block b holds input
//   b*32 + 4i + j of channel c of the tile; one float scale per channel.
// - q4 tiles: uint8 [N/16, K/32, 4, 64]: byte 4c + j of load i holds input b*32 + 4i + j of
//   channel c in its low nibble and input b*32 + 16 + 4i + j in its high one (4-bit levels
//   0..15). Their block scales come in two forms (the policies below):
//   Q4_1 (and Q4_0, as m = -8 d): d and m float16 [N/16, K/32, 16], w = d * q + m;
//   Q4_K: float16 d and dmin per super-block of 8 blocks [N/16, K/256, 16] and 6-bit scale and
//   min per block as bytes [N/16, K/32, 16], w = (d * sc) * q - (dmin * mn): both products are
//   exact in float32, so GGUF's Q4_K levels and scales are kept as shipped.
// - q5 tiles (GGUF's Q5_0, Q5_1, Q5_K): 5-bit levels 0..31, uint8 [N/16, K/32, 5, 64]: loads 0-3
//   are a q4 tile of the levels' low 4 bits, load 4 holds their fifth bits, byte 4c + j at bit
//   4s + i for input b*32 + 16s + 4i + j (the level whose low bits are nibble s of byte 4c + j of
//   load i). Their scales are the q4 tiles' policies: Q5_1 as Q4_1 (w = d * q + m), Q5_K as Q4_K,
//   Q5_0 a float16 d per block and channel with w = d * (q - 16) (Q50Scales: offset -16 d, exact).
// - q8 tiles with block scales (GGUF's Q8_0): the q8 tiles' levels and float16 d [N/16, K/32,
//   16] per block and channel: w = d * q.
// - q6k tiles (GGUF's Q6_K): 6-bit levels 0..63 as 4 + 2 bit planes, uint8 [N/16, K/32, 6, 64]:
//   loads 0-3 are a q4 tile of the levels' low 4 bits; loads 4 and 5 hold their high 2 bits,
//   byte 4c + j of load 4 + s at bits 2i, 2i + 1 for input b*32 + 16s + 4i + j (the level whose
//   low bits are nibble s of byte 4c + j of load i). 6 bits a weight as in the file (one byte a
//   level streamed a third more). Float16 d per super-block [N/16, K/256, 16] and an int8 scale
//   per 16 inputs [N/16, K/16, 16]: w = (d * sc) * (q - 32) (the product d * sc exact in float32).
//
// This file: the portable reference (what every variant must compute, and the generic
// variant's kernels). The integer sums are exact and every variant applies the per-block float
// scaling in the same order with fused multiply-adds, so all of them agree bit for bit.
#pragma once

#include "../kernel_table.h"
#include "convert.h"

namespace sglc {

constexpr int64_t kQBlock = 32;  // inputs per quantization block (GGUF's)
constexpr int64_t kQTile = 16;   // output channels per tile
constexpr int64_t kQ8BlockBytes = kQTile * kQBlock;
constexpr int64_t kQ4BlockBytes = kQTile * kQBlock / 2;
constexpr int64_t kQ5BlockBytes = kQTile * kQBlock * 5 / 8;  // 4 loads of nibbles, 1 of fifth bits
constexpr int64_t kQ6BlockBytes = kQTile * kQBlock * 6 / 8;  // 4 loads of nibbles, 2 of high bits

// Weights stream from memory once per step (a model is far bigger than the caches) and the
// hardware prefetchers do not keep ahead of a tile walked half by half and row group by row
// group: each block asks for the same block of the tile kPrefetchTiles ahead (a prefetch past
// the tensor's end is a no-op, never a fault). A 30-layer sweep at 8 rows, AVX2: 280 -> 228 us a
// layer, the lm_head 3.06 -> 2.31 ms.
constexpr int64_t kPrefetchTiles = 1;
inline void prefetch_block(const void* block, int64_t tile_bytes, int lines) {
  const char* p = static_cast<const char*>(block) + kPrefetchTiles * tile_bytes;
  for (int i = 0; i < lines; ++i) __builtin_prefetch(p + 64 * i, 0, 3);
}

// One block of 32 inputs -> int8 levels (round to nearest even of x * 127 / amax); writes the
// levels, the sums of each half (16 inputs) and returns the block's sum; *scale = amax / 127.
template <typename T>
inline int32_t quantize_block(const T* x, int8_t* q, float* scale, int32_t* half_sums) {
  float amax = 0.f;
  _Pragma("omp simd reduction(max : amax)")
  for (int64_t i = 0; i < kQBlock; ++i) amax = std::max(amax, std::fabs(to_float(x[i])));
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  int32_t sums[2] = {0, 0};
  for (int64_t i = 0; i < kQBlock; ++i) {
    const int32_t v = static_cast<int32_t>(std::nearbyint(to_float(x[i]) * inv));
    q[i] = static_cast<int8_t>(v);
    sums[i / 16] += v;
  }
  *scale = amax / 127.f;
  half_sums[0] = sums[0];
  half_sums[1] = sums[1];
  return sums[0] + sums[1];
}

template <typename T>
void quantize_rows_ref(const void* x, int64_t stride, int64_t rows, int64_t k, int8_t* q, float* dx, float* sx,
                       int32_t* sq, int32_t* sq16) {
  const int64_t blocks = k / kQBlock;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t i = r * blocks + b;
      sq[i] = quantize_block(static_cast<const T*>(x) + r * stride + b * kQBlock, q + r * k + b * kQBlock, &dx[i],
                             sq16 + 2 * i);
      sx[i] = dx[i] * static_cast<float>(sq[i]);
    }
  }
}

template <typename T>
inline void store_channels(const float* acc, const void* bias, int64_t t, T* out) {
  const T* b = bias == nullptr ? nullptr : static_cast<const T*>(bias) + t * kQTile;
  for (int64_t c = 0; c < kQTile; ++c) out[c] = from_float<T>(b == nullptr ? acc[c] : acc[c] + to_float(b[c]));
}

template <typename T>
void q8_tile_ref(const int8_t* w, const float* scales, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows,
                 int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  for (int r = 0; r < rows; ++r) {
    float acc[kQTile] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      const int8_t* wb = w + (t * blocks + b) * kQ8BlockBytes;
      const int8_t* xq = act->q + (r0 + r) * k + b * kQBlock;
      const float dx = act->dx[(r0 + r) * blocks + b];
      for (int64_t c = 0; c < kQTile; ++c) {
        int32_t sum = 0;
        for (int i = 0; i < 8; ++i) {
          for (int j = 0; j < 4; ++j) sum += static_cast<int32_t>(wb[64 * i + 4 * c + j]) * xq[4 * i + j];
        }
        acc[c] = std::fma(static_cast<float>(sum), dx, acc[c]);
      }
    }
    for (int64_t c = 0; c < kQTile; ++c) acc[c] *= scales[t * kQTile + c];
    store_channels(acc, bias, t, static_cast<T*>(out) + (r0 + r) * n + t * kQTile);
  }
}

// Where a q4 tile's per-block scale d and offset m (w = d * q + m) come from; scalar accessors
// (the SIMD kernels load 16 / 8 / 4 lanes of the same arrays).
struct Q41Scales {  // Q4_1 and Q4_0: float16 d and m per block and channel
  const uint16_t* d;
  const uint16_t* m;
  float scale(int64_t t, int64_t b, int64_t blocks, int64_t c) const {
    return half_bits_to_float(d[(t * blocks + b) * kQTile + c]);
  }
  float offset(int64_t t, int64_t b, int64_t blocks, int64_t c) const {
    return half_bits_to_float(m[(t * blocks + b) * kQTile + c]);
  }
};

struct Q50Scales {  // Q5_0: float16 d per block and channel, w = d * (q - 16)
  const uint16_t* d;
  float scale(int64_t t, int64_t b, int64_t blocks, int64_t c) const {
    return half_bits_to_float(d[(t * blocks + b) * kQTile + c]);
  }
  float offset(int64_t t, int64_t b, int64_t blocks, int64_t c) const { return -16.f * scale(t, b, blocks, c); }
};

constexpr int64_t kKBlocks = 8;  // blocks of 32 per K-quant super-block (256 inputs)

struct Q4KScales {  // Q4_K: d * sc and -(dmin * mn), sc and mn 6-bit per block, d and dmin per super-block
  const uint16_t* d;
  const uint16_t* dmin;
  const uint8_t* sc;
  const uint8_t* mn;
  float scale(int64_t t, int64_t b, int64_t blocks, int64_t c) const {
    return half_bits_to_float(d[(t * (blocks / kKBlocks) + b / kKBlocks) * kQTile + c]) *
           static_cast<float>(sc[(t * blocks + b) * kQTile + c]);
  }
  float offset(int64_t t, int64_t b, int64_t blocks, int64_t c) const {
    return -(half_bits_to_float(dmin[(t * (blocks / kKBlocks) + b / kKBlocks) * kQTile + c]) *
             static_cast<float>(mn[(t * blocks + b) * kQTile + c]));
  }
};

// Bytes of one block of a tile of Bits-bit levels (4: q4 tiles, 5: q5 tiles).
template <int Bits>
constexpr int64_t block_bytes() {
  static_assert(Bits == 4 || Bits == 5, "q4 or q5 tiles");
  return Bits == 4 ? kQ4BlockBytes : kQ5BlockBytes;
}

// One level of a q4 / q5 tile's block: input 16 s + 4 i + j of channel c.
template <int Bits>
inline int32_t q45_level(const uint8_t* wb, int64_t c, int s, int i, int j) {
  const uint8_t byte = wb[64 * i + 4 * c + j];
  const int32_t low = s == 0 ? (byte & 0x0F) : (byte >> 4);
  if constexpr (Bits == 4) return low;
  return low | (((wb[256 + 4 * c + j] >> (4 * s + i)) & 1) << 4);
}

template <typename T, int Bits, typename Scales>
void q4_tile_scaled_ref(const uint8_t* w, const Scales& sc, const sglc_quantized_rows* act, int64_t t, int64_t r0,
                        int rows, int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  for (int r = 0; r < rows; ++r) {
    float acc[kQTile] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* wb = w + (t * blocks + b) * block_bytes<Bits>();
      const int8_t* xq = act->q + (r0 + r) * k + b * kQBlock;
      const int64_t xb = (r0 + r) * blocks + b;
      for (int64_t c = 0; c < kQTile; ++c) {
        int32_t sum = 0;
        for (int s = 0; s < 2; ++s) {
          for (int i = 0; i < 4; ++i) {
            for (int j = 0; j < 4; ++j) sum += q45_level<Bits>(wb, c, s, i, j) * xq[16 * s + 4 * i + j];
          }
        }
        acc[c] = std::fma(static_cast<float>(sum), sc.scale(t, b, blocks, c) * act->dx[xb], acc[c]);
        acc[c] = std::fma(sc.offset(t, b, blocks, c), act->sx[xb], acc[c]);
      }
    }
    store_channels(acc, bias, t, static_cast<T*>(out) + (r0 + r) * n + t * kQTile);
  }
}

template <typename T>
void q4k_tile_ref(const uint8_t* w, const uint16_t* d, const uint16_t* dmin, const uint8_t* sc, const uint8_t* mn,
                  const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n, const void* bias,
                  void* out) {
  q4_tile_scaled_ref<T, 4>(w, Q4KScales{d, dmin, sc, mn}, act, t, r0, rows, n, bias, out);
}

// Q8_0: one float16 scale per block and channel, applied per block (the q8 tiles' per-channel
// scale is applied once at the end).
template <typename T>
void q8b_tile_ref(const int8_t* w, const uint16_t* d, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows,
                  int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  for (int r = 0; r < rows; ++r) {
    float acc[kQTile] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      const int8_t* wb = w + (t * blocks + b) * kQ8BlockBytes;
      const int8_t* xq = act->q + (r0 + r) * k + b * kQBlock;
      const float dx = act->dx[(r0 + r) * blocks + b];
      for (int64_t c = 0; c < kQTile; ++c) {
        int32_t sum = 0;
        for (int i = 0; i < 8; ++i) {
          for (int j = 0; j < 4; ++j) sum += static_cast<int32_t>(wb[64 * i + 4 * c + j]) * xq[4 * i + j];
        }
        acc[c] = std::fma(static_cast<float>(sum), half_bits_to_float(d[(t * blocks + b) * kQTile + c]) * dx, acc[c]);
      }
    }
    store_channels(acc, bias, t, static_cast<T*>(out) + (r0 + r) * n + t * kQTile);
  }
}

// One 6-bit level of a q6k tile's block: input 16 s + 4 i + j of channel c.
inline int32_t q6_level(const uint8_t* wb, int64_t c, int s, int i, int j) {
  const uint8_t byte = wb[64 * i + 4 * c + j];
  const int32_t low = s == 0 ? (byte & 0x0F) : (byte >> 4);
  const int32_t high = (wb[64 * (4 + s) + 4 * c + j] >> (2 * i)) & 0x03;
  return low | (high << 4);
}

// Q6_K: each half block (16 inputs) has its own scale; its sum is corrected by 32 * the half's
// activation sum and scaled by d * sc.
template <typename T>
void q6k_tile_ref(const uint8_t* w, const uint16_t* d, const int8_t* sc, const sglc_quantized_rows* act, int64_t t,
                  int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  const int64_t k = act->k, blocks = k / kQBlock;
  for (int r = 0; r < rows; ++r) {
    float acc[kQTile] = {};
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* wb = w + (t * blocks + b) * kQ6BlockBytes;
      const int8_t* xq = act->q + (r0 + r) * k + b * kQBlock;
      const int64_t xb = (r0 + r) * blocks + b;
      for (int64_t c = 0; c < kQTile; ++c) {
        const float dc = half_bits_to_float(d[(t * (blocks / kKBlocks) + b / kKBlocks) * kQTile + c]);
        for (int s = 0; s < 2; ++s) {
          int32_t sum = 0;
          for (int i = 0; i < 4; ++i) {
            for (int j = 0; j < 4; ++j) sum += q6_level(wb, c, s, i, j) * xq[16 * s + 4 * i + j];
          }
          const float scale = dc * static_cast<float>(sc[(t * blocks * 2 + 2 * b + s) * kQTile + c]);
          acc[c] = std::fma(static_cast<float>(sum - 32 * act->sq16[2 * xb + s]), scale * act->dx[xb], acc[c]);
        }
      }
    }
    store_channels(acc, bias, t, static_cast<T*>(out) + (r0 + r) * n + t * kQTile);
  }
}

template <typename T>
void q4_tile_ref(const uint8_t* w, const uint16_t* d, const uint16_t* m, const sglc_quantized_rows* act, int64_t t,
                 int64_t r0, int rows, int64_t n, const void* bias, void* out) {
  q4_tile_scaled_ref<T, 4>(w, Q41Scales{d, m}, act, t, r0, rows, n, bias, out);
}

}  // namespace sglc

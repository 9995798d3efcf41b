// Float-weight linears: bf16 or float16 weights kept as the checkpoint ships them (2 bytes a
// weight), multiplied in float32. A CPU without native bf16 matmuls would otherwise hold a float32
// copy of the model (twice the file) and, for oneDNN's packed kernel, a second one; a decode step
// streams the weights once, so half the bytes is also about half the time.
//
// Output channels are the vector lanes, as for the integer linears (int_linear.h): half tiles are
// uint16 [N/16, K, 16], element 16 i + c of tile t holding input i of channel 16 t + c, so each
// input is one load of 16 channels, widened to float32 and multiplied with that input of each
// activation row broadcast to every lane; no horizontal reduction, each load serves several rows.
// Widening is exact (bf16 and half are subsets of float32), so the products are those of a float32
// model holding the same weights.
//
// Every variant computes each output as acc = fma(x[i], w[i], acc) for i = 0 .. K-1 in order, one
// accumulator per (row, channel), and adds the bias after: all of them agree bit for bit with the
// reference below.
#pragma once

#include "../kernel_table.h"
#include "convert.h"
#include "int_linear.h"  // kQTile, store_channels

namespace sglc {

// Rows one call takes at most (the binding's row block): a prefill's calls widen each weight
// once for this many rows.
constexpr int kHalfRowsPerPass = 64;

struct BF16Weights {  // the tiles' elements are bf16 bits
  static float widen(uint16_t bits) { return to_float(bf16{bits}); }
};
struct F16Weights {  // ... IEEE half bits
  static float widen(uint16_t bits) { return half_bits_to_float(bits); }
};

template <typename T, typename W>
void half_tile_ref(const uint16_t* w, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows, int64_t n,
                   const void* bias, void* out) {
  const int64_t k = act->k;
  const uint16_t* wt = w + t * k * kQTile;
  for (int r = 0; r < rows; ++r) {
    const T* x = static_cast<const T*>(act->x) + (r0 + r) * act->x_stride;
    float acc[kQTile] = {};
    for (int64_t i = 0; i < k; ++i) {
      const float xv = to_float(x[i]);
      for (int64_t c = 0; c < kQTile; ++c) acc[c] = std::fma(xv, W::widen(wt[i * kQTile + c]), acc[c]);
    }
    store_channels(acc, bias, t, static_cast<T*>(out) + (r0 + r) * n + t * kQTile);
  }
}

}  // namespace sglc

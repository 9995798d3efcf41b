// The small per-layer ops of a decoder layer (two RMSNorms, RoPE on q and k, a residual add,
// SiLU * up or GeGLU): at one decode stream ~25 tiny ATen ops whose cost is dispatch and dtype round
// trips, not arithmetic. Each is one loop here that reads its input once, computes in float32
// and rounds once to the element type. Written to vectorise for whatever the variant is
// compiled for (`omp simd` reductions, exp_approx).
//
// NOTE: loops are marked with _Pragma, not #pragma, so they can sit inside macro arguments.
#pragma once

#include "convert.h"

namespace sglc {

template <typename T>
void normalize_row(const T* x, const T* w, T* out, int64_t d, float eps) {
  float ss = 0.f;
  _Pragma("omp simd reduction(+ : ss)")
  for (int64_t i = 0; i < d; ++i) {
    const float v = to_float(x[i]);
    ss += v * v;
  }
  const float inv = 1.f / std::sqrt(ss / static_cast<float>(d) + eps);
  _Pragma("omp simd")
  for (int64_t i = 0; i < d; ++i) out[i] = from_float<T>(to_float(x[i]) * inv * to_float(w[i]));
}

template <typename T>
void rms_norm_rows(const void* x, int64_t x_stride, const void* w, void* out, int64_t out_stride, int64_t rows,
                   int64_t d, float eps) {
  const T* xp = static_cast<const T*>(x);
  T* op = static_cast<T*>(out);
  for (int64_t r = 0; r < rows; ++r) normalize_row(xp + r * x_stride, static_cast<const T*>(w), op + r * out_stride, d, eps);
}

template <typename T>
void add_rms_norm_rows(void* h, int64_t h_stride, const void* delta, int64_t delta_stride, const void* w, void* out,
                       int64_t out_stride, int64_t rows, int64_t d, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    T* hr = static_cast<T*>(h) + r * h_stride;
    const T* dr = static_cast<const T*>(delta) + r * delta_stride;
    _Pragma("omp simd")
    for (int64_t i = 0; i < d; ++i) hr[i] = from_float<T>(to_float(hr[i]) + to_float(dr[i]));
    normalize_row(hr, static_cast<const T*>(w), static_cast<T*>(out) + r * out_stride, d, eps);
  }
}

// x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1]; cos/sin float32 tables
// [positions, head_dim] (positions checked by the caller).
template <typename T>
void rope_rows(void* x, int64_t x_stride, const int64_t* positions, const float* cos, const float* sin, int64_t rows,
               int64_t num_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* c = cos + positions[r] * head_dim;
    const float* s = sin + positions[r] * head_dim;
    for (int64_t h = 0; h < num_heads; ++h) {
      T* v = static_cast<T*>(x) + r * x_stride + h * head_dim;
      _Pragma("omp simd")
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = to_float(v[i]), x2 = to_float(v[i + half]);
        v[i] = from_float<T>(x1 * c[i] - x2 * s[i]);
        v[i + half] = from_float<T>(x2 * c[i + half] + x1 * s[i + half]);
      }
    }
  }
}

template <typename T>
void silu_mul_rows(const void* gate_up, int64_t stride, void* out, int64_t out_stride, int64_t rows, int64_t inter) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* g = static_cast<const T*>(gate_up) + r * stride;
    const T* u = g + inter;
    T* o = static_cast<T*>(out) + r * out_stride;
    _Pragma("omp simd")
    for (int64_t i = 0; i < inter; ++i) {
      const float gv = to_float(g[i]);
      o[i] = from_float<T>(gv / (1.f + exp_approx(-gv)) * to_float(u[i]));
    }
  }
}

// GeGLU (Gemma): gelu_tanh(gate) * up with GELU's tanh approximation, 0.5 x (1 + tanh(y)) for
// y = sqrt(2 / pi) (x + 0.044715 x^3), written as x * sigmoid(2y) = x / (1 + exp(-2y)) so it
// vectorises like silu (exp_approx clamps, so large |y| gives 0 or x exactly).
template <typename T>
void gelu_tanh_mul_rows(const void* gate_up, int64_t stride, void* out, int64_t out_stride, int64_t rows,
                        int64_t inter) {
  constexpr float kTwoSqrt2OverPi = 1.5957691216057308f;  // 2 * sqrt(2 / pi)
  for (int64_t r = 0; r < rows; ++r) {
    const T* g = static_cast<const T*>(gate_up) + r * stride;
    const T* u = g + inter;
    T* o = static_cast<T*>(out) + r * out_stride;
    _Pragma("omp simd")
    for (int64_t i = 0; i < inter; ++i) {
      const float x = to_float(g[i]);
      const float y2 = kTwoSqrt2OverPi * (x + 0.044715f * x * x * x);
      o[i] = from_float<T>(x / (1.f + exp_approx(-y2)) * to_float(u[i]));
    }
  }
}

}  // namespace sglc

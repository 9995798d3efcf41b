// Fused CPU kernels for the small per-layer ops of a Llama decoder layer.
//
// At one decode stream a layer's big work is four weight-only GEMVs and one attention; the rest
// (two RMSNorms, RoPE on q and k, two residual adds, SiLU * up) is ~25 tiny ATen ops whose cost
// is dispatch, allocation and dtype round trips, not arithmetic: ~4 ms of a 12 ms step for
// SmolLM2-135M on 2 cores. Each kernel here replaces a run of them with one loop that reads its
// input once, computes in float32 and rounds once to the tensor's dtype.
//
// Also the decode attention itself, read in place from the paged KV buffer: one call per layer
// writes the new tokens' K/V into their slots and attends over each request's slots, where the
// eager path copied K/V into contiguous workspaces and called SDPA (its CPU flash kernel costs
// ~40 us per call at one query row).
//
// Registered as torch.ops.sglc_cpu.* (build.py builds and loads this file; models/layer_ops.py
// and attention/torch_backend.py keep eager fallbacks with the same semantics). Built with
// -march=native: the inner loops are written to vectorise (`omp simd` reductions, a polynomial
// exp). Work is spread over ATen's intra-op pool only when there is enough of it to pay for
// waking the pool (a one-stream decode step runs inline).

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t kRowGrain = 32;  // rows per intra-op task; fewer rows run on the calling thread

void check_rows(const at::Tensor& x, const char* what) {
  TORCH_CHECK(x.device().is_cpu(), what, ": expected a CPU tensor, got ", x.device());
  TORCH_CHECK(x.dim() == 2, what, ": expected a 2-D tensor [rows, features], got ", x.sizes());
  TORCH_CHECK(x.stride(1) == 1, what, ": the feature dimension must be contiguous");
}

void check_weight(const at::Tensor& w, const at::Tensor& x, const char* what) {
  TORCH_CHECK(w.dim() == 1 && w.size(0) == x.size(1) && w.is_contiguous(), what,
              ": weight must be a contiguous 1-D tensor of ", x.size(1), " features, got ", w.sizes());
  TORCH_CHECK(w.scalar_type() == x.scalar_type(), what, ": weight dtype ", w.scalar_type(),
              " differs from input dtype ", x.scalar_type());
}

// Element conversions that vectorise: c10::BFloat16's own float conversion rounds through a
// NaN branch GCC does not vectorise, which left every bf16 loop here scalar (8 ns per element).
inline float to_float(float v) { return v; }
inline float to_float(at::Half v) { return static_cast<float>(v); }
inline float to_float(at::BFloat16 v) {
  const uint32_t bits = static_cast<uint32_t>(v.x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

template <typename T>
inline T from_float(float v) {
  return static_cast<T>(v);
}
template <>
inline at::BFloat16 from_float<at::BFloat16>(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;  // round to nearest even
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  at::BFloat16 out;
  out.x = static_cast<uint16_t>(nan ? 0x7FC0u : rounded);
  return out;
}

// NOTE: loops are marked with _Pragma, not #pragma: a #pragma cannot sit inside the lambdas
// passed to AT_DISPATCH (macro arguments).

// exp(x) to ~2 ulp for x in [-87, 88] (Cephes' expf polynomial): std::exp does not vectorise.
inline float exp_approx(float x) {
  x = std::min(std::max(x, -87.3f), 88.3f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
  return p * two_n;
}

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
  for (int64_t i = 0; i < d; ++i) {
    out[i] = from_float<T>(to_float(x[i]) * inv * to_float(w[i]));
  }
}

// y = x / sqrt(mean(x^2) + eps) * weight, per row.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rows(x, "rms_norm");
  check_weight(weight, x, "rms_norm");
  auto out = at::empty(x.sizes(), x.options());
  const int64_t rows = x.size(0), d = x.size(1), xs = x.stride(0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_norm", [&] {
    const scalar_t* xp = x.const_data_ptr<scalar_t>();
    const scalar_t* wp = weight.const_data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) normalize_row(xp + r * xs, wp, op + r * d, d, static_cast<float>(eps));
    });
  });
  return out;
}

// h += delta (in place, rounded to h's dtype as `h + delta` would be); returns rms_norm(h).
at::Tensor add_rms_norm_(at::Tensor& h, const at::Tensor& delta, const at::Tensor& weight, double eps) {
  check_rows(h, "add_rms_norm_");
  check_rows(delta, "add_rms_norm_ (delta)");
  check_weight(weight, h, "add_rms_norm_");
  TORCH_CHECK(delta.sizes() == h.sizes() && delta.scalar_type() == h.scalar_type(),
              "add_rms_norm_: delta ", delta.sizes(), " ", delta.scalar_type(), " does not match h ",
              h.sizes(), " ", h.scalar_type());
  auto out = at::empty(h.sizes(), h.options());
  const int64_t rows = h.size(0), d = h.size(1), hs = h.stride(0), ds = delta.stride(0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, h.scalar_type(), "add_rms_norm_", [&] {
    scalar_t* hp = h.data_ptr<scalar_t>();
    const scalar_t* dp = delta.const_data_ptr<scalar_t>();
    const scalar_t* wp = weight.const_data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        scalar_t* hr = hp + r * hs;
        const scalar_t* dr = dp + r * ds;
_Pragma("omp simd")
        for (int64_t i = 0; i < d; ++i) hr[i] = from_float<scalar_t>(to_float(hr[i]) + to_float(dr[i]));
        normalize_row(hr, wp, op + r * d, d, static_cast<float>(eps));
      }
    });
  });
  return out;
}

// Rotates the first `num_heads` heads of every row of x [T, >= num_heads * head_dim] in place,
// Hugging Face's layout: x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1].
// cos/sin: float32 tables [max_positions, head_dim]; positions: int64 [T].
void rope_(at::Tensor& x, const at::Tensor& positions, const at::Tensor& cos, const at::Tensor& sin,
           int64_t num_heads) {
  check_rows(x, "rope_");
  TORCH_CHECK(cos.dim() == 2 && cos.sizes() == sin.sizes() && cos.is_contiguous() && sin.is_contiguous() &&
                  cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat,
              "rope_: cos/sin must be contiguous float32 tables of the same shape [positions, head_dim]");
  const int64_t hd = cos.size(1), half = hd / 2, max_pos = cos.size(0);
  TORCH_CHECK(hd % 2 == 0 && num_heads >= 0 && num_heads * hd <= x.size(1), "rope_: ", num_heads,
              " heads of ", hd, " do not fit rows of ", x.size(1));
  TORCH_CHECK(positions.dim() == 1 && positions.size(0) == x.size(0) && positions.scalar_type() == at::kLong,
              "rope_: positions must be int64 [", x.size(0), "], got ", positions.sizes(), " ",
              positions.scalar_type());
  auto pos = positions.contiguous();
  const int64_t* pp = pos.const_data_ptr<int64_t>();
  for (int64_t t = 0; t < x.size(0); ++t) {  // NOTE: checked before any row is written
    TORCH_CHECK(pp[t] >= 0 && pp[t] < max_pos, "rope_: position ", pp[t], " outside the table of ", max_pos);
  }
  const float* cp = cos.const_data_ptr<float>();
  const float* sp = sin.const_data_ptr<float>();
  const int64_t rows = x.size(0), xs = x.stride(0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rope_", [&] {
    scalar_t* xp = x.data_ptr<scalar_t>();
    at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* c = cp + pp[r] * hd;
        const float* s = sp + pp[r] * hd;
        for (int64_t h = 0; h < num_heads; ++h) {
          scalar_t* v = xp + r * xs + h * hd;
_Pragma("omp simd")
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = to_float(v[i]), x2 = to_float(v[i + half]);
            v[i] = from_float<scalar_t>(x1 * c[i] - x2 * s[i]);
            v[i + half] = from_float<scalar_t>(x2 * c[i + half] + x1 * s[i + half]);
          }
        }
      }
    });
  });
}

// gate_up [T, 2 * I] (gate first) -> silu(gate) * up [T, I].
at::Tensor silu_mul(const at::Tensor& gate_up) {
  check_rows(gate_up, "silu_mul");
  TORCH_CHECK(gate_up.size(1) % 2 == 0, "silu_mul: expected an even width [T, 2 * I], got ", gate_up.sizes());
  const int64_t rows = gate_up.size(0), inter = gate_up.size(1) / 2, gs = gate_up.stride(0);
  auto out = at::empty({rows, inter}, gate_up.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, gate_up.scalar_type(), "silu_mul", [&] {
    const scalar_t* gp = gate_up.const_data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* g = gp + r * gs;
        const scalar_t* u = g + inter;
        scalar_t* o = op + r * inter;
_Pragma("omp simd")
        for (int64_t i = 0; i < inter; ++i) {
          const float gv = to_float(g[i]);
          o[i] = from_float<scalar_t>(gv / (1.f + exp_approx(-gv)) * to_float(u[i]));
        }
      }
    });
  });
  return out;
}

template <typename T>
inline float dot_row(const float* q, const T* k, int64_t d) {
  float acc = 0.f;
_Pragma("omp simd reduction(+ : acc)")
  for (int64_t i = 0; i < d; ++i) acc += q[i] * to_float(k[i]);
  return acc;
}

// Touches the cache lines of a K/V row a few keys ahead: a step's K/V were last read one step
// (and ~80 MB of weights) ago, so they come from DRAM, and slots need not be contiguous.
inline void prefetch_row(const void* row, int64_t bytes) {
  const char* p = static_cast<const char*>(row);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
}

constexpr int64_t kPrefetchAhead = 6;  // keys
constexpr int64_t kMinPieceKeys = 128;  // the fewest keys a split-K piece of one request's keys gets

// Attention state of query rows over a run of keys: per row m = the largest score, l = the sum of
// exp(score - m), acc = the sum of exp(score - m) * v (unnormalised). States over disjoint runs of
// keys merge exactly (merge_state), which is how a shared prefix's attention, computed once for
// every request sharing it, joins each request's own suffix.

// Folds the state (m2, l2, acc2) into (m, l, acc): one query row, d values.
inline void merge_state(float& m, float& l, float* __restrict__ acc, float m2, float l2,
                        const float* __restrict__ acc2, int64_t d) {
  const float mn = std::max(m, m2);
  const float a = exp_approx(m - mn), b = exp_approx(m2 - mn);
  l = l * a + l2 * b;
  m = mn;
  _Pragma("omp simd")
  for (int64_t i = 0; i < d; ++i) acc[i] = acc[i] * a + acc2[i] * b;
}

template <typename T>
inline void write_normalised(const float* __restrict__ acc, float l, int64_t d, T* __restrict__ out) {
  const float inv = 1.f / l;
  _Pragma("omp simd")
  for (int64_t i = 0; i < d; ++i) out[i] = from_float<T>(acc[i] * inv);
}

// Scores s[0, len) of one query row -> exp(s - m) in place; m = the largest score, l = their sum.
inline void exponentiate_scores(float* __restrict__ s, int64_t len, float& m, float& l) {
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

#if defined(__AVX512F__)
inline __m512 load16_float(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16_float(const at::BFloat16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}
inline __m512 load16_float(const at::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// a[0:4] += p * v[0:4]: one 64-wide row of P.V accumulators updated by one weighted V row.
inline void add_scaled_row(__m512* __restrict__ a, __m512 p, const __m512* __restrict__ v) {
  for (int c = 0; c < 4; ++c) a[c] = _mm512_fmadd_ps(p, v[c], a[c]);
}

// attend_request for head_dim 64 and G <= 4 query heads per kv head: one kv head at a time, its G
// query rows (scaled) and their accumulators held in registers through the keys. The generic
// loop reloads both from memory for every key and head; this one reads each key's 64 values
// once per kv head and leaves only one horizontal sum per key and head.
template <int G, typename T>
void attend_kv_heads_d64(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k,
                         const T* __restrict__ v, int64_t row_stride, const int64_t* __restrict__ slots,
                         int64_t len, int64_t kv_heads, float scale, float* __restrict__ scores,
                         float* __restrict__ m, float* __restrict__ l, float* __restrict__ acc) {
  constexpr int64_t d = 64;
  constexpr int64_t seg_bytes = d * static_cast<int64_t>(sizeof(T));
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t g = 0; g < kv_heads; ++g) {
    __m512 qv[G][4];
    for (int j = 0; j < G; ++j) {
      for (int c = 0; c < 4; ++c) qv[j][c] = _mm512_mul_ps(load16_float(q + (g * G + j) * q_stride + c * 16), sv);
    }
    float* sg = scores + g * G * len;
    const T* kg = k + g * d;
    for (int64_t t = 0; t < len; ++t) {
      if (t + kPrefetchAhead < len) prefetch_row(kg + slots[t + kPrefetchAhead] * row_stride, seg_bytes);
      const T* kr = kg + slots[t] * row_stride;
      const __m512 k0 = load16_float(kr), k1 = load16_float(kr + 16), k2 = load16_float(kr + 32),
                   k3 = load16_float(kr + 48);
      for (int j = 0; j < G; ++j) {
        __m512 sj = _mm512_mul_ps(qv[j][0], k0);
        sj = _mm512_fmadd_ps(qv[j][1], k1, sj);
        sj = _mm512_fmadd_ps(qv[j][2], k2, sj);
        sj = _mm512_fmadd_ps(qv[j][3], k3, sj);
        sg[j * len + t] = _mm512_reduce_add_ps(sj);
      }
    }
    for (int j = 0; j < G; ++j) exponentiate_scores(sg + j * len, len, m[g * G + j], l[g * G + j]);
    __m512 a[G][4];
    for (int j = 0; j < G; ++j) {
      for (int c = 0; c < 4; ++c) a[j][c] = _mm512_setzero_ps();
    }
    const T* vg = v + g * d;
    for (int64_t t = 0; t < len; ++t) {
      if (t + kPrefetchAhead < len) prefetch_row(vg + slots[t + kPrefetchAhead] * row_stride, seg_bytes);
      const T* vr = vg + slots[t] * row_stride;
      const __m512 vt[4] = {load16_float(vr), load16_float(vr + 16), load16_float(vr + 32),
                            load16_float(vr + 48)};
      for (int j = 0; j < G; ++j) add_scaled_row(a[j], _mm512_set1_ps(sg[j * len + t]), vt);
    }
    for (int j = 0; j < G; ++j) {
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(acc + (g * G + j) * d + c * 16, a[j][c]);
    }
  }
}
#endif

// Whether attend_request runs the register kernel for this head layout (else the generic loop).
inline bool register_kernel_applies(int64_t d, int64_t group) {
#if defined(__AVX512F__)
  return d == 64 && group >= 1 && group <= 4;
#else
  (void)d;
  (void)group;
  return false;
#endif
}

// State of one request's `heads` query heads (rows of q, `q_stride` apart) over its keys: key t's
// row of all kv heads is k + slots[t] * row_stride (row_stride = kv_heads * d), query head h reads
// kv head h / group. Key-major: each K/V row is read once, for every head, in slot order, converted
// to float once (kv heads are shared by `group` query heads). Scratch: qf [heads * d], scores
// [heads * len], row [row_stride]. Writes m, l [heads] and acc [heads * d].
template <typename T>
void attend_request(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k, const T* __restrict__ v,
                    int64_t row_stride, const int64_t* __restrict__ slots, int64_t len, int64_t heads,
                    int64_t group, int64_t d, float scale, float* __restrict__ qf, float* __restrict__ scores,
                    float* __restrict__ row, float* __restrict__ m, float* __restrict__ l,
                    float* __restrict__ acc) {
#if defined(__AVX512F__)
  if constexpr (!std::is_same_v<T, double>) {  // NOTE: float64 stays on the generic loop
    const int64_t kv_heads = heads / group;
    switch (register_kernel_applies(d, group) ? group : 0) {
      case 1: return attend_kv_heads_d64<1>(q, q_stride, k, v, row_stride, slots, len, kv_heads, scale, scores, m, l, acc);
      case 2: return attend_kv_heads_d64<2>(q, q_stride, k, v, row_stride, slots, len, kv_heads, scale, scores, m, l, acc);
      case 3: return attend_kv_heads_d64<3>(q, q_stride, k, v, row_stride, slots, len, kv_heads, scale, scores, m, l, acc);
      case 4: return attend_kv_heads_d64<4>(q, q_stride, k, v, row_stride, slots, len, kv_heads, scale, scores, m, l, acc);
      default: break;
    }
  }
#endif
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
  for (int64_t h = 0; h < heads; ++h) exponentiate_scores(scores + h * len, len, m[h], l[h]);
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
// Cascade attention over a prefix that several decode requests share (the same slots: the radix
// cache hands every request that matched a prefix the same KV slots). The per-request kernel
// above reads the prefix once per request and pays a horizontal sum per (key, head); here the
// query rows of all sharing requests for one kv head (W = rows rounded up to 16 lanes) are
// transposed once, so each key's scores for all rows are d broadcast-FMAs of W-wide vectors, and
// each K/V row is converted once for all of them. The prefix is split into chunks of keys, one
// task each (per kv head), and every request merges its chunks' states with its own suffix's.

constexpr int kLanes = 16;            // query rows per vector of scores
constexpr int kMaxChunks = 4;         // at most 64 query rows per block of sharing requests
constexpr int64_t kChunkKeys = 256;   // prefix keys per task
constexpr int64_t kValueBlock = 16;   // V rows converted at a time
constexpr int64_t kAccWidth = 64;     // accumulator columns kept in registers

// acc[k][0:kAccWidth] += sum_i p[i * p_stride + k] * v[i * v_stride + 0:kAccWidth] for the first
// `nr` of 4 rows k (p holds 4 readable values per i), over n rows of v: the P V update of
// shared_prefix_state, 16 accumulators in registers, each V load used by 4 rows.
inline void add_weighted_rows(const float* __restrict__ p, int64_t p_stride, const float* __restrict__ v,
                              int64_t v_stride, int64_t n, float* __restrict__ acc, int64_t acc_stride,
                              int64_t nr) {
  static_assert(kAccWidth == 64, "add_weighted_rows holds 4 x 64 accumulators");
#if defined(__AVX512F__)
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
#else
  for (int64_t k = 0; k < nr; ++k) {
    float* ak = acc + k * acc_stride;
    for (int64_t i = 0; i < n; ++i) {
      const float pk = p[i * p_stride + k];
      _Pragma("omp simd")
      for (int64_t j = 0; j < kAccWidth; ++j) ak[j] += pk * v[i * v_stride + j];
    }
  }
#endif
}

// State of `rows` query rows over keys slots[0, len) of one kv head (at `head_off` in a slot's
// row): qt [d][W] the rows transposed (scaled; padding rows zero). Scratch: s [len * W],
// kv [kValueBlock * dp] (dp = d rounded up to kAccWidth, padding zero). Writes m, l [W] and
// acc [rows * dp].
template <int NC, typename T>
void shared_prefix_state(const float* __restrict__ qt, int64_t rows, const T* __restrict__ k,
                         const T* __restrict__ v, int64_t row_stride, int64_t head_off,
                         const int64_t* __restrict__ slots, int64_t len, int64_t d, int64_t dp,
                         float* __restrict__ s, float* __restrict__ kv, float* __restrict__ m,
                         float* __restrict__ l, float* __restrict__ acc) {
  constexpr int W = NC * kLanes;
  // Keys scored together: kKeys * NC accumulators in registers (16 of AVX-512's 32).
  constexpr int64_t kKeys = NC <= 2 ? 16 / NC : 4;
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
  // Softmax along the keys, for all W rows at once.
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
  // P V: a block of V rows converted once, then every row's accumulator (kAccWidth columns at a
  // time, in registers) runs over the block.
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
        add_weighted_rows(s + t0 * W + r0, W, kv + j0, dp, nb, acc + r0 * dp + j0, dp, nr);
      }
    }
  }
}

// Requests that share a prefix, at most kMaxChunks * kLanes query rows of one kv head.
struct SharedBlock {
  std::vector<int64_t> members;  // request indices
  int64_t prefix = 0;            // shared slots: the first `prefix` of each member's index row
  int64_t chunks = 0;            // ceil(prefix / kChunkKeys)
  int64_t first_task = 0;        // tasks: first_task + kv_head * chunks + chunk
};

void check_cache(const at::Tensor& c, const char* what) {
  TORCH_CHECK(c.device().is_cpu() && c.dim() == 3 && c.is_contiguous(), "decode_attention_: ", what,
              " must be a contiguous CPU tensor [slots, kv_heads, head_dim], got ", c.sizes());
}

void check_heads(const at::Tensor& t, int64_t rows, int64_t heads, int64_t d, const char* what) {
  TORCH_CHECK(t.dim() == 3 && t.size(0) == rows && t.size(1) == heads && t.size(2) == d && t.stride(2) == 1,
              "decode_attention_: ", what, " must be [", rows, ", ", heads, ", ", d,
              "] with a contiguous last dimension, got ", t.sizes());
}

// One decode step of attention for B requests, one new token each, over the paged KV buffer:
// writes k_new/v_new [B, KV, D] at slots `loc` [B], then for request b attends q[b] [H, D] over
// the slots index[b, :lens[b]] (which end with loc[b]). Grouped-query heads: query head h reads
// kv head h / (H / KV) (Hugging Face's repeat_kv layout). Returns [B, H * D] in q's dtype.
// Shared prefixes (optional): prefix_group [B] names each request's group (-1: none) and
// prefix_lens [G] how many leading slots of its index row every member of group g has in common
// (checked); those keys are attended once for the whole group (cascade, above).
at::Tensor decode_attention_(at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& loc,
                             const at::Tensor& k_new, const at::Tensor& v_new, const at::Tensor& q,
                             const at::Tensor& index, const at::Tensor& lens, double scale,
                             const std::optional<at::Tensor>& prefix_group,
                             const std::optional<at::Tensor>& prefix_lens) {
  check_cache(k_cache, "k_cache");
  check_cache(v_cache, "v_cache");
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes(), "decode_attention_: k_cache ", k_cache.sizes(),
              " and v_cache ", v_cache.sizes(), " differ");
  const int64_t slots = k_cache.size(0), kvh = k_cache.size(1), d = k_cache.size(2);
  TORCH_CHECK(q.dim() == 3, "decode_attention_: q must be [B, heads, head_dim], got ", q.sizes());
  const int64_t b = q.size(0), h = q.size(1);
  TORCH_CHECK(h % kvh == 0, "decode_attention_: ", h, " query heads are not a multiple of ", kvh, " kv heads");
  check_heads(q, b, h, d, "q");
  check_heads(k_new, b, kvh, d, "k_new");
  check_heads(v_new, b, kvh, d, "v_new");
  const auto dtype = k_cache.scalar_type();
  TORCH_CHECK(v_cache.scalar_type() == dtype && q.scalar_type() == dtype && k_new.scalar_type() == dtype &&
                  v_new.scalar_type() == dtype,
              "decode_attention_: q, k_new, v_new and the caches must share one dtype");
  TORCH_CHECK(index.dim() == 2 && index.size(0) == b && index.is_contiguous() && index.scalar_type() == at::kLong,
              "decode_attention_: index must be a contiguous int64 [", b, ", max_len] slot matrix, got ",
              index.sizes());
  TORCH_CHECK(loc.dim() == 1 && loc.size(0) == b && lens.dim() == 1 && lens.size(0) == b &&
                  loc.scalar_type() == at::kLong && lens.scalar_type() == at::kLong,
              "decode_attention_: loc and lens must be int64 [", b, "]");
  const auto loc_c = loc.contiguous(), lens_c = lens.contiguous();
  const int64_t* locp = loc_c.const_data_ptr<int64_t>();
  const int64_t* lenp = lens_c.const_data_ptr<int64_t>();
  const int64_t* idx = index.const_data_ptr<int64_t>();
  const int64_t max_len = index.size(1);
  int64_t total_keys = 0;
  for (int64_t r = 0; r < b; ++r) {  // NOTE: every slot is checked before anything is written
    TORCH_CHECK(locp[r] >= 0 && locp[r] < slots, "decode_attention_: loc ", locp[r], " outside ", slots, " slots");
    TORCH_CHECK(lenp[r] >= 1 && lenp[r] <= max_len, "decode_attention_: request ", r, " length ", lenp[r],
                " outside [1, ", max_len, "]");
    for (int64_t j = 0; j < lenp[r]; ++j) {
      const int64_t s = idx[r * max_len + j];
      TORCH_CHECK(s >= 0 && s < slots, "decode_attention_: slot ", s, " outside ", slots, " slots");
    }
    total_keys += lenp[r];
  }
  const int64_t group = h / kvh;
  // Shared-prefix blocks: a group's members, at most kMaxChunks * kLanes query rows each.
  TORCH_CHECK(prefix_group.has_value() == prefix_lens.has_value(),
              "decode_attention_: prefix_group and prefix_lens go together");
  TORCH_CHECK(group <= kMaxChunks * kLanes || !prefix_group.has_value(),
              "decode_attention_: ", group, " query heads per kv head are too many for shared prefixes");
  std::vector<SharedBlock> blocks;
  std::vector<int64_t> block_of(b, -1), row_of(b, 0), own_start(b, 0);
  int64_t tasks = 0;
  if (prefix_group.has_value()) {
    const auto pg = prefix_group->contiguous(), pl = prefix_lens->contiguous();
    TORCH_CHECK(pg.dim() == 1 && pg.size(0) == b && pg.scalar_type() == at::kLong && pl.dim() == 1 &&
                    pl.scalar_type() == at::kLong,
                "decode_attention_: prefix_group must be int64 [", b, "] and prefix_lens int64 [groups]");
    const int64_t* gp = pg.const_data_ptr<int64_t>();
    const int64_t* plp = pl.const_data_ptr<int64_t>();
    const int64_t groups = pl.size(0), per_block = kMaxChunks * kLanes / group;
    std::vector<int64_t> leader(groups, -1), open_block(groups, -1);
    for (int64_t r = 0; r < b; ++r) {
      const int64_t g = gp[r];
      TORCH_CHECK(g >= -1 && g < groups, "decode_attention_: prefix_group ", g, " outside [-1, ", groups, ")");
      if (g < 0) continue;
      const int64_t p = plp[g];
      TORCH_CHECK(p >= 1 && p < lenp[r], "decode_attention_: shared prefix of ", p, " slots for request ", r,
                  " of length ", lenp[r], " (it must keep at least its new token)");
      if (leader[g] < 0) leader[g] = r;
      TORCH_CHECK(std::equal(idx + r * max_len, idx + r * max_len + p, idx + leader[g] * max_len),
                  "decode_attention_: request ", r, " does not share the first ", p, " slots of group ", g);
      if (open_block[g] < 0 || static_cast<int64_t>(blocks[open_block[g]].members.size()) == per_block) {
        open_block[g] = static_cast<int64_t>(blocks.size());
        blocks.push_back(SharedBlock{{}, p, (p + kChunkKeys - 1) / kChunkKeys, 0});
      }
      SharedBlock& blk = blocks[open_block[g]];
      block_of[r] = open_block[g];
      row_of[r] = static_cast<int64_t>(blk.members.size()) * group;
      own_start[r] = p;
      blk.members.push_back(r);
    }
    for (auto& blk : blocks) {
      blk.first_task = tasks;
      tasks += kvh * blk.chunks;
    }
  }
  const int64_t dp = (d + kAccWidth - 1) / kAccWidth * kAccWidth;
  const int64_t state_width = kMaxChunks * kLanes;
  std::vector<float> task_m(tasks * state_width), task_l(tasks * state_width), task_acc(tasks * state_width * dp);

  auto out = at::empty({b, h * d}, q.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "decode_attention_", [&] {
    scalar_t* kc = k_cache.data_ptr<scalar_t>();
    scalar_t* vc = v_cache.data_ptr<scalar_t>();
    for (int64_t r = 0; r < b; ++r) {
      for (int64_t g = 0; g < kvh; ++g) {
        const scalar_t* kn = k_new.const_data_ptr<scalar_t>() + r * k_new.stride(0) + g * k_new.stride(1);
        const scalar_t* vn = v_new.const_data_ptr<scalar_t>() + r * v_new.stride(0) + g * v_new.stride(1);
        std::memcpy(kc + (locp[r] * kvh + g) * d, kn, d * sizeof(scalar_t));
        std::memcpy(vc + (locp[r] * kvh + g) * d, vn, d * sizeof(scalar_t));
      }
    }
    const scalar_t* qp = q.const_data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const float fscale = static_cast<float>(scale);
    // NOTE: below ~256 key rows in all (~20 us of work), waking the intra-op pool costs more than
    // it saves.
    const bool pooled = total_keys >= 256;

    // 1. The shared prefixes: one task per (block, kv head, chunk of keys).
    std::vector<std::pair<int64_t, int64_t>> task_at(tasks);  // task -> (block, offset in it)
    for (int64_t bi = 0; bi < static_cast<int64_t>(blocks.size()); ++bi) {
      for (int64_t t = 0; t < kvh * blocks[bi].chunks; ++t) task_at[blocks[bi].first_task + t] = {bi, t};
    }
    const auto run_prefix = [&](int64_t begin, int64_t end) {
      std::vector<float> qt(d * state_width), s(kChunkKeys * state_width), kv(kValueBlock * dp, 0.f);
      for (int64_t task = begin; task < end; ++task) {
        const SharedBlock& blk = blocks[task_at[task].first];
        const int64_t g = task_at[task].second / blk.chunks, chunk = task_at[task].second % blk.chunks;
        const int64_t rows = static_cast<int64_t>(blk.members.size()) * group;
        const int nc = static_cast<int>((rows + kLanes - 1) / kLanes), w = nc * kLanes;
        std::fill(qt.begin(), qt.begin() + d * w, 0.f);
        for (int64_t mi = 0; mi < static_cast<int64_t>(blk.members.size()); ++mi) {
          const int64_t r = blk.members[mi];
          for (int64_t hh = 0; hh < group; ++hh) {
            const scalar_t* qr = qp + r * q.stride(0) + (g * group + hh) * q.stride(1);
            for (int64_t j = 0; j < d; ++j) qt[j * w + mi * group + hh] = to_float(qr[j]) * fscale;
          }
        }
        const int64_t first = chunk * kChunkKeys, len = std::min(kChunkKeys, blk.prefix - first);
        const int64_t* sl = idx + blk.members[0] * max_len + first;
        float* m = task_m.data() + task * state_width;
        float* l = task_l.data() + task * state_width;
        float* acc = task_acc.data() + task * state_width * dp;
        switch (nc) {
          case 1: shared_prefix_state<1>(qt.data(), rows, kc, vc, kvh * d, g * d, sl, len, d, dp, s.data(), kv.data(), m, l, acc); break;
          case 2: shared_prefix_state<2>(qt.data(), rows, kc, vc, kvh * d, g * d, sl, len, d, dp, s.data(), kv.data(), m, l, acc); break;
          case 3: shared_prefix_state<3>(qt.data(), rows, kc, vc, kvh * d, g * d, sl, len, d, dp, s.data(), kv.data(), m, l, acc); break;
          default: shared_prefix_state<4>(qt.data(), rows, kc, vc, kvh * d, g * d, sl, len, d, dp, s.data(), kv.data(), m, l, acc); break;
        }
      }
    };
    if (tasks > 0) {
      if (pooled && tasks > 1) {
        at::parallel_for(0, tasks, 1, run_prefix);
      } else {
        run_prefix(0, tasks);
      }
    }

    // 2. Each request's own keys (all of them without a shared prefix), merged with its prefix.
    //    With fewer requests than twice the threads (one long conversation), a request's keys are
    //    split into pieces run as separate tasks (split-K), so every thread has work.
    const auto finish_request = [&](int64_t r, float* m, float* l, float* acc) {
      if (block_of[r] >= 0) {
        const SharedBlock& blk = blocks[block_of[r]];
        for (int64_t hh = 0; hh < h; ++hh) {
          const int64_t g = hh / group, state_row = row_of[r] + hh % group;
          for (int64_t c = 0; c < blk.chunks; ++c) {
            const int64_t task = blk.first_task + g * blk.chunks + c;
            merge_state(m[hh], l[hh], acc + hh * d, task_m[task * state_width + state_row],
                        task_l[task * state_width + state_row],
                        task_acc.data() + (task * state_width + state_row) * dp, d);
          }
        }
      }
      for (int64_t hh = 0; hh < h; ++hh) write_normalised(acc + hh * d, l[hh], d, op + (r * h + hh) * d);
    };
    const int64_t threads = at::get_num_threads();
    int64_t own_keys = 0;
    for (int64_t r = 0; r < b; ++r) own_keys += lenp[r] - own_start[r];
    const int64_t piece_keys = std::max(kMinPieceKeys, (own_keys + 2 * threads - 1) / (2 * threads));
    const bool split = pooled && threads > 1 && b < 2 * threads;
    std::vector<int64_t> piece_first(b + 1, 0);
    for (int64_t r = 0; r < b; ++r) {
      const int64_t len = lenp[r] - own_start[r];
      piece_first[r + 1] = piece_first[r] + (split ? (len + piece_keys - 1) / piece_keys : 1);
    }
    const int64_t pieces = piece_first[b];

    if (pieces == b) {  // one piece per request: attend, merge and write in one task
      const auto run_own = [&](int64_t begin, int64_t end) {
        std::vector<float> qf(h * d), acc(h * d), row(kvh * d), m(h), l(h), scores;
        for (int64_t r = begin; r < end; ++r) {
          const int64_t start = own_start[r], len = lenp[r] - start;
          scores.resize(h * len);
          attend_request(qp + r * q.stride(0), q.stride(1), kc, vc, kvh * d, idx + r * max_len + start, len, h,
                         group, d, fscale, qf.data(), scores.data(), row.data(), m.data(), l.data(), acc.data());
          finish_request(r, m.data(), l.data(), acc.data());
        }
      };
      if (b == 1 || !pooled) {
        run_own(0, b);
      } else {
        at::parallel_for(0, b, 1, run_own);
      }
    } else {
      std::vector<int64_t> piece_req(pieces);
      for (int64_t r = 0; r < b; ++r) std::fill(piece_req.begin() + piece_first[r], piece_req.begin() + piece_first[r + 1], r);
      std::vector<float> piece_m(pieces * h), piece_l(pieces * h), piece_acc(pieces * h * d);
      at::parallel_for(0, pieces, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> qf(h * d), row(kvh * d), scores(h * piece_keys);
        for (int64_t pc = begin; pc < end; ++pc) {
          const int64_t r = piece_req[pc], first = own_start[r] + (pc - piece_first[r]) * piece_keys;
          const int64_t len = std::min(piece_keys, lenp[r] - first);
          attend_request(qp + r * q.stride(0), q.stride(1), kc, vc, kvh * d, idx + r * max_len + first, len, h,
                         group, d, fscale, qf.data(), scores.data(), row.data(), piece_m.data() + pc * h,
                         piece_l.data() + pc * h, piece_acc.data() + pc * h * d);
        }
      });
      for (int64_t r = 0; r < b; ++r) {  // NOTE: a few requests' merges: not worth a pool wake-up
        const int64_t p0 = piece_first[r];
        float* m = piece_m.data() + p0 * h;
        float* l = piece_l.data() + p0 * h;
        float* acc = piece_acc.data() + p0 * h * d;
        for (int64_t pc = p0 + 1; pc < piece_first[r + 1]; ++pc) {
          for (int64_t hh = 0; hh < h; ++hh) {
            merge_state(m[hh], l[hh], acc + hh * d, piece_m[pc * h + hh], piece_l[pc * h + hh],
                        piece_acc.data() + (pc * h + hh) * d, d);
          }
        }
        finish_request(r, m, l, acc);
      }
    }
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Weight-only integer linears for a few rows (decode) on AVX512-VNNI, computed the way llama.cpp
// runs Q8_0 and Q4_1 matmuls: each activation row is quantized to int8 in blocks of 32 inputs
// (x ~ dx * xq, one float scale per block), and the products are integer dot products (vpdpbusd).
//
// Output channels are the vector lanes: weights are stored in tiles of 16 channels, interleaved
// so that one 64-byte load holds 4 consecutive inputs of each of the 16 channels, and one
// vpdpbusd multiplies them with 4 activation bytes broadcast to every lane. A block of 32 inputs
// thus ends as 16 channel sums in one register, scaled with no horizontal reduction, and each
// weight load serves up to 8 activation rows. (A first version, one channel at a time with a
// reduction tree per 8 blocks, ran the lm_head at ~0.45 ms per row and measured no faster than
// torch's kernel for int4.)
constexpr int64_t QBLOCK = 32;     // inputs per quantization block (GGUF's)
constexpr int64_t QTILE = 16;      // output channels per tile (the vector lanes)
constexpr int QMAX_ROWS = 8;       // activation rows per pass over a tile

void check_activations(const at::Tensor& x, int64_t k, const char* what) {
  check_rows(x, what);
  TORCH_CHECK(x.size(1) == k, what, ": input has ", x.size(1), " features, the weight ", k);
  TORCH_CHECK(k % QBLOCK == 0, what, ": in_features must be a multiple of ", QBLOCK, ", got ", k);
}

void check_bias(const std::optional<at::Tensor>& bias, const at::Tensor& x, int64_t n, const char* what) {
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == n && bias->is_contiguous() && bias->scalar_type() == x.scalar_type(),
                what, ": bias must be a contiguous [", n, "] tensor in the input's dtype");
  }
}

struct QuantizedRows {  // every activation row of one call, quantized per block
  std::vector<int8_t> q;    // [rows, K]
  std::vector<float> dx;    // [rows, K/32] block scales
  std::vector<float> sx;    // [rows, K/32] dx * sum(xq) per block
  std::vector<int32_t> sq;  // [rows, K/32] sum(xq) per block
};

template <typename T>
void quantize_rows(const T* x, int64_t stride, int64_t rows, int64_t k, QuantizedRows& out) {
  const int64_t blocks = k / QBLOCK;
  out.q.resize(rows * k);
  out.dx.resize(rows * blocks);
  out.sx.resize(rows * blocks);
  out.sq.resize(rows * blocks);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const T* xb = x + r * stride + b * QBLOCK;
      float amax = 0.f;
      for (int64_t i = 0; i < QBLOCK; ++i) amax = std::max(amax, std::fabs(to_float(xb[i])));
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      int8_t* dst = out.q.data() + r * k + b * QBLOCK;
      int sum = 0;
      for (int64_t i = 0; i < QBLOCK; ++i) {
        const int v = static_cast<int>(std::nearbyint(to_float(xb[i]) * inv));
        dst[i] = static_cast<int8_t>(v);
        sum += v;
      }
      out.dx[r * blocks + b] = amax / 127.f;
      out.sx[r * blocks + b] = amax / 127.f * static_cast<float>(sum);
      out.sq[r * blocks + b] = sum;
    }
  }
}

#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#define SGLC_HAVE_VNNI 1

inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

template <typename T>
void store_tile(T* out, const __m512 v) {
  alignas(64) float tmp[QTILE];
  _mm512_store_ps(tmp, v);
  for (int64_t i = 0; i < QTILE; ++i) out[i] = from_float<T>(tmp[i]);
}
inline void store_tile(float* out, const __m512 v) { _mm512_storeu_ps(out, v); }

template <typename T>
__m512 add_bias(__m512 acc, const T* bias) {
  if (bias == nullptr) return acc;
  alignas(64) float bv[QTILE];
  for (int64_t i = 0; i < QTILE; ++i) bv[i] = to_float(bias[i]);
  return _mm512_add_ps(acc, _mm512_load_ps(bv));
}

// Runs tile(t, r0, rows) for every tile and group of at most 8 rows, tiles spread over the pool.
// NOTE: row groups inside the tile loop: a tile's weights (a few KB) come from memory once and
// from L1/L2 for the later groups.
template <typename Tile>
void for_tiles(int64_t tiles, int64_t rows, const Tile& tile) {
  at::parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t r0 = 0; r0 < rows; r0 += QMAX_ROWS) {
        tile(t, r0, static_cast<int>(std::min<int64_t>(QMAX_ROWS, rows - r0)));
      }
    }
  });
}

// R as a template argument: the accumulators stay in registers.
template <template <int> class Kernel, typename... Args>
void with_rows(int rows, Args&&... args) {
  switch (rows) {
    case 1: Kernel<1>::run(args...); break;
    case 2: Kernel<2>::run(args...); break;
    case 3: Kernel<3>::run(args...); break;
    case 4: Kernel<4>::run(args...); break;
    case 5: Kernel<5>::run(args...); break;
    case 6: Kernel<6>::run(args...); break;
    case 7: Kernel<7>::run(args...); break;
    default: Kernel<8>::run(args...); break;
  }
}

// One call of a tiled integer linear on checked inputs: the rows quantized once, then
// Kernel<R>::run(weights..., act, k, t, r0, n, bias, out) for every tile and group of rows.
template <template <int> class Kernel, typename... Weights>
at::Tensor run_tiled(const at::Tensor& x, int64_t tiles, int64_t k, const std::optional<at::Tensor>& bias,
                     const Weights*... weights) {
  const int64_t rows = x.size(0), n = tiles * QTILE;
  auto out = at::empty({rows, n}, x.options());
  if (rows == 0) return out;
  QuantizedRows act;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "quantized_linear", [&] {
    quantize_rows(x.const_data_ptr<scalar_t>(), x.stride(0), rows, k, act);
    const scalar_t* bp = bias.has_value() ? bias->const_data_ptr<scalar_t>() : nullptr;
    scalar_t* op = out.data_ptr<scalar_t>();
    for_tiles(tiles, rows, [&](int64_t t, int64_t r0, int group) {
      with_rows<Kernel>(group, weights..., act, k, t, r0, n, bp, op);
    });
  });
  return out;
}

// ---- int8: symmetric weights, one float scale per output channel (the lm_head).
// Layout ("q8 tiles", packed by quantized_linear.py): uint8 [N/16, K/32, 8, 64]: byte 4c + j of
// load i of block b holds input b*32 + 4i + j of channel c of the tile, plus 128 (vpdpbusd's
// unsigned operand; the sum is corrected by 128 * sum(xq), which does not depend on the channel).
constexpr int64_t Q8_BLOCK_BYTES = QTILE * QBLOCK;

template <int R>
struct Q8Tile {
  template <typename T>
  static void run(const uint8_t* w, const float* scales, const QuantizedRows& act, int64_t k, int64_t t,
                  int64_t r0, int64_t n, const T* bias, T* out) {
    const int64_t blocks = k / QBLOCK;
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* wb = w + (t * blocks + b) * Q8_BLOCK_BYTES;
      __m512i wv[8];
      for (int i = 0; i < 8; ++i) wv[i] = _mm512_loadu_si512(wb + 64 * i);
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = act.q.data() + (r0 + r) * k + b * QBLOCK;
        __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[0], broadcast4(xq));
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[1], broadcast4(xq + 4));
        for (int i = 2; i < 8; i += 2) {
          s0 = _mm512_dpbusd_epi32(s0, wv[i], broadcast4(xq + 4 * i));
          s1 = _mm512_dpbusd_epi32(s1, wv[i + 1], broadcast4(xq + 4 * i + 4));
        }
        const int64_t xb = (r0 + r) * blocks + b;
        const __m512i sum = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(128 * act.sq[xb]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(act.dx[xb]), acc[r]);
      }
    }
    const __m512 sv = _mm512_loadu_ps(scales + t * QTILE);
    for (int r = 0; r < R; ++r) {
      store_tile(out + (r0 + r) * n + t * QTILE,
                 add_bias(_mm512_mul_ps(acc[r], sv), bias == nullptr ? bias : bias + t * QTILE));
    }
  }
};

at::Tensor q8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scales,
                     const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(weight.dim() == 4 && weight.size(2) == 8 && weight.size(3) == 64 && weight.is_contiguous() &&
                  weight.scalar_type() == at::kByte,
              "q8_linear: weight must be contiguous uint8 q8 tiles [out / 16, in / 32, 8, 64], got ",
              weight.sizes(), " ", weight.scalar_type());
  const int64_t tiles = weight.size(0), n = tiles * QTILE, k = weight.size(1) * QBLOCK;
  check_activations(x, k, "q8_linear");
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == n && scales.is_contiguous() && scales.scalar_type() == at::kFloat,
              "q8_linear: scales must be a contiguous float32 [", n, "]");
  check_bias(bias, x, n, "q8_linear");
  return run_tiled<Q8Tile>(x, tiles, k, bias, weight.const_data_ptr<uint8_t>(), scales.const_data_ptr<float>());
}

// ---- int4: GGUF Q4_1's blocks, w = d * q + m per 32 inputs, q in 0..15, so a block's dot is
// d * dx * sum(q * xq) + m * dx * sum(xq).
// Layout ("q4 tiles"): uint8 [N/16, K/32, 4, 64]: byte 4c + j of load i of block b holds input
// b*32 + 4i + j of channel c of the tile in its low nibble and input b*32 + 16 + 4i + j in its
// high one (the levels are vpdpbusd's unsigned operand as they are; 3 ops unpack a load). d and
// m: float16 [N/16, K/32, 16] (Q4_1 stores them in float16).
constexpr int64_t Q4_BLOCK_BYTES = QTILE * QBLOCK / 2;

template <int R>
struct Q4Tile {
  template <typename T>
  static void run(const uint8_t* w, const at::Half* d, const at::Half* m, const QuantizedRows& act, int64_t k,
                  int64_t t, int64_t r0, int64_t n, const T* bias, T* out) {
    const int64_t blocks = k / QBLOCK;
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const uint8_t* wb = w + (t * blocks + b) * Q4_BLOCK_BYTES;
      __m512i lo[4], hi[4];
      for (int i = 0; i < 4; ++i) {
        const __m512i wv = _mm512_loadu_si512(wb + 64 * i);
        lo[i] = _mm512_and_si512(wv, nibble);
        hi[i] = _mm512_and_si512(_mm512_srli_epi16(wv, 4), nibble);
      }
      const int64_t sb = (t * blocks + b) * QTILE;
      const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + sb)));
      const __m512 mv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + sb)));
      for (int r = 0; r < R; ++r) {
        const int8_t* xq = act.q.data() + (r0 + r) * k + b * QBLOCK;
        __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], broadcast4(xq));
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0], broadcast4(xq + 16));
        for (int i = 1; i < 4; ++i) {
          s0 = _mm512_dpbusd_epi32(s0, lo[i], broadcast4(xq + 4 * i));
          s1 = _mm512_dpbusd_epi32(s1, hi[i], broadcast4(xq + 16 + 4 * i));
        }
        const int64_t xb = (r0 + r) * blocks + b;
        const __m512 sum = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
        acc[r] = _mm512_fmadd_ps(sum, _mm512_mul_ps(dv, _mm512_set1_ps(act.dx[xb])), acc[r]);
        acc[r] = _mm512_fmadd_ps(mv, _mm512_set1_ps(act.sx[xb]), acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      store_tile(out + (r0 + r) * n + t * QTILE, add_bias(acc[r], bias == nullptr ? bias : bias + t * QTILE));
    }
  }
};

at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& d, const at::Tensor& m,
                     const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(weight.dim() == 4 && weight.size(2) == 4 && weight.size(3) == 64 && weight.is_contiguous() &&
                  weight.scalar_type() == at::kByte,
              "q4_linear: weight must be contiguous uint8 q4 tiles [out / 16, in / 32, 4, 64], got ",
              weight.sizes(), " ", weight.scalar_type());
  const int64_t tiles = weight.size(0), blocks = weight.size(1), n = tiles * QTILE, k = blocks * QBLOCK;
  check_activations(x, k, "q4_linear");
  for (const at::Tensor* t : {&d, &m}) {
    TORCH_CHECK(t->dim() == 3 && t->size(0) == tiles && t->size(1) == blocks && t->size(2) == QTILE &&
                    t->is_contiguous() && t->scalar_type() == at::kHalf,
                "q4_linear: block scales and mins must be contiguous float16 [", tiles, ", ", blocks, ", 16], got ",
                t->sizes(), " ", t->scalar_type());
  }
  check_bias(bias, x, n, "q4_linear");
  return run_tiled<Q4Tile>(x, tiles, k, bias, weight.const_data_ptr<uint8_t>(), d.const_data_ptr<at::Half>(),
                           m.const_data_ptr<at::Half>());
}
#endif  // VNNI

}  // namespace

// For the Python side's cascade policy: a shared prefix pays off only over the generic loop.
bool has_register_attention(int64_t head_dim, int64_t group) { return register_kernel_applies(head_dim, group); }

bool has_vnni() {
#ifdef SGLC_HAVE_VNNI
  return true;
#else
  return false;
#endif
}

TORCH_LIBRARY(sglc_cpu, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("add_rms_norm_(Tensor(a!) h, Tensor delta, Tensor weight, float eps) -> Tensor");
  m.def("rope_(Tensor(a!) x, Tensor positions, Tensor cos, Tensor sin, int num_heads) -> ()");
  m.def("silu_mul(Tensor gate_up) -> Tensor");
  m.def("decode_attention_(Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor loc, Tensor k_new, Tensor v_new, "
        "Tensor q, Tensor index, Tensor lens, float scale, Tensor? prefix_group=None, "
        "Tensor? prefix_lens=None) -> Tensor");
  // NOTE: defined everywhere, implemented only where the CPU has AVX512-VNNI (has_vnni()).
  m.def("q8_linear(Tensor x, Tensor weight, Tensor scales, Tensor? bias) -> Tensor");
  m.def("q4_linear(Tensor x, Tensor weight, Tensor d, Tensor m, Tensor? bias) -> Tensor");
  m.def("has_vnni() -> bool", &has_vnni);
  m.def("has_register_attention(int head_dim, int group) -> bool", &has_register_attention);
}

TORCH_LIBRARY_IMPL(sglc_cpu, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm_", &add_rms_norm_);
  m.impl("rope_", &rope_);
  m.impl("silu_mul", &silu_mul);
  m.impl("decode_attention_", &decode_attention_);
#ifdef SGLC_HAVE_VNNI
  m.impl("q8_linear", &q8_linear);
  m.impl("q4_linear", &q4_linear);
#endif
}

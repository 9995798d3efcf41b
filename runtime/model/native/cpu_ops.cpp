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

// Attention of one request's `heads` query heads (rows of q, `q_stride` apart) over its keys:
// key t's row of all kv heads is k + slots[t] * row_stride (row_stride = kv_heads * d), query
// head h reads kv head h / group. Key-major: each K/V row is read once, for every head, in slot
// order, converted to float once (kv heads are shared by `group` query heads). Scratch: qf
// [heads * d], scores [heads * len], acc [heads * d], row [row_stride]. Writes out [heads * d].
template <typename T>
void attend_request(const T* __restrict__ q, int64_t q_stride, const T* __restrict__ k, const T* __restrict__ v,
                    int64_t row_stride, const int64_t* __restrict__ slots, int64_t len, int64_t heads,
                    int64_t group, int64_t d, float scale, float* __restrict__ qf, float* __restrict__ scores,
                    float* __restrict__ acc, float* __restrict__ row, T* __restrict__ out) {
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
  for (int64_t h = 0; h < heads; ++h) {
    float* sh = scores + h * len;
    float m = sh[0];
    _Pragma("omp simd reduction(max : m)")
    for (int64_t t = 1; t < len; ++t) m = std::max(m, sh[t]);
    float sum = 0.f;
    _Pragma("omp simd reduction(+ : sum)")
    for (int64_t t = 0; t < len; ++t) {
      const float e = exp_approx(sh[t] - m);
      sh[t] = e;
      sum += e;
    }
    const float inv = 1.f / sum;
    _Pragma("omp simd")
    for (int64_t t = 0; t < len; ++t) sh[t] *= inv;
  }
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
  for (int64_t h = 0; h < heads; ++h) {
    _Pragma("omp simd")
    for (int64_t i = 0; i < d; ++i) out[h * d + i] = from_float<T>(acc[h * d + i]);
  }
}

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
at::Tensor decode_attention_(at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& loc,
                             const at::Tensor& k_new, const at::Tensor& v_new, const at::Tensor& q,
                             const at::Tensor& index, const at::Tensor& lens, double scale) {
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
    // NOTE: one task = one request (all its heads read each K/V row once). Below ~256 key rows
    // in all (~20 us of work), waking the intra-op pool costs more than it saves.
    const auto run = [&](int64_t begin, int64_t end) {
      std::vector<float> qf(h * d), acc(h * d), row(kvh * d), scores;
      for (int64_t r = begin; r < end; ++r) {
        const int64_t len = lenp[r];
        scores.resize(h * len);
        attend_request(qp + r * q.stride(0), q.stride(1), kc, vc, kvh * d, idx + r * max_len, len, h, group, d,
                       static_cast<float>(scale), qf.data(), scores.data(), acc.data(), row.data(), op + r * h * d);
      }
    };
    if (b == 1 || total_keys < 256) {
      run(0, b);
    } else {
      at::parallel_for(0, b, 1, run);
    }
  });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Int8 weight-only linear for a few rows on integer dot products (AVX512-VNNI), the way llama.cpp
// runs its Q8_0 matmuls: each activation row is quantized to int8 in blocks of 32 (one float
// scale per block), and each block's 32 products are one vpdpbusd (|x| as the unsigned operand,
// the weight carrying x's sign). Per output channel, 8 blocks' int32 sums are reduced together
// into one vector, then scaled in float. Torch's int8 CPU kernel converts every weight to float
// instead: ~9 GB/s of weights against this machine's ~27 GB/s of memory bandwidth. Weights:
// [N, K] int8, one float scale per output channel.
//
// (A Q4 kernel built the same way measured no faster than torch's int4 kernel at decode sizes:
// unpacking nibbles and scaling every block costs what the integer products save.)
constexpr int64_t QBLOCK = 32;

struct QuantizedRow {  // one activation row, quantized per block
  std::vector<int8_t> q;       // [K]
  std::vector<uint8_t> abs_q;  // [K] |q| (the unsigned operand of vpdpbusd against signed weights)
  std::vector<float> scale;    // [blocks rounded up to 8], 0 past the end
};

template <typename T>
void quantize_row(const T* x, int64_t k, QuantizedRow& out) {
  const int64_t blocks = k / QBLOCK, padded = (blocks + 7) / 8 * 8;
  out.q.resize(k);
  out.abs_q.resize(k);
  out.scale.assign(padded, 0.f);
  for (int64_t b = 0; b < blocks; ++b) {
    float amax = 0.f;
    for (int64_t i = b * QBLOCK; i < (b + 1) * QBLOCK; ++i) amax = std::max(amax, std::fabs(to_float(x[i])));
    const float scale = amax / 127.f, inv = amax > 0.f ? 127.f / amax : 0.f;
    for (int64_t i = b * QBLOCK; i < (b + 1) * QBLOCK; ++i) {
      const int v = static_cast<int>(std::nearbyint(to_float(x[i]) * inv));
      out.q[i] = static_cast<int8_t>(v);
      out.abs_q[i] = static_cast<uint8_t>(v < 0 ? -v : v);
    }
    out.scale[b] = scale;
  }
}

#if defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#define SGLC_HAVE_VNNI 1

// [s(d0), s(d1), ..., s(d7)]: the full sums of eight 8-lane int32 vectors.
inline __m256i reduce8(const __m256i* d) {
  const __m256i s01 = _mm256_hadd_epi32(d[0], d[1]), s23 = _mm256_hadd_epi32(d[2], d[3]);
  const __m256i s45 = _mm256_hadd_epi32(d[4], d[5]), s67 = _mm256_hadd_epi32(d[6], d[7]);
  const __m256i a = _mm256_hadd_epi32(s01, s23), b = _mm256_hadd_epi32(s45, s67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}

// One output channel of int8 weights (per-channel scale applied by the caller).
inline float q8_dot(const int8_t* w, const QuantizedRow& x, int64_t blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b0 = 0; b0 < blocks; b0 += 8) {
    const int64_t n = std::min<int64_t>(8, blocks - b0);
    __m256i dots[8];
    for (int64_t j = 0; j < 8; ++j) {
      if (j < n) {
        const int64_t off = (b0 + j) * QBLOCK;
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + off));
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q.data() + off));
        const __m256i xa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.abs_q.data() + off));
        dots[j] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), xa, _mm256_sign_epi8(wv, xq));
      } else {
        dots[j] = _mm256_setzero_si256();
      }
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(reduce8(dots)), _mm256_loadu_ps(x.scale.data() + b0), acc);
  }
  return hsum(acc);
}

void check_activations(const at::Tensor& x, int64_t k, const char* what) {
  check_rows(x, what);
  TORCH_CHECK(x.size(1) == k, what, ": input has ", x.size(1), " features, the weight ", k);
  TORCH_CHECK(k % QBLOCK == 0, what, ": in_features must be a multiple of ", QBLOCK, ", got ", k);
}

// Spreads output channels over the intra-op pool (~64 per task), each task quantizing nothing:
// the rows are quantized once, up front.
template <typename Dot>
at::Tensor run_quantized(const at::Tensor& x, int64_t n, const std::optional<at::Tensor>& bias, const Dot& dot) {
  const int64_t m = x.size(0), k = x.size(1);
  std::vector<QuantizedRow> rows(m);
  auto out = at::empty({m, n}, x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "quantized_linear", [&] {
    for (int64_t r = 0; r < m; ++r) quantize_row(x.const_data_ptr<scalar_t>() + r * x.stride(0), k, rows[r]);
    const scalar_t* bp = bias.has_value() ? bias->const_data_ptr<scalar_t>() : nullptr;
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) {
        for (int64_t r = 0; r < m; ++r) {
          float y = dot(c, rows[r]);
          if (bp != nullptr) y += to_float(bp[c]);
          op[r * n + c] = from_float<scalar_t>(y);
        }
      }
    });
  });
  return out;
}

void check_bias(const std::optional<at::Tensor>& bias, const at::Tensor& x, int64_t n, const char* what) {
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == n && bias->is_contiguous() && bias->scalar_type() == x.scalar_type(),
                what, ": bias must be a contiguous [", n, "] tensor in the input's dtype");
  }
}

at::Tensor q8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scales,
                     const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous() && weight.scalar_type() == at::kChar,
              "q8_linear: weight must be a contiguous int8 [out, in], got ", weight.sizes());
  const int64_t n = weight.size(0), k = weight.size(1), blocks = k / QBLOCK;
  check_activations(x, k, "q8_linear");
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == n && scales.is_contiguous() && scales.scalar_type() == at::kFloat,
              "q8_linear: scales must be a contiguous float32 [", n, "]");
  check_bias(bias, x, n, "q8_linear");
  const int8_t* wp = weight.const_data_ptr<int8_t>();
  const float* sp = scales.const_data_ptr<float>();
  return run_quantized(x, n, bias, [&](int64_t c, const QuantizedRow& row) {
    return q8_dot(wp + c * k, row, blocks) * sp[c];
  });
}
#endif  // VNNI

}  // namespace

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
        "Tensor q, Tensor index, Tensor lens, float scale) -> Tensor");
  // NOTE: defined everywhere, implemented only where the CPU has AVX512-VNNI (has_vnni()).
  m.def("q8_linear(Tensor x, Tensor weight, Tensor scales, Tensor? bias) -> Tensor");
  m.def("has_vnni() -> bool", &has_vnni);
}

TORCH_LIBRARY_IMPL(sglc_cpu, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm_", &add_rms_norm_);
  m.impl("rope_", &rope_);
  m.impl("silu_mul", &silu_mul);
  m.impl("decode_attention_", &decode_attention_);
#ifdef SGLC_HAVE_VNNI
  m.impl("q8_linear", &q8_linear);
#endif
}

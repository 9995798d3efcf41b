// torch.ops.sglc_cpu: the native CPU kernels as torch operators.
//
// This file is the thin binding: it checks every argument (before anything is written), spreads
// the work over ATen's intra-op thread pool, and calls the active kernel variant for each piece
// (kernels/kernel_table.h). The variants are separate shared libraries, one per instruction set
// (generic, avx2, avx512, neon_dotprod), built by native/build.py and loaded here with
// load_kernels(path); capabilities.py picks the level with use_kernels(level). The binding itself
// is compiled for the baseline of the architecture, so it loads on any CPU.
//
// Ops: rms_norm, add_rms_norm_ (the residual add fused with the next norm), rope_, head_norm_rope_
// (per-head q/k norms and RoPE in place), silu_mul,
// gelu_tanh_mul, decode_attention_ (one decode step of attention read in place from the paged KV
// buffer, with split-K for few long requests, a cascade over shared prefixes and optional score
// soft-capping), q8_linear / q4_linear / q8b_linear / q4k_linear / q5_linear / q5k_linear /
// q6k_linear (weight-only integer linears on 16-channel tiles), half_linear (bf16 / float16
// weights as shipped on 16-channel tiles, multiplied in float32), moe_route / moe_experts (a
// sparse MoE block's routing and experts, one call each: moe_experts.h), stacked_linear (the
// parts of a fused projection in different GGUF types, one call: stacked_linear.h), gguf_tiles (a GGUF
// tensor repacked into its kernel's tiles at load: gguf_tiles.h), and the class DecodeLayer (one
// decoder layer of a decode batch in one call: decode_layer.h). c_api.h gives the same code as plain C
// functions for a process without torch's Python package. Work is spread over the pool only when
// there is enough of it to pay for waking the pool (a one-stream decode step runs inline).

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../kernels/kernel_table.h"

namespace {

// ---------------------------------------------------------------------------------------------
// Variants: loaded once each (never unloaded), one active.

std::mutex g_variants_mutex;
std::map<std::string, const sglc_kernel_table*> g_variants;
std::atomic<const sglc_kernel_table*> g_active{nullptr};

const sglc_kernel_table& kernels() {
  const sglc_kernel_table* t = g_active.load(std::memory_order_acquire);
  TORCH_CHECK(t != nullptr, "sglc_cpu: no kernel variant is active (native/build.py loads and picks one)");
  return *t;
}

std::string load_kernels(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(handle != nullptr, "sglc_cpu.load_kernels: cannot load ", path, ": ", dlerror());
  using Entry = const sglc_kernel_table* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "sglc_kernels"));
  TORCH_CHECK(entry != nullptr, "sglc_cpu.load_kernels: ", path, " has no sglc_kernels()");
  const sglc_kernel_table* table = entry();
  TORCH_CHECK(table != nullptr && table->abi == SGLC_KERNEL_ABI, "sglc_cpu.load_kernels: ", path,
              " was built for kernel ABI ", table == nullptr ? -1 : table->abi, ", this binding speaks ",
              SGLC_KERNEL_ABI);
  std::lock_guard<std::mutex> lock(g_variants_mutex);
  g_variants.emplace(table->level, table);  // NOTE: a level already loaded keeps its first library
  return table->level;
}

void use_kernels(const std::string& level) {
  std::lock_guard<std::mutex> lock(g_variants_mutex);
  const auto it = g_variants.find(level);
  TORCH_CHECK(it != g_variants.end(), "sglc_cpu.use_kernels: the ", level, " variant is not loaded");
  g_active.store(it->second, std::memory_order_release);
}

std::vector<std::string> kernel_info() {
  const sglc_kernel_table& t = kernels();
  return {t.level, t.int_linear, t.attention, t.half_linear};
}

bool has_register_attention(int64_t head_dim, int64_t group) {
  const sglc_kernel_table& t = kernels();
  return head_dim == t.register_head_dim && group >= 1 && group <= t.register_max_group;
}

// ---------------------------------------------------------------------------------------------
// Argument checks and element addressing.

constexpr int64_t kRowGrain = 32;  // rows per intra-op task; fewer rows run on the calling thread

int dtype_slot(at::ScalarType t, const char* what) {
  switch (t) {
    case at::kFloat: return SGLC_F32;
    case at::kBFloat16: return SGLC_BF16;
    case at::kHalf: return SGLC_F16;
    case at::kDouble: return SGLC_F64;
    default: TORCH_CHECK(false, what, ": expected float32, bfloat16, float16 or float64, got ", t);
  }
  return -1;
}

int int_dtype_slot(at::ScalarType t, const char* what) {
  const int slot = dtype_slot(t, what);
  TORCH_CHECK(slot < SGLC_NUM_INT_DTYPES, what, ": activations must be float32, bfloat16 or float16, got ", t);
  return slot;
}

// Element `i` of a tensor's data as a byte pointer.
template <typename P>
inline P* at_elem(P* base, int64_t i, int64_t esize) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<P*>(reinterpret_cast<Byte*>(base) + i * esize);
}

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

// ---------------------------------------------------------------------------------------------
// The small per-layer ops.

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rows(x, "rms_norm");
  check_weight(weight, x, "rms_norm");
  const int slot = dtype_slot(x.scalar_type(), "rms_norm");
  auto out = at::empty(x.sizes(), x.options());
  const int64_t rows = x.size(0), d = x.size(1), xs = x.stride(0), es = x.element_size();
  const auto fn = kernels().rms_norm[slot];
  const void* xp = x.const_data_ptr();
  void* op = out.data_ptr();
  at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
    fn(at_elem(xp, begin * xs, es), xs, weight.const_data_ptr(), at_elem(op, begin * d, es), d, end - begin, d,
       static_cast<float>(eps));
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
  const int slot = dtype_slot(h.scalar_type(), "add_rms_norm_");
  auto out = at::empty(h.sizes(), h.options());
  const int64_t rows = h.size(0), d = h.size(1), hs = h.stride(0), ds = delta.stride(0), es = h.element_size();
  const auto fn = kernels().add_rms_norm[slot];
  void* hp = h.data_ptr();
  const void* dp = delta.const_data_ptr();
  void* op = out.data_ptr();
  at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
    fn(at_elem(hp, begin * hs, es), hs, at_elem(dp, begin * ds, es), ds, weight.const_data_ptr(),
       at_elem(op, begin * d, es), d, end - begin, d, static_cast<float>(eps));
  });
  return out;
}

// Rotates the first `num_heads` heads of every row of x [T, >= num_heads * head_dim] in place,
// Hugging Face's layout. cos/sin: float32 tables [max_positions, rotary_dim]; positions: int64 [T].
// head_dim (-1: the tables' width) larger than rotary_dim is partial rotary (Phi-4-mini): each
// head's first rotary_dim features rotate, the rest are left as they are. Checked whole (every
// position too) by the constructor, before anything is written; run() rotates.
struct RopePlan {
  const at::Tensor& x;
  const at::Tensor& cos;
  const at::Tensor& sin;
  at::Tensor pos;
  int64_t rd = 0, hd = 0, num_heads = 0;
  int slot = 0;

  RopePlan(const at::Tensor& x_, const at::Tensor& positions, const at::Tensor& cos_, const at::Tensor& sin_,
           int64_t num_heads_, int64_t head_dim, const char* what)
      : x(x_), cos(cos_), sin(sin_), num_heads(num_heads_) {
    check_rows(x, what);
    TORCH_CHECK(cos.dim() == 2 && cos.sizes() == sin.sizes() && cos.is_contiguous() && sin.is_contiguous() &&
                    cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat,
                what, ": cos/sin must be contiguous float32 tables of the same shape [positions, rotary_dim]");
    rd = cos.size(1);
    const int64_t max_pos = cos.size(0);
    hd = head_dim < 0 ? rd : head_dim;
    TORCH_CHECK(rd % 2 == 0 && rd <= hd, what, ": a rotary dimension of ", rd, " does not fit heads of ", hd);
    TORCH_CHECK(num_heads >= 0 && num_heads * hd <= x.size(1), what, ": ", num_heads, " heads of ", hd,
                " do not fit rows of ", x.size(1));
    TORCH_CHECK(positions.dim() == 1 && positions.size(0) == x.size(0) && positions.scalar_type() == at::kLong,
                what, ": positions must be int64 [", x.size(0), "], got ", positions.sizes(), " ",
                positions.scalar_type());
    slot = dtype_slot(x.scalar_type(), what);
    pos = positions.contiguous();
    const int64_t* pp = pos.const_data_ptr<int64_t>();
    for (int64_t t = 0; t < x.size(0); ++t) {
      TORCH_CHECK(pp[t] >= 0 && pp[t] < max_pos, what, ": position ", pp[t], " outside the table of ", max_pos);
    }
  }

  void run() const {
    const int64_t rows = x.size(0), xs = x.stride(0), es = x.element_size();
    const auto fn = kernels().rope[slot];
    void* xp = const_cast<void*>(x.const_data_ptr());
    const int64_t* pp = pos.const_data_ptr<int64_t>();
    at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
      if (rd == hd) {
        fn(at_elem(xp, begin * xs, es), xs, pp + begin, cos.const_data_ptr<float>(), sin.const_data_ptr<float>(),
           end - begin, num_heads, hd);
        return;
      }
      for (int64_t h = 0; h < num_heads; ++h) {  // NOTE: partial: one "head" of rd features at each head's start
        fn(at_elem(xp, begin * xs + h * hd, es), xs, pp + begin, cos.const_data_ptr<float>(),
           sin.const_data_ptr<float>(), end - begin, 1, rd);
      }
    });
  }
};

void rope_(at::Tensor& x, const at::Tensor& positions, const at::Tensor& cos, const at::Tensor& sin,
           int64_t num_heads, int64_t head_dim) {
  RopePlan(x, positions, cos, sin, num_heads, head_dim, "rope_").run();
}

// Qwen3 / Gemma 3's attention inputs in one call, in place on the fused projection's rows
// x [T, >= (q_heads + kv_heads) * head_dim] (q heads, then k heads): each q head RMS-normalized
// with q_norm and each k head with k_norm ([head_dim], x's dtype; the rms_norm kernel, in place),
// then q and k rotated as rope_ does. Replaces ~10 ATen calls a layer (slices, reshapes, two
// norms into new tensors, two copies back) that cost more than the norms on a decode step.
void head_norm_rope_(at::Tensor& x, const at::Tensor& positions, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& q_norm, const at::Tensor& k_norm, int64_t q_heads, int64_t kv_heads,
                     int64_t head_dim, double eps) {
  const char* what = "head_norm_rope_";
  const RopePlan rope(x, positions, cos, sin, q_heads + kv_heads, head_dim, what);
  TORCH_CHECK(q_heads >= 0 && kv_heads >= 0, what, ": head counts must not be negative");
  for (const at::Tensor* w : {&q_norm, &k_norm}) {
    TORCH_CHECK(w->dim() == 1 && w->size(0) == rope.hd && w->is_contiguous() && w->scalar_type() == x.scalar_type(),
                what, ": q_norm and k_norm must be contiguous ", x.scalar_type(), " [", rope.hd, "], got ",
                w->sizes(), " ", w->scalar_type());
  }
  const int64_t rows = x.size(0), xs = x.stride(0), es = x.element_size(), hd = rope.hd;
  const auto norm = kernels().rms_norm[rope.slot];
  void* xp = x.data_ptr();
  at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      void* q = at_elem(xp, r * xs, es);
      void* k = at_elem(xp, r * xs + q_heads * hd, es);
      norm(q, hd, q_norm.const_data_ptr(), q, hd, q_heads, hd, static_cast<float>(eps));
      norm(k, hd, k_norm.const_data_ptr(), k, hd, kv_heads, hd, static_cast<float>(eps));
    }
  });
  rope.run();
}

// gate_up [T, 2 * I] (gate first) -> act(gate) * up [T, I], act the kernel table's `fns`.
at::Tensor gated_act(const at::Tensor& gate_up, sglc_silu_mul_fn const (&fns)[SGLC_NUM_DTYPES], const char* what) {
  check_rows(gate_up, what);
  TORCH_CHECK(gate_up.size(1) % 2 == 0, what, ": expected an even width [T, 2 * I], got ", gate_up.sizes());
  const int slot = dtype_slot(gate_up.scalar_type(), what);
  const int64_t rows = gate_up.size(0), inter = gate_up.size(1) / 2, gs = gate_up.stride(0);
  const int64_t es = gate_up.element_size();
  auto out = at::empty({rows, inter}, gate_up.options());
  const auto fn = fns[slot];
  const void* gp = gate_up.const_data_ptr();
  void* op = out.data_ptr();
  at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
    fn(at_elem(gp, begin * gs, es), gs, at_elem(op, begin * inter, es), inter, end - begin, inter);
  });
  return out;
}

// silu(gate) * up (SwiGLU).
at::Tensor silu_mul(const at::Tensor& gate_up) { return gated_act(gate_up, kernels().silu_mul, "silu_mul"); }

// gelu_tanh(gate) * up (GeGLU, GELU's tanh approximation: Gemma).
at::Tensor gelu_tanh_mul(const at::Tensor& gate_up) {
  return gated_act(gate_up, kernels().gelu_tanh_mul, "gelu_tanh_mul");
}

// ---------------------------------------------------------------------------------------------
// Decode attention.

constexpr int64_t kMinPieceKeys = 128;  // the fewest keys a split-K piece of one request's keys gets
constexpr int kLanes = 16;              // cascade: query rows per vector of scores
constexpr int kMaxChunks = 4;           // cascade: at most 64 query rows per block of sharing requests
constexpr int64_t kChunkKeys = 256;     // cascade: prefix keys per task
constexpr int64_t kValueBlock = 16;     // cascade: V rows converted at a time
constexpr int64_t kAccWidth = 64;       // cascade: accumulator columns per update

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
// (checked); those keys are attended once for the whole group (cascade). softcap > 0: scores
// become softcap * tanh(score / softcap) before the softmax (Gemma 2); 0: plain. A sliding
// window is the caller's: it passes each request only the slots inside the window.
at::Tensor decode_attention_(at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& loc,
                             const at::Tensor& k_new, const at::Tensor& v_new, const at::Tensor& q,
                             const at::Tensor& index, const at::Tensor& lens, double scale,
                             const std::optional<at::Tensor>& prefix_group,
                             const std::optional<at::Tensor>& prefix_lens, double softcap) {
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
  const int slot = dtype_slot(dtype, "decode_attention_");
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
  const sglc_kernel_table& kt = kernels();
  const auto attend = kt.attend[slot];
  const auto shared_prefix = kt.shared_prefix[slot];
  const auto merge_state = kt.merge_state;
  const auto write_normalised = kt.write_normalised[slot];
  const int64_t es = k_cache.element_size();
  const int64_t dp = (d + kAccWidth - 1) / kAccWidth * kAccWidth;
  const int64_t state_width = kMaxChunks * kLanes;
  std::vector<float> task_m(tasks * state_width), task_l(tasks * state_width), task_acc(tasks * state_width * dp);

  auto out = at::empty({b, h * d}, q.options());
  char* kc = static_cast<char*>(k_cache.data_ptr());
  char* vc = static_cast<char*>(v_cache.data_ptr());
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t g = 0; g < kvh; ++g) {
      const char* kn = static_cast<const char*>(k_new.const_data_ptr()) + (r * k_new.stride(0) + g * k_new.stride(1)) * es;
      const char* vn = static_cast<const char*>(v_new.const_data_ptr()) + (r * v_new.stride(0) + g * v_new.stride(1)) * es;
      std::memcpy(kc + (locp[r] * kvh + g) * d * es, kn, d * es);
      std::memcpy(vc + (locp[r] * kvh + g) * d * es, vn, d * es);
    }
  }
  const void* qp = q.const_data_ptr();
  void* op = out.data_ptr();
  const float fscale = static_cast<float>(scale);
  TORCH_CHECK(softcap >= 0, "decode_attention_: softcap must be >= 0 (0: none), got ", softcap);
  const float fcap = static_cast<float>(softcap);
  // NOTE: below ~256 key rows in all (~20 us of work), waking the intra-op pool costs more than
  // it saves.
  const bool pooled = total_keys >= 256;

  // 1. The shared prefixes: one task per (block, kv head, chunk of keys).
  std::vector<std::pair<int64_t, int64_t>> task_at(tasks);  // task -> (block, offset in it)
  for (int64_t bi = 0; bi < static_cast<int64_t>(blocks.size()); ++bi) {
    for (int64_t t = 0; t < kvh * blocks[bi].chunks; ++t) task_at[blocks[bi].first_task + t] = {bi, t};
  }
  // NOTE: the members' query rows in float32 once (the kernels transpose them per task).
  const at::Tensor q_float = tasks > 0 ? q.to(at::kFloat).contiguous() : at::Tensor();
  const auto run_prefix = [&](int64_t begin, int64_t end) {
    std::vector<float> qt(d * state_width), s(kChunkKeys * state_width), kv(kValueBlock * dp, 0.f);
    const float* qf = q_float.const_data_ptr<float>();
    for (int64_t task = begin; task < end; ++task) {
      const SharedBlock& blk = blocks[task_at[task].first];
      const int64_t g = task_at[task].second / blk.chunks, chunk = task_at[task].second % blk.chunks;
      const int64_t rows = static_cast<int64_t>(blk.members.size()) * group;
      const int nc = static_cast<int>((rows + kLanes - 1) / kLanes), w = nc * kLanes;
      std::fill(qt.begin(), qt.begin() + d * w, 0.f);
      for (int64_t mi = 0; mi < static_cast<int64_t>(blk.members.size()); ++mi) {
        const int64_t r = blk.members[mi];
        for (int64_t hh = 0; hh < group; ++hh) {
          const float* qr = qf + (r * h + g * group + hh) * d;
          for (int64_t j = 0; j < d; ++j) qt[j * w + mi * group + hh] = qr[j] * fscale;
        }
      }
      const int64_t first = chunk * kChunkKeys, len = std::min(kChunkKeys, blk.prefix - first);
      const int64_t* sl = idx + blk.members[0] * max_len + first;
      shared_prefix(nc, qt.data(), rows, kc, vc, kvh * d, g * d, sl, len, d, dp, fcap, s.data(), kv.data(),
                    task_m.data() + task * state_width, task_l.data() + task * state_width,
                    task_acc.data() + task * state_width * dp);
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
  const auto q_row = [&](int64_t r) { return at_elem(qp, r * q.stride(0), es); };
  const int64_t q_head_stride = q.stride(1);
  const auto finish_request = [&](int64_t r, float* m, float* l, float* acc) {
    if (block_of[r] >= 0) {
      const SharedBlock& blk = blocks[block_of[r]];
      for (int64_t hh = 0; hh < h; ++hh) {
        const int64_t g = hh / group, state_row = row_of[r] + hh % group;
        for (int64_t c = 0; c < blk.chunks; ++c) {
          const int64_t task = blk.first_task + g * blk.chunks + c;
          merge_state(m + hh, l + hh, acc + hh * d, task_m[task * state_width + state_row],
                      task_l[task * state_width + state_row], task_acc.data() + (task * state_width + state_row) * dp,
                      d);
        }
      }
    }
    for (int64_t hh = 0; hh < h; ++hh) write_normalised(acc + hh * d, l[hh], d, at_elem(op, (r * h + hh) * d, es));
  };
  const int64_t threads = at::get_num_threads();
  int64_t own_keys = 0, longest = 0;
  for (int64_t r = 0; r < b; ++r) {
    own_keys += lenp[r] - own_start[r];
    longest = std::max(longest, lenp[r] - own_start[r]);
  }
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
      std::vector<float> acc(h * d), m(h), l(h), scratch(sglc_attend_scratch(h, kvh, d, longest));
      for (int64_t r = begin; r < end; ++r) {
        const int64_t start = own_start[r], len = lenp[r] - start;
        attend(q_row(r), q_head_stride, kc, vc, kvh * d, idx + r * max_len + start, len, h, group, d, fscale,
               fcap, scratch.data(), m.data(), l.data(), acc.data());
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
      std::vector<float> scratch(sglc_attend_scratch(h, kvh, d, piece_keys));
      for (int64_t pc = begin; pc < end; ++pc) {
        const int64_t r = piece_req[pc], first = own_start[r] + (pc - piece_first[r]) * piece_keys;
        const int64_t len = std::min(piece_keys, lenp[r] - first);
        attend(q_row(r), q_head_stride, kc, vc, kvh * d, idx + r * max_len + first, len, h, group, d, fscale,
               fcap, scratch.data(), piece_m.data() + pc * h, piece_l.data() + pc * h,
               piece_acc.data() + pc * h * d);
      }
    });
    for (int64_t r = 0; r < b; ++r) {  // NOTE: a few requests' merges: not worth a pool wake-up
      const int64_t p0 = piece_first[r];
      float* m = piece_m.data() + p0 * h;
      float* l = piece_l.data() + p0 * h;
      float* acc = piece_acc.data() + p0 * h * d;
      for (int64_t pc = p0 + 1; pc < piece_first[r + 1]; ++pc) {
        for (int64_t hh = 0; hh < h; ++hh) {
          merge_state(m + hh, l + hh, acc + hh * d, piece_m[pc * h + hh], piece_l[pc * h + hh],
                      piece_acc.data() + (pc * h + hh) * d, d);
        }
      }
      finish_request(r, m, l, acc);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Weight-only integer linears (layouts in kernels/common/int_linear.h).

constexpr int64_t kQBlock = 32;   // inputs per quantization block (GGUF's)
constexpr int64_t kQTile = 16;    // output channels per tile
constexpr int64_t kRowBlock = 64;  // rows of one task (prefill) at most: their activations stay in L2

// A call's rows as blocks of at most kRowBlock, of nearly equal sizes: the pool splits the
// (block, tile) tasks into contiguous runs, so 68 rows as 64 + 4 left one thread 16x the other's
// work (a 4096 x 1024 bf16 linear: 5.6 ms at 68 rows, 2.8 at 64); as 34 + 34 they are even.
struct RowBlocks {
  int64_t count, size;
  explicit RowBlocks(int64_t rows)
      : count((rows + kRowBlock - 1) / kRowBlock), size(count == 0 ? 0 : (rows + count - 1) / count) {}
};

void check_activations(const at::Tensor& x, int64_t k, const char* what) {
  check_rows(x, what);
  TORCH_CHECK(x.size(1) == k, what, ": input has ", x.size(1), " features, the weight ", k);
  TORCH_CHECK(k % kQBlock == 0, what, ": in_features must be a multiple of ", kQBlock, ", got ", k);
}

void check_bias(const std::optional<at::Tensor>& bias, const at::Tensor& x, int64_t n, const char* what) {
  if (bias.has_value()) {
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == n && bias->is_contiguous() && bias->scalar_type() == x.scalar_type(),
                what, ": bias must be a contiguous [", n, "] tensor in the input's dtype");
  }
}

// Every activation row of one call, quantized per block (kept per thread and reused: a prefill's
// rows would otherwise be a fresh multi-megabyte allocation per linear).
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> dx, sx;
  std::vector<int32_t> sq, sq16;

  void resize(int64_t rows, int64_t k) {
    const int64_t blocks = k / kQBlock;
    q.resize(rows * k);
    dx.resize(rows * blocks);
    sx.resize(rows * blocks);
    sq.resize(rows * blocks);
    sq16.resize(rows * blocks * 2);
  }
  // The quantized rows and the rows themselves (x, xs elements apart).
  sglc_quantized_rows view(int64_t k, const void* x, int64_t xs) const {
    return {q.data(), dx.data(), sx.data(), sq.data(), sq16.data(), k, x, xs};
  }
};

// `rows` rows of k features (slot's dtype, xs elements apart) quantized into `act` (resized), in
// parallel for many rows. levels = false: only the rows themselves are handed on (a call whose
// weights are all float-weight tiles reads nothing else).
sglc_quantized_rows quantize_rows(const sglc_kernel_table& kt, int slot, const void* xp, int64_t xs, int64_t es,
                                  int64_t rows, int64_t k, QuantizedRows& act, bool levels = true) {
  if (!levels) return sglc_quantized_rows{nullptr, nullptr, nullptr, nullptr, nullptr, k, xp, xs};
  const int64_t blocks = k / kQBlock;
  act.resize(rows, k);
  const auto quantize = kt.quantize_rows[slot];
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    quantize(at_elem(xp, begin * xs, es), xs, end - begin, k, act.q.data() + begin * k, act.dx.data() + begin * blocks,
             act.sx.data() + begin * blocks, act.sq.data() + begin * blocks, act.sq16.data() + begin * blocks * 2);
  });
  return act.view(k, xp, xs);
}

// One call of a tiled integer linear on checked inputs: the rows quantized once (in parallel
// for many rows), then tile(t, r0, rows, act, bias, out) for every tile and group of at most
// rows_per_pass rows. Tasks are (block of rows, tile) pairs, rows outermost, so the threads share
// one block's activations while each tile's weights (a few KB) stay in L1 for the block's groups.
// levels = false: float-weight tiles, which read the rows themselves (and take more rows a call).
template <typename Tile>
at::Tensor run_tiled(const at::Tensor& x, int64_t tiles, int64_t k, const std::optional<at::Tensor>& bias,
                     const char* what, const Tile& tile, bool levels = true) {
  const int64_t rows = x.size(0), n = tiles * kQTile;
  const int slot = int_dtype_slot(x.scalar_type(), what);
  auto out = at::empty({rows, n}, x.options());
  if (rows == 0) return out;
  const sglc_kernel_table& kt = kernels();
  thread_local QuantizedRows caller_rows;
  QuantizedRows& act = caller_rows;  // NOTE: the caller's buffers, also inside the pool's tasks
  const sglc_quantized_rows qr =
      quantize_rows(kt, slot, x.const_data_ptr(), x.stride(0), x.element_size(), rows, k, act, levels);
  const void* bp = bias.has_value() ? bias->const_data_ptr() : nullptr;
  void* op = out.data_ptr();
  const int64_t per_pass = levels ? kt.int_rows_per_pass : kt.half_rows_per_pass;
  const RowBlocks blocks(rows);
  at::parallel_for(0, blocks.count * tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t rb = task / tiles, t = task % tiles, last = std::min(rows, (rb + 1) * blocks.size);
      for (int64_t r0 = rb * blocks.size; r0 < last; r0 += per_pass) {
        tile(slot, t, r0, static_cast<int>(std::min(per_pass, last - r0)), &qr, bp, op, n);
      }
    }
  });
  return out;
}

// int8 weights [N/16, K/32, 8, 64], one float32 scale per channel (the lm_head).
at::Tensor q8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scales,
                     const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(weight.dim() == 4 && weight.size(2) == 8 && weight.size(3) == 64 && weight.is_contiguous() &&
                  weight.scalar_type() == at::kChar,
              "q8_linear: weight must be contiguous int8 q8 tiles [out / 16, in / 32, 8, 64], got ",
              weight.sizes(), " ", weight.scalar_type());
  const int64_t tiles = weight.size(0), n = tiles * kQTile, k = weight.size(1) * kQBlock;
  check_activations(x, k, "q8_linear");
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == n && scales.is_contiguous() && scales.scalar_type() == at::kFloat,
              "q8_linear: scales must be a contiguous float32 [", n, "]");
  check_bias(bias, x, n, "q8_linear");
  const auto* kt = &kernels();
  const int8_t* wp = weight.const_data_ptr<int8_t>();
  const float* sp = scales.const_data_ptr<float>();
  return run_tiled(x, tiles, k, bias, "q8_linear",
                   [&](int slot, int64_t t, int64_t r0, int rows, const sglc_quantized_rows* act, const void* bp,
                       void* op, int64_t n_out) { kt->q8_tile[slot](wp, sp, act, t, r0, rows, n_out, bp, op); });
}

void check_level_tiles(const at::Tensor& weight, int64_t loads, const char* what, const char* tiles_name) {
  TORCH_CHECK(weight.dim() == 4 && weight.size(2) == loads && weight.size(3) == 64 && weight.is_contiguous() &&
                  weight.scalar_type() == at::kByte,
              what, ": weight must be contiguous uint8 ", tiles_name, " [out / 16, in / 32, ", loads, ", 64], got ",
              weight.sizes(), " ", weight.scalar_type());
}

// Q4_1 levels [N/16, K/32, 4, 64] (q4_linear) or Q5_1 / Q5_0 levels [N/16, K/32, 5, 64]
// (q5_linear) with float16 d and m [N/16, K/32, 16]; m absent only for Q5_0 (w = d * (q - 16)).
at::Tensor q45_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& d,
                      const std::optional<at::Tensor>& m, const std::optional<at::Tensor>& bias, int bits) {
  const char* what = bits == 4 ? "q4_linear" : "q5_linear";
  check_level_tiles(weight, bits, what, bits == 4 ? "q4 tiles" : "q5 tiles");
  const int64_t tiles = weight.size(0), blocks = weight.size(1), k = blocks * kQBlock;
  check_activations(x, k, what);
  TORCH_CHECK(bits == 5 || m.has_value(), what, ": m is required");
  for (const at::Tensor* t : {&d, m.has_value() ? &*m : &d}) {
    TORCH_CHECK(t->dim() == 3 && t->size(0) == tiles && t->size(1) == blocks && t->size(2) == kQTile &&
                    t->is_contiguous() && t->scalar_type() == at::kHalf,
                what, ": block scales and mins must be contiguous float16 [", tiles, ", ", blocks, ", 16], got ",
                t->sizes(), " ", t->scalar_type());
  }
  check_bias(bias, x, tiles * kQTile, what);
  const auto* kt = &kernels();
  const uint8_t* wp = weight.const_data_ptr<uint8_t>();
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(d.const_data_ptr<at::Half>());
  const uint16_t* mp = m.has_value() ? reinterpret_cast<const uint16_t*>(m->const_data_ptr<at::Half>()) : nullptr;
  const auto tile_fns = bits == 4 ? kt->q4_tile : kt->q5_tile;
  return run_tiled(x, tiles, k, bias, what,
                   [&](int slot, int64_t t, int64_t r0, int rows, const sglc_quantized_rows* act, const void* bp,
                       void* op, int64_t n_out) { tile_fns[slot](wp, dp, mp, act, t, r0, rows, n_out, bp, op); });
}

at::Tensor q4_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& d, const at::Tensor& m,
                     const std::optional<at::Tensor>& bias) {
  return q45_linear(x, weight, d, m, bias, 4);
}

at::Tensor q5_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& d,
                     const std::optional<at::Tensor>& m, const std::optional<at::Tensor>& bias) {
  return q45_linear(x, weight, d, m, bias, 5);
}

void check_block_table(const at::Tensor& t, int64_t tiles, int64_t blocks, at::ScalarType dtype, const char* what,
                       const char* name) {
  TORCH_CHECK(t.dim() == 3 && t.size(0) == tiles && t.size(1) == blocks && t.size(2) == kQTile && t.is_contiguous() &&
                  t.scalar_type() == dtype,
              what, ": ", name, " must be a contiguous ", dtype, " [", tiles, ", ", blocks, ", 16], got ", t.sizes(),
              " ", t.scalar_type());
}

// GGUF Q8_0: int8 q8 tiles [N/16, K/32, 8, 64] with one float16 scale per block and channel.
at::Tensor q8b_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& d,
                      const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(weight.dim() == 4 && weight.size(2) == 8 && weight.size(3) == 64 && weight.is_contiguous() &&
                  weight.scalar_type() == at::kChar,
              "q8b_linear: weight must be contiguous int8 q8 tiles [out / 16, in / 32, 8, 64], got ", weight.sizes(),
              " ", weight.scalar_type());
  const int64_t tiles = weight.size(0), blocks = weight.size(1), k = blocks * kQBlock;
  check_activations(x, k, "q8b_linear");
  check_block_table(d, tiles, blocks, at::kHalf, "q8b_linear", "d");
  check_bias(bias, x, tiles * kQTile, "q8b_linear");
  const auto* kt = &kernels();
  const int8_t* wp = weight.const_data_ptr<int8_t>();
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(d.const_data_ptr<at::Half>());
  return run_tiled(x, tiles, k, bias, "q8b_linear",
                   [&](int slot, int64_t t, int64_t r0, int rows, const sglc_quantized_rows* act, const void* bp,
                       void* op, int64_t n_out) { kt->q8b_tile[slot](wp, dp, act, t, r0, rows, n_out, bp, op); });
}

// GGUF Q4_K: q4 tiles [N/16, K/32, 4, 64] (q4k_linear), Q5_K: q5 tiles [N/16, K/32, 5, 64]
// (q5k_linear); float16 d and dmin [N/16, K/256, 16]; 6-bit scales and mins as uint8 sc and mn
// [N/16, K/32, 16].
at::Tensor qk_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& d, const at::Tensor& dmin,
                     const at::Tensor& sc, const at::Tensor& mn, const std::optional<at::Tensor>& bias, int bits) {
  const char* what = bits == 4 ? "q4k_linear" : "q5k_linear";
  check_level_tiles(weight, bits, what, bits == 4 ? "q4 tiles" : "q5 tiles");
  const int64_t tiles = weight.size(0), blocks = weight.size(1), k = blocks * kQBlock;
  TORCH_CHECK(blocks % 8 == 0, what, ": in_features must be a multiple of 256 (K-quant super-blocks), got ", k);
  check_activations(x, k, what);
  check_block_table(d, tiles, blocks / 8, at::kHalf, what, "d");
  check_block_table(dmin, tiles, blocks / 8, at::kHalf, what, "dmin");
  check_block_table(sc, tiles, blocks, at::kByte, what, "sc");
  check_block_table(mn, tiles, blocks, at::kByte, what, "mn");
  check_bias(bias, x, tiles * kQTile, what);
  const auto* kt = &kernels();
  const uint8_t* wp = weight.const_data_ptr<uint8_t>();
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(d.const_data_ptr<at::Half>());
  const uint16_t* dminp = reinterpret_cast<const uint16_t*>(dmin.const_data_ptr<at::Half>());
  const uint8_t* scp = sc.const_data_ptr<uint8_t>();
  const uint8_t* mnp = mn.const_data_ptr<uint8_t>();
  const auto tile_fns = bits == 4 ? kt->q4k_tile : kt->q5k_tile;
  return run_tiled(x, tiles, k, bias, what,
                   [&](int slot, int64_t t, int64_t r0, int rows, const sglc_quantized_rows* act, const void* bp,
                       void* op, int64_t n_out) {
                     tile_fns[slot](wp, dp, dminp, scp, mnp, act, t, r0, rows, n_out, bp, op);
                   });
}

at::Tensor q4k_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& d, const at::Tensor& dmin,
                      const at::Tensor& sc, const at::Tensor& mn, const std::optional<at::Tensor>& bias) {
  return qk_linear(x, weight, d, dmin, sc, mn, bias, 4);
}

at::Tensor q5k_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& d, const at::Tensor& dmin,
                      const at::Tensor& sc, const at::Tensor& mn, const std::optional<at::Tensor>& bias) {
  return qk_linear(x, weight, d, dmin, sc, mn, bias, 5);
}

// GGUF Q6_K: levels 0..63 as q6k tiles [N/16, K/32, 6, 64] (4 + 2 bit planes); float16 d
// [N/16, K/256, 16]; int8 scales per 16 inputs [N/16, K/16, 16].
at::Tensor q6k_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& d, const at::Tensor& sc,
                      const std::optional<at::Tensor>& bias) {
  check_level_tiles(weight, 6, "q6k_linear", "q6k tiles");
  const int64_t tiles = weight.size(0), blocks = weight.size(1), k = blocks * kQBlock;
  TORCH_CHECK(blocks % 8 == 0, "q6k_linear: in_features must be a multiple of 256 (K-quant super-blocks), got ", k);
  check_activations(x, k, "q6k_linear");
  check_block_table(d, tiles, blocks / 8, at::kHalf, "q6k_linear", "d");
  check_block_table(sc, tiles, blocks * 2, at::kChar, "q6k_linear", "sc");
  check_bias(bias, x, tiles * kQTile, "q6k_linear");
  const auto* kt = &kernels();
  const uint8_t* wp = weight.const_data_ptr<uint8_t>();
  const uint16_t* dp = reinterpret_cast<const uint16_t*>(d.const_data_ptr<at::Half>());
  const int8_t* scp = sc.const_data_ptr<int8_t>();
  return run_tiled(x, tiles, k, bias, "q6k_linear",
                   [&](int slot, int64_t t, int64_t r0, int rows, const sglc_quantized_rows* act, const void* bp,
                       void* op, int64_t n_out) { kt->q6k_tile[slot](wp, dp, scp, act, t, r0, rows, n_out, bp, op); });
}

// bf16 / float16 weights as shipped: half tiles [N/16, K, 16] of the weight's dtype
// (kernels/common/half_linear.h), multiplied in float32 with the rows as they are.
void check_half_tiles(const at::Tensor& weight, const char* what) {
  TORCH_CHECK(weight.dim() == 3 && weight.size(2) == kQTile && weight.is_contiguous() &&
                  (weight.scalar_type() == at::kBFloat16 || weight.scalar_type() == at::kHalf),
              what, ": weight must be contiguous bfloat16 or float16 half tiles [out / 16, in, 16], got ",
              weight.sizes(), " ", weight.scalar_type());
}

at::Tensor half_linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  check_half_tiles(weight, "half_linear");
  const int64_t tiles = weight.size(0), k = weight.size(1);
  check_activations(x, k, "half_linear");
  check_bias(bias, x, tiles * kQTile, "half_linear");
  const auto* kt = &kernels();
  const auto* wp = static_cast<const uint16_t*>(weight.const_data_ptr());
  const auto tile_fns = weight.scalar_type() == at::kBFloat16 ? kt->bf16w_tile : kt->f16w_tile;
  return run_tiled(
      x, tiles, k, bias, "half_linear",
      [&](int slot, int64_t t, int64_t r0, int rows, const sglc_quantized_rows* act, const void* bp, void* op,
          int64_t n_out) { tile_fns[slot](wp, act, t, r0, rows, n_out, bp, op); },
      /*levels=*/false);
}

#include "tiled_weight.h"
#include "moe_experts.h"
#include "stacked_linear.h"
#include "weight_arena.h"
#include "gguf_tiles.h"
#include "decode_layer.h"

}  // namespace

#include "c_api.h"

TORCH_LIBRARY(sglc_cpu, m) {
  m.def("load_kernels(str path) -> str", &load_kernels);
  m.def("use_kernels(str level) -> ()", &use_kernels);
  m.def("kernel_info() -> str[]", &kernel_info);
  m.def("has_register_attention(int head_dim, int group) -> bool", &has_register_attention);
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("add_rms_norm_(Tensor(a!) h, Tensor delta, Tensor weight, float eps) -> Tensor");
  m.def("rope_(Tensor(a!) x, Tensor positions, Tensor cos, Tensor sin, int num_heads, int head_dim=-1) -> ()");
  m.def("head_norm_rope_(Tensor(a!) x, Tensor positions, Tensor cos, Tensor sin, Tensor q_norm, Tensor k_norm, "
        "int q_heads, int kv_heads, int head_dim, float eps) -> ()");
  m.def("silu_mul(Tensor gate_up) -> Tensor");
  m.def("gelu_tanh_mul(Tensor gate_up) -> Tensor");
  m.def("decode_attention_(Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor loc, Tensor k_new, Tensor v_new, "
        "Tensor q, Tensor index, Tensor lens, float scale, Tensor? prefix_group=None, "
        "Tensor? prefix_lens=None, float softcap=0.0) -> Tensor");
  m.def("q8_linear(Tensor x, Tensor weight, Tensor scales, Tensor? bias) -> Tensor");
  m.def("q4_linear(Tensor x, Tensor weight, Tensor d, Tensor m, Tensor? bias) -> Tensor");
  m.def("q8b_linear(Tensor x, Tensor weight, Tensor d, Tensor? bias) -> Tensor");
  m.def("q4k_linear(Tensor x, Tensor weight, Tensor d, Tensor dmin, Tensor sc, Tensor mn, Tensor? bias) -> Tensor");
  m.def("q6k_linear(Tensor x, Tensor weight, Tensor d, Tensor sc, Tensor? bias) -> Tensor");
  m.def("q5_linear(Tensor x, Tensor weight, Tensor d, Tensor? m, Tensor? bias) -> Tensor");
  m.def("q5k_linear(Tensor x, Tensor weight, Tensor d, Tensor dmin, Tensor sc, Tensor mn, Tensor? bias) -> Tensor");
  m.def("half_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("moe_route(Tensor logits, int top_k, bool renormalize, bool float_weights, Tensor? router=None) -> "
        "(Tensor, Tensor)");
  m.def("moe_experts(Tensor x, Tensor ids, Tensor weights, str[] gate_up_kinds, Tensor[] gate_up, str[] down_kinds, "
        "Tensor[] down, str act) -> Tensor");
  m.def("gguf_tiles(Tensor raw, str type, int rows, int cols) -> Tensor[]");
  m.def("stacked_linear(Tensor x, str[] kinds, Tensor[] weights) -> Tensor");
  m.class_<DecodeLayer>("DecodeLayer")
      .def(torch::init<>())
      .def("set_projection", &DecodeLayer::set_projection)
      .def("set_attention", &DecodeLayer::set_attention)
      .def("set_mlp", &DecodeLayer::set_mlp)
      .def("set_experts", &DecodeLayer::set_experts)
      .def("forward", &DecodeLayer::forward);
}

TORCH_LIBRARY_IMPL(sglc_cpu, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("add_rms_norm_", &add_rms_norm_);
  m.impl("rope_", &rope_);
  m.impl("head_norm_rope_", &head_norm_rope_);
  m.impl("silu_mul", &silu_mul);
  m.impl("gelu_tanh_mul", &gelu_tanh_mul);
  m.impl("decode_attention_", &decode_attention_);
  m.impl("q8_linear", &q8_linear);
  m.impl("q4_linear", &q4_linear);
  m.impl("q8b_linear", &q8b_linear);
  m.impl("q4k_linear", &q4k_linear);
  m.impl("q6k_linear", &q6k_linear);
  m.impl("q5_linear", &q5_linear);
  m.impl("q5k_linear", &q5k_linear);
  m.impl("half_linear", &half_linear);
  m.impl("moe_experts", &moe_experts);
  m.impl("moe_route", &moe_route);
  m.impl("gguf_tiles", &gguf_tiles);
  m.impl("stacked_linear", &stacked_linear);
}

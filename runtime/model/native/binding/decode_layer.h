// DecodeLayer: one decoder layer of a decode batch in one call from Python. Part of the binding's
// translation unit (included by cpu_ops.cpp after the ops it runs: the norms, rope_ /
// head_norm_rope_, decode_attention_, stacked_linear.h, moe_experts.h).
//
// A one-stream decode step runs ~10 operators a layer, each a few microseconds of Python and
// dispatcher before its kernel starts (a Qwen3-MoE step: ~2 of ~14 ms on a 2-core CPU). Built
// once per layer at load (models/decode_layers.py), with the layer's tiled GGUF weights parsed
// once, forward() runs the same ops in the same order on the same inputs as the decoder's Python
// loop (models/decoder.py), so its outputs are that loop's bit for bit (tested): the qkv
// projection, the per-head q/k norms and RoPE (or RoPE alone), the attention kernel writing K/V
// and attending from the paged buffer, the output projection, the optional sandwich norm, the
// residual add fused with the MLP norm, the MLP (dense gate_up -> activation -> down, or the
// routed experts), the optional post-MLP norm and the residual add fused with the next layer's norm.

#pragma once

// A projection as tiled parts (one part: a single GGUF linear) and an optional bias in the
// activations' dtype, added after the product as models/gguf_linear.py does.
struct TiledProjection {
  std::vector<at::Tensor> tensors;  // NOTE: owns what `parts` points into
  std::vector<TiledWeight> parts;
  std::optional<at::Tensor> bias;

  void set(const std::vector<std::string>& kinds, const std::vector<at::Tensor>& t, const std::optional<at::Tensor>& b,
           const char* what) {
    tensors = t;
    parts = parse_stacked(kinds, tensors, what);
    bias = b;
  }
  bool empty() const { return parts.empty(); }
  at::Tensor operator()(const at::Tensor& x, const char* what) const {
    at::Tensor y = run_stacked(x, parts, what);
    if (bias.has_value()) y.add_(*bias);
    return y;
  }
};

struct DecodeLayer : torch::CustomClassHolder {
  TiledProjection qkv, o, gate_up, down;
  // attention
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  std::optional<at::Tensor> q_norm, k_norm, attn_post_norm;
  double scale = 1.0, softcap = 0.0;
  // MLP
  at::Tensor mlp_norm;
  std::optional<at::Tensor> post_mlp_norm;
  bool gelu = false;
  double eps = 1e-6;
  // experts (top_k > 0)
  std::vector<at::Tensor> expert_tensors;  // NOTE: owns what `experts` points into
  Experts experts;
  std::optional<at::Tensor> router;
  int64_t top_k = 0;
  bool renormalize = false, float_weights = false;

  void set_projection(const std::string& which, const std::vector<std::string>& kinds,
                      const std::vector<at::Tensor>& tensors, const std::optional<at::Tensor>& bias) {
    TiledProjection* p = which == "qkv" ? &qkv : which == "o" ? &o : which == "gate_up" ? &gate_up
                         : which == "down" ? &down : nullptr;
    TORCH_CHECK(p != nullptr, "DecodeLayer: unknown projection '", which, "' (qkv, o, gate_up, down)");
    p->set(kinds, tensors, bias, "DecodeLayer");
  }

  void set_attention(int64_t q_heads_, int64_t kv_heads_, int64_t head_dim_, const std::optional<at::Tensor>& q_norm_,
                     const std::optional<at::Tensor>& k_norm_, const std::optional<at::Tensor>& post_norm,
                     double scale_, double softcap_) {
    TORCH_CHECK(q_heads_ > 0 && kv_heads_ > 0 && head_dim_ > 0, "DecodeLayer: head counts and size must be positive");
    TORCH_CHECK(q_norm_.has_value() == k_norm_.has_value(), "DecodeLayer: q_norm and k_norm come together");
    q_heads = q_heads_, kv_heads = kv_heads_, head_dim = head_dim_;
    q_norm = q_norm_, k_norm = k_norm_, attn_post_norm = post_norm;
    scale = scale_, softcap = softcap_;
  }

  void set_mlp(const at::Tensor& norm, const std::optional<at::Tensor>& post_norm, const std::string& act,
               double eps_) {
    TORCH_CHECK(act == "silu" || act == "gelu_tanh", "DecodeLayer: act must be 'silu' or 'gelu_tanh', got '", act, "'");
    mlp_norm = norm, post_mlp_norm = post_norm, gelu = act == "gelu_tanh", eps = eps_;
  }

  void set_experts(const std::vector<std::string>& gate_up_kinds, const std::vector<at::Tensor>& gate_up_tensors,
                   const std::vector<std::string>& down_kinds, const std::vector<at::Tensor>& down_tensors,
                   const std::string& act, const at::Tensor& router_, int64_t top_k_, bool renormalize_,
                   bool float_weights_) {
    const int64_t n = static_cast<int64_t>(gate_up_kinds.size());
    TORCH_CHECK(top_k_ >= 1 && top_k_ <= n, "DecodeLayer: top_k must be in [1, ", n, "], got ", top_k_);
    expert_tensors = gate_up_tensors;
    expert_tensors.insert(expert_tensors.end(), down_tensors.begin(), down_tensors.end());
    const at::TensorList all(expert_tensors);
    const int64_t split = static_cast<int64_t>(gate_up_tensors.size());
    experts = parse_experts(gate_up_kinds, all.slice(0, split), down_kinds, all.slice(split), act, "DecodeLayer");
    router = router_, top_k = top_k_, renormalize = renormalize_, float_weights = float_weights_;
  }

  // One layer for the decode rows x [T, H] (the residual h's input norm): writes this step's K/V
  // at loc, adds the layer into h IN PLACE and returns the next layer's input (next_norm of h),
  // or h itself after the last layer (no next_norm).
  at::Tensor forward(at::Tensor h, const at::Tensor& x, const at::Tensor& positions, const at::Tensor& cos,
                     const at::Tensor& sin, at::Tensor k_cache, at::Tensor v_cache, const at::Tensor& loc,
                     const at::Tensor& index, const at::Tensor& lens, const std::optional<at::Tensor>& prefix_group,
                     const std::optional<at::Tensor>& prefix_lens, const std::optional<at::Tensor>& next_norm) {
    const char* what = "DecodeLayer";
    TORCH_CHECK(!qkv.empty() && !o.empty() && mlp_norm.defined() && (top_k > 0 || (!gate_up.empty() && !down.empty())),
                what, ": set its projections, attention and MLP before forward");
    const int64_t t = x.size(0), q_size = q_heads * head_dim, kv_size = kv_heads * head_dim;
    at::Tensor proj = qkv(x, what);
    if (q_norm.has_value()) {
      head_norm_rope_(proj, positions, cos, sin, *q_norm, *k_norm, q_heads, kv_heads, head_dim, eps);
    } else {
      rope_(proj, positions, cos, sin, q_heads + kv_heads, cos.size(1) != head_dim ? head_dim : -1);
    }
    const at::Tensor qk = proj.narrow(1, 0, q_size + kv_size).view({t, q_heads + kv_heads, head_dim});
    const at::Tensor v = proj.narrow(1, q_size + kv_size, kv_size).view({t, kv_heads, head_dim});
    at::Tensor a = o(decode_attention_(k_cache, v_cache, loc, qk.narrow(1, q_heads, kv_heads), v,
                                       qk.narrow(1, 0, q_heads), index, lens, scale, prefix_group, prefix_lens,
                                       softcap),
                     what);
    if (attn_post_norm.has_value()) a = rms_norm(a, *attn_post_norm, eps);
    const at::Tensor m = add_rms_norm_(h, a, mlp_norm, eps);
    at::Tensor y;
    if (top_k > 0) {
      const auto [weights, ids] = moe_route(m, top_k, renormalize, float_weights, router);
      y = run_experts(m, ids, weights, experts, what);
    } else {
      const at::Tensor g = gate_up(m, what);
      y = down(gelu ? gelu_tanh_mul(g) : silu_mul(g), what);
    }
    if (post_mlp_norm.has_value()) y = rms_norm(y, *post_mlp_norm, eps);
    if (next_norm.has_value()) return add_rms_norm_(h, y, *next_norm, eps);
    h.add_(y);
    return h;
  }
};

// moe_route and moe_experts: a sparse mixture-of-experts block's routing and its experts, one
// operator call each. Part of
// the binding's translation unit (included by cpu_ops.cpp after the integer linears, whose checks
// and quantize_rows it uses, and tiled_weight.h).
//
// What it replaces is models/moe.py's grouped path, which for T tokens and k experts each ran
// ~5 torch operators per expert that got tokens plus a sort, gathers and a scatter: on a 2-core CPU
// those cost as much as the experts' own weight streaming at one or eight decode streams (a
// Qwen3-MoE step: ~2.6 of ~17 ms at one stream, ~8 of ~42 ms at eight). Here the tokens' rows are
// quantized once (every expert's gate_up reads the same rows), the (token, expert) pairs are put
// in expert order, and each stage (all experts' gate_up tiles, the gated activation, all down
// tiles) is one pass over the thread pool. The sums are the Python path's exactly: the same tile
// kernels on the same quantized rows, the same activation kernel, and each token's contributions
// rounded and added in ascending expert order as `(y * w).to(dtype)` and index_add_ do.

#pragma once

// Every (expert, tile, group of rows) of one projection as pool tasks: expert e's rows are the
// pairs [start[e], start[e + 1]) of the pair-ordered activations; outputs go to the same rows of
// out (n wide).
void run_projection(const sglc_kernel_table& kt, int slot, const std::vector<TiledWeight>& weights,
                 const std::vector<int64_t>& start, const sglc_quantized_rows* act, int64_t n, void* out) {
  struct Task {
    int64_t expert, tile, r0;
    int rows;
  };
  std::vector<Task> tasks;
  for (size_t e = 0; e < weights.size(); ++e) {
    const int64_t per_pass = weights[e].rows_per_pass(kt);
    for (int64_t t = 0; t < weights[e].tiles && start[e + 1] > start[e]; ++t) {
      for (int64_t r0 = start[e]; r0 < start[e + 1]; r0 += per_pass) {
        tasks.push_back({static_cast<int64_t>(e), t, r0, static_cast<int>(std::min(per_pass, start[e + 1] - r0))});
      }
    }
  }
  at::parallel_for(0, static_cast<int64_t>(tasks.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Task& task = tasks[i];
      weights[task.expert].run(kt, slot, act, task.tile, task.r0, task.rows, n, out);
    }
  });
}

// out[t] += round(y * w) over the pairs in expert order, rounding as x's dtype T does: the product
// in float32 (y and w widened; w of dtype T or float32), rounded to T, added in float32 and
// rounded again, as `(y * w).to(T)` and index_add_ do. No fused multiply-add: torch rounds the
// product on its own.
template <typename T, typename W>
__attribute__((optimize("fp-contract=off"))) void add_weighted(const T* y, const W* w, const int64_t* pair_token,
                                                               const int64_t* pair_slot, int64_t pairs, int64_t h,
                                                               T* out) {
  for (int64_t p = 0; p < pairs; ++p) {
    const T* yp = y + p * h;
    T* op = out + pair_token[p] * h;
    const float wf = static_cast<float>(w[pair_slot[p]]);
    for (int64_t i = 0; i < h; ++i) {
      const T product = static_cast<T>(static_cast<float>(yp[i]) * wf);
      op[i] = static_cast<T>(static_cast<float>(op[i]) + static_cast<float>(product));
    }
  }
}

// A block's experts, parsed and checked: every gate_up [2 I, H] and down [H, I] alike.
struct Experts {
  std::vector<TiledWeight> gate_up, down;
  bool gelu = false;  // the gated activation: gelu_tanh, else silu
};

Experts parse_experts(const std::vector<std::string>& gate_up_kinds, at::TensorList gate_up,
                      const std::vector<std::string>& down_kinds, at::TensorList down, const std::string& act,
                      const char* what) {
  const int64_t num_experts = static_cast<int64_t>(gate_up_kinds.size());
  TORCH_CHECK(static_cast<int64_t>(down_kinds.size()) == num_experts && num_experts > 0, what,
              ": one gate_up and one down kind per expert");
  TORCH_CHECK(act == "silu" || act == "gelu_tanh", what, ": act must be 'silu' or 'gelu_tanh', got '", act, "'");
  Experts ex;
  ex.gelu = act == "gelu_tanh";
  ex.gate_up.resize(num_experts);
  ex.down.resize(num_experts);
  std::vector<TiledWeight>&gu = ex.gate_up, &dn = ex.down;
  int64_t at_gu = 0, at_dn = 0;
  for (int64_t e = 0; e < num_experts; ++e) {
    at_gu += parse_tiled_weight(gate_up_kinds[e], gate_up, at_gu, gu[e], what);
    at_dn += parse_tiled_weight(down_kinds[e], down, at_dn, dn[e], what);
    const int64_t h = gu[0].k;
    TORCH_CHECK(gu[e].k == h && gu[e].tiles == gu[0].tiles && dn[e].tiles * kQTile == h && dn[e].k == dn[0].k, what,
                ": expert ", e, " has gate_up [", gu[e].tiles * kQTile, ", ", gu[e].k, "] and down [",
                dn[e].tiles * kQTile, ", ", dn[e].k, "]; expected [2 I, ", h, "] and [", h, ", I] like expert 0");
  }
  TORCH_CHECK(at_gu == static_cast<int64_t>(gate_up.size()) && at_dn == static_cast<int64_t>(down.size()), what,
              ": more tensors than the kinds take");
  TORCH_CHECK(gu[0].tiles * kQTile == 2 * dn[0].k, what, ": gate_up has ", gu[0].tiles * kQTile,
              " outputs, expected 2 x ", dn[0].k);
  return ex;
}

// The experts of parsed weights (see moe_experts).
at::Tensor run_experts(const at::Tensor& x, const at::Tensor& ids, const at::Tensor& weights, const Experts& ex,
                       const char* what) {
  check_rows(x, what);
  TORCH_CHECK(x.is_contiguous(), what, ": x must be contiguous");
  const int64_t t_rows = x.size(0), h = x.size(1), num_experts = static_cast<int64_t>(ex.gate_up.size());
  TORCH_CHECK(ids.dim() == 2 && ids.size(0) == t_rows && ids.scalar_type() == at::kLong && ids.is_contiguous(), what,
              ": ids must be a contiguous int64 [", t_rows, ", k], got ", ids.sizes(), " ", ids.scalar_type());
  const int64_t top_k = ids.size(1);
  TORCH_CHECK(weights.sizes() == ids.sizes() && weights.is_contiguous() &&
                  (weights.scalar_type() == x.scalar_type() || weights.scalar_type() == at::kFloat),
              what, ": weights must be contiguous [", t_rows, ", ", top_k, "] of x's dtype or float32");
  TORCH_CHECK(ex.gate_up[0].k == h, what, ": x has ", h, " features, the experts take ", ex.gate_up[0].k);
  const int slot = int_dtype_slot(x.scalar_type(), what);
  const std::vector<TiledWeight>&gu = ex.gate_up, &dn = ex.down;
  const int64_t inter = dn[0].k, gu_width = gu[0].tiles * kQTile;
  const int64_t* idp = ids.const_data_ptr<int64_t>();
  for (int64_t i = 0; i < t_rows * top_k; ++i) {
    TORCH_CHECK(idp[i] >= 0 && idp[i] < num_experts, what, ": expert id ", idp[i], " outside [0, ", num_experts, ")");
  }

  // (token, expert) pairs in expert order, tokens in order within an expert (a stable counting sort)
  const int64_t pairs = t_rows * top_k;
  std::vector<int64_t> start(num_experts + 1, 0), pair_token(pairs), pair_slot(pairs);
  for (int64_t i = 0; i < pairs; ++i) ++start[idp[i] + 1];
  for (int64_t e = 0; e < num_experts; ++e) start[e + 1] += start[e];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < pairs; ++i) {
    const int64_t p = fill[idp[i]]++;
    pair_token[p] = i / top_k;
    pair_slot[p] = i;
  }

  const sglc_kernel_table& kt = kernels();
  const int64_t es = x.element_size();
  thread_local QuantizedRows token_rows, pair_rows;
  const int64_t blocks = h / kQBlock;
  if (any_reads_levels(gu)) {
    // every token's row once, then copied into pair order (each expert's rows contiguous)
    quantize_rows(kt, slot, x.const_data_ptr(), h, es, t_rows, h, token_rows);
    pair_rows.resize(pairs, h);
    for (int64_t p = 0; p < pairs; ++p) {
      const int64_t r = pair_token[p];
      std::memcpy(pair_rows.q.data() + p * h, token_rows.q.data() + r * h, h);
      std::memcpy(pair_rows.dx.data() + p * blocks, token_rows.dx.data() + r * blocks, blocks * sizeof(float));
      std::memcpy(pair_rows.sx.data() + p * blocks, token_rows.sx.data() + r * blocks, blocks * sizeof(float));
      std::memcpy(pair_rows.sq.data() + p * blocks, token_rows.sq.data() + r * blocks, blocks * sizeof(int32_t));
      std::memcpy(pair_rows.sq16.data() + p * blocks * 2, token_rows.sq16.data() + r * blocks * 2,
                  blocks * 2 * sizeof(int32_t));
    }
  }
  // the rows themselves in pair order, for float-weight experts
  const bool reads_rows = any_reads_rows(gu);
  at::Tensor pair_x;
  if (reads_rows) {
    pair_x = at::empty({pairs, h}, x.options());
    for (int64_t p = 0; p < pairs; ++p) {
      std::memcpy(at_elem(pair_x.data_ptr(), p * h, es), at_elem(x.const_data_ptr(), pair_token[p] * h, es), h * es);
    }
  }
  const sglc_quantized_rows pair_act = pair_rows.view(h, reads_rows ? pair_x.const_data_ptr() : nullptr, h);

  auto gate_up_out = at::empty({pairs, gu_width}, x.options());
  run_projection(kt, slot, gu, start, &pair_act, gu_width, gate_up_out.data_ptr());
  auto hidden = at::empty({pairs, inter}, x.options());
  const auto act_fn = (ex.gelu ? kt.gelu_tanh_mul : kt.silu_mul)[slot];
  at::parallel_for(0, pairs, kRowGrain, [&](int64_t begin, int64_t end) {
    act_fn(at_elem(gate_up_out.const_data_ptr(), begin * gu_width, es), gu_width,
           at_elem(hidden.data_ptr(), begin * inter, es), inter, end - begin, inter);
  });
  thread_local QuantizedRows hidden_rows;
  const sglc_quantized_rows hidden_act = quantize_rows(kt, slot, hidden.const_data_ptr(), inter, es, pairs, inter,
                                                       hidden_rows, any_reads_levels(dn));
  auto y = at::empty({pairs, h}, x.options());
  run_projection(kt, slot, dn, start, &hidden_act, h, y.data_ptr());

  auto out = at::zeros_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "moe_experts", [&] {
    const auto* yp = y.const_data_ptr<scalar_t>();
    auto* op = out.data_ptr<scalar_t>();
    if (weights.scalar_type() == at::kFloat) {
      add_weighted(yp, weights.const_data_ptr<float>(), pair_token.data(), pair_slot.data(), pairs, h, op);
    } else {
      add_weighted(yp, weights.const_data_ptr<scalar_t>(), pair_token.data(), pair_slot.data(), pairs, h, op);
    }
  });
  return out;
}

at::Tensor moe_experts(const at::Tensor& x, const at::Tensor& ids, const at::Tensor& weights,
                       const std::vector<std::string>& gate_up_kinds, at::TensorList gate_up,
                       const std::vector<std::string>& down_kinds, at::TensorList down, const std::string& act) {
  return run_experts(x, ids, weights, parse_experts(gate_up_kinds, gate_up, down_kinds, down, act, "moe_experts"),
                     "moe_experts");
}

// A router logit: float32 products in 8 partial sums (lane j takes inputs j mod 8), added pairwise.
// Built for AVX2 too where the CPU has it (the binding's baseline is SSE2: a one-token Qwen3-MoE
// router took ~16 us a layer there); no fused multiply-add, so every clone gives the same bits.
#if defined(__x86_64__) && defined(__GNUC__)
#define SGLC_ROUTER_CLONES __attribute__((target_clones("avx2", "default"), optimize("fp-contract=off")))
#else
#define SGLC_ROUTER_CLONES __attribute__((optimize("fp-contract=off")))
#endif
SGLC_ROUTER_CLONES float router_dot(const float* x, const float* w, int64_t n) {
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t h = 0;
  for (; h + 8 <= n; h += 8)
    for (int j = 0; j < 8; ++j) acc[j] += x[h + j] * w[h + j];
  for (; h < n; ++h) acc[h % 8] += x[h] * w[h];
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

// The router's logits of hidden rows x [T, H] (any float dtype) with a float32 weight [E, H]:
// float32 [T, E], each rounded through x's dtype as the float32 linear + cast of
// models/quantized_linear.py's CastLinear does. Few rows only (decode): a GEMM library wins from a
// few dozen rows on, and models/moe.py passes the router's own logits from there.
at::Tensor router_logits(const at::Tensor& x, const at::Tensor& router, const char* what) {
  check_rows(x, what);
  TORCH_CHECK(router.dim() == 2 && router.size(1) == x.size(1) && router.is_contiguous() &&
                  router.scalar_type() == at::kFloat,
              what, ": router must be a contiguous float32 [experts, ", x.size(1), "], got ", router.sizes(), " ",
              router.scalar_type());
  const int64_t rows = x.size(0), experts = router.size(0), hidden = x.size(1);
  at::Tensor logits = at::empty({rows, experts}, x.options().dtype(at::kFloat));
  const float* wp = router.const_data_ptr<float>();
  float* lp = logits.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "moe_route", [&] {
    const auto* xp = x.const_data_ptr<scalar_t>();
    std::vector<float> xf(rows * hidden);  // NOTE: widened once, not once per expert
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t h = 0; h < hidden; ++h) xf[r * hidden + h] = static_cast<float>(xp[r * x.stride(0) + h]);
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / hidden);  // NOTE: one-token steps run inline
    at::parallel_for(0, rows * experts, grain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const float v = router_dot(xf.data() + (i / experts) * hidden, wp + (i % experts) * hidden, hidden);
        lp[i] = static_cast<float>(static_cast<scalar_t>(v));
      }
    });
  });
  return logits;
}

// Routing as models/moe.py's SparseMoE.route computes it (softmax in float32, the top k, optionally
// renormalised to sum to 1, cast to the logits' dtype unless float_weights): one call instead of
// five torch operators a layer. exp is the C library's, not torch's vectorised one, so a
// probability can differ from torch's in its last bits (a few float32 ulps; the experts chosen
// only where two are that close). Ties go to the lower expert id. Returns (weights [T, k], ids int64 [T, k]).
std::tuple<at::Tensor, at::Tensor> moe_route(const at::Tensor& x_or_logits, int64_t top_k, bool renormalize,
                                             bool float_weights, const std::optional<at::Tensor>& router) {
  const char* what = "moe_route";
  const at::Tensor logits = router.has_value() ? router_logits(x_or_logits, *router, what) : x_or_logits;
  const at::ScalarType dtype = x_or_logits.scalar_type();  // NOTE: the routing weights' (float_weights: float32)
  check_rows(logits, what);
  const int64_t rows = logits.size(0), num_experts = logits.size(1);
  TORCH_CHECK(top_k >= 1 && top_k <= num_experts, what, ": top_k must be in [1, ", num_experts, "], got ", top_k);
  const at::Tensor lf = logits.to(at::kFloat).contiguous();
  auto weights = at::empty({rows, top_k}, logits.options().dtype(at::kFloat));
  auto ids = at::empty({rows, top_k}, logits.options().dtype(at::kLong));
  const float* lp = lf.const_data_ptr<float>();
  float* wp = weights.data_ptr<float>();
  int64_t* ip = ids.data_ptr<int64_t>();
  std::vector<float> probs(num_experts);
  std::vector<int64_t> order(num_experts);
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = lp + r * num_experts;
    const float m = *std::max_element(l, l + num_experts);
    float sum = 0.f;
    for (int64_t e = 0; e < num_experts; ++e) sum += (probs[e] = std::exp(l[e] - m));
    const float inv = 1.f / sum;  // NOTE: as torch's softmax: times the reciprocal of the sum
    for (int64_t e = 0; e < num_experts; ++e) probs[e] *= inv;
    for (int64_t e = 0; e < num_experts; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int64_t a, int64_t b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); });
    float chosen = 0.f;
    for (int64_t j = 0; j < top_k; ++j) chosen += probs[order[j]];
    for (int64_t j = 0; j < top_k; ++j) {
      ip[r * top_k + j] = order[j];
      wp[r * top_k + j] = renormalize ? probs[order[j]] / chosen : probs[order[j]];
    }
  }
  return {float_weights ? weights : weights.to(dtype), ids};
}

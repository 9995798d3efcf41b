// TiledWeight: a tiled linear's weight (a GGUF type's tiles, or bf16 / float16 half tiles) as one
// value, whatever its kind, for the ops that run several
// linears in one call (moe_experts.h: every expert of a block; stacked_linear.h: the parts of a
// fused projection). Part of the binding's translation unit (included by cpu_ops.cpp after the
// integer linears, whose checks it uses).

#pragma once

// A tiled weight: its kind and the tensors the kind's tile kernel takes.
struct TiledWeight {
  enum Kind { kQ4K, kQ5K, kQ6K, kQ8B, kQ50, kQ51, kQ41, kBF16, kF16 };
  Kind kind;
  const void* w = nullptr;
  const void* a[4] = {nullptr, nullptr, nullptr, nullptr};
  int64_t tiles = 0, k = 0;

  // Whether the kernel reads the rows' int8 levels (the float-weight kinds read the rows themselves).
  bool reads_levels() const { return kind != kBF16 && kind != kF16; }
  // Rows one call of the kind's kernel takes at most.
  int64_t rows_per_pass(const sglc_kernel_table& kt) const {
    return reads_levels() ? kt.int_rows_per_pass : kt.half_rows_per_pass;
  }

  // out rows r0 .. r0 + rows of tile t from the quantized rows act (out rows n apart).
  void run(const sglc_kernel_table& kt, int slot, const sglc_quantized_rows* act, int64_t t, int64_t r0, int rows,
           int64_t n, void* out) const {
    const auto* wp = static_cast<const uint8_t*>(w);
    const auto* d = static_cast<const uint16_t*>(a[0]);
    switch (kind) {
      case kQ4K:
      case kQ5K:
        (kind == kQ4K ? kt.q4k_tile : kt.q5k_tile)[slot](wp, d, static_cast<const uint16_t*>(a[1]),
                                                         static_cast<const uint8_t*>(a[2]),
                                                         static_cast<const uint8_t*>(a[3]), act, t, r0, rows, n,
                                                         nullptr, out);
        return;
      case kQ6K:
        kt.q6k_tile[slot](wp, d, static_cast<const int8_t*>(a[1]), act, t, r0, rows, n, nullptr, out);
        return;
      case kQ8B:
        kt.q8b_tile[slot](static_cast<const int8_t*>(w), d, act, t, r0, rows, n, nullptr, out);
        return;
      case kQ50:
      case kQ51:
        kt.q5_tile[slot](wp, d, static_cast<const uint16_t*>(a[1]), act, t, r0, rows, n, nullptr, out);
        return;
      case kQ41:
        kt.q4_tile[slot](wp, d, static_cast<const uint16_t*>(a[1]), act, t, r0, rows, n, nullptr, out);
        return;
      case kBF16:
      case kF16:
        (kind == kBF16 ? kt.bf16w_tile : kt.f16w_tile)[slot](static_cast<const uint16_t*>(w), act, t, r0, rows, n,
                                                             nullptr, out);
        return;
    }
  }
};

// Whether any of ws reads the rows' int8 levels (then they are quantized) / the rows themselves.
bool any_reads_levels(const std::vector<TiledWeight>& ws) {
  return std::any_of(ws.begin(), ws.end(), [](const TiledWeight& w) { return w.reads_levels(); });
}
bool any_reads_rows(const std::vector<TiledWeight>& ws) {
  return std::any_of(ws.begin(), ws.end(), [](const TiledWeight& w) { return !w.reads_levels(); });
}

// The kind's tensors from args[0 .. count), checked as the kind's own linear op checks them.
// Returns how many tensors the kind takes.
int64_t parse_tiled_weight(const std::string& kind, const at::TensorList& args, int64_t first, TiledWeight& tw,
                           const char* what) {
  static const std::map<std::string, std::pair<TiledWeight::Kind, int64_t>> kKinds = {
      {"q4k", {TiledWeight::kQ4K, 5}}, {"q5k", {TiledWeight::kQ5K, 5}}, {"q6k", {TiledWeight::kQ6K, 3}},
      {"q8b", {TiledWeight::kQ8B, 2}}, {"q5_0", {TiledWeight::kQ50, 2}}, {"q5_1", {TiledWeight::kQ51, 3}},
      {"q4", {TiledWeight::kQ41, 3}}, {"bf16", {TiledWeight::kBF16, 1}}, {"f16", {TiledWeight::kF16, 1}}};
  const auto found = kKinds.find(kind);
  TORCH_CHECK(found != kKinds.end(), what, ": unknown weight kind '", kind,
              "' (q4k, q5k, q6k, q8b, q5_0, q5_1, q4, bf16, f16)");
  const auto [k, count] = found->second;
  TORCH_CHECK(first + count <= static_cast<int64_t>(args.size()), what, ": too few tensors for a ", kind, " weight");
  const at::Tensor& w = args[first];
  if (k == TiledWeight::kBF16 || k == TiledWeight::kF16) {
    check_half_tiles(w, what);
    TORCH_CHECK(w.scalar_type() == (k == TiledWeight::kBF16 ? at::kBFloat16 : at::kHalf), what, ": a ", kind,
                " weight must be ", kind, " half tiles, got ", w.scalar_type());
    TORCH_CHECK(w.size(1) % kQBlock == 0, what, ": in_features must be a multiple of ", kQBlock, ", got ", w.size(1));
    tw = TiledWeight{k, w.const_data_ptr(), {}, w.size(0), w.size(1)};
    return count;
  }
  if (k == TiledWeight::kQ8B) {
    TORCH_CHECK(w.dim() == 4 && w.size(2) == 8 && w.size(3) == 64 && w.is_contiguous() && w.scalar_type() == at::kChar,
                what, ": a q8b weight must be contiguous int8 q8 tiles [out / 16, in / 32, 8, 64], got ", w.sizes());
  } else {
    const int64_t loads = k == TiledWeight::kQ4K || k == TiledWeight::kQ41 ? 4 : k == TiledWeight::kQ6K ? 6 : 5;
    check_level_tiles(w, loads, what, kind.c_str());
  }
  const int64_t tiles = w.size(0), blocks = w.size(1);
  tw = TiledWeight{k, w.const_data_ptr(), {}, tiles, blocks * kQBlock};
  switch (k) {
    case TiledWeight::kQ4K:
    case TiledWeight::kQ5K:
      TORCH_CHECK(blocks % 8 == 0, what, ": K-quant in_features must be a multiple of 256");
      check_block_table(args[first + 1], tiles, blocks / 8, at::kHalf, what, "d");
      check_block_table(args[first + 2], tiles, blocks / 8, at::kHalf, what, "dmin");
      check_block_table(args[first + 3], tiles, blocks, at::kByte, what, "sc");
      check_block_table(args[first + 4], tiles, blocks, at::kByte, what, "mn");
      break;
    case TiledWeight::kQ6K:
      TORCH_CHECK(blocks % 8 == 0, what, ": K-quant in_features must be a multiple of 256");
      check_block_table(args[first + 1], tiles, blocks / 8, at::kHalf, what, "d");
      check_block_table(args[first + 2], tiles, blocks * 2, at::kChar, what, "sc");
      break;
    case TiledWeight::kQ8B:
    case TiledWeight::kQ50:
      check_block_table(args[first + 1], tiles, blocks, at::kHalf, what, "d");
      break;
    case TiledWeight::kQ51:
    case TiledWeight::kQ41:
      check_block_table(args[first + 1], tiles, blocks, at::kHalf, what, "d");
      check_block_table(args[first + 2], tiles, blocks, at::kHalf, what, "m");
      break;
  }
  for (int64_t i = 1; i < count; ++i) tw.a[i - 1] = args[first + i].const_data_ptr();
  return count;
}

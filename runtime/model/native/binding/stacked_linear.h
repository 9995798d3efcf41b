// stacked_linear: tiled GGUF linears of one input whose outputs sit side by side, in one call (a
// fused q/k/v whose parts the file ships in different types: a Q4_K_M file's Q6_K attn_v beside
// Q4_K q and k in a third to a half of the layers). Part of the binding's translation unit
// (included by cpu_ops.cpp after tiled_weight.h).
//
// What it replaces is models/weight_loader.py's StackedLinear: one linear op per part (each
// quantizing the same rows again), the parts' outputs, and a torch.cat. Here the rows are
// quantized once and every (part, tile) is a task of one pass over the thread pool, writing its
// columns of the one output; each part's columns are its own op's bit for bit (same tile kernels,
// same quantized rows).

#pragma once

// The parts of one stacked linear, parsed and checked (every part takes the same inputs).
std::vector<TiledWeight> parse_stacked(const std::vector<std::string>& kinds, at::TensorList weights,
                                       const char* what) {
  const int64_t parts = static_cast<int64_t>(kinds.size());
  TORCH_CHECK(parts >= 1, what, ": at least one part");
  std::vector<TiledWeight> part(parts);
  int64_t used = 0;
  for (int64_t p = 0; p < parts; ++p) {
    used += parse_tiled_weight(kinds[p], weights, used, part[p], what);
    TORCH_CHECK(part[p].k == part[0].k, what, ": part ", p, " takes ", part[p].k, " inputs, part 0 ", part[0].k);
  }
  TORCH_CHECK(used == static_cast<int64_t>(weights.size()), what, ": more tensors than the kinds take");
  return part;
}

// x through parsed parts: [rows, sum of the parts' tiles * 16].
at::Tensor run_stacked(const at::Tensor& x, const std::vector<TiledWeight>& part, const char* what) {
  const int64_t parts = static_cast<int64_t>(part.size());
  std::vector<int64_t> first_tile(parts + 1, 0);  // global tile index of each part's first tile
  for (int64_t p = 0; p < parts; ++p) first_tile[p + 1] = first_tile[p] + part[p].tiles;
  const int64_t k = part[0].k, tiles = first_tile[parts], n = tiles * kQTile;
  check_activations(x, k, what);
  const int slot = int_dtype_slot(x.scalar_type(), what);
  const int64_t rows = x.size(0), es = x.element_size();
  auto out = at::empty({rows, n}, x.options());
  if (rows == 0) return out;
  const sglc_kernel_table& kt = kernels();
  thread_local QuantizedRows caller_rows;
  const sglc_quantized_rows qr =
      quantize_rows(kt, slot, x.const_data_ptr(), x.stride(0), es, rows, k, caller_rows, any_reads_levels(part));
  char* op = static_cast<char*>(out.data_ptr());
  const RowBlocks blocks(rows);
  // NOTE: tasks as run_tiled's: (block of rows, tile), rows outermost
  at::parallel_for(0, blocks.count * tiles, 1, [&](int64_t begin, int64_t end) {
    int64_t p = 0;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t rb = task / tiles, g = task % tiles, last = std::min(rows, (rb + 1) * blocks.size);
      while (g >= first_tile[p + 1]) ++p;
      while (g < first_tile[p]) --p;
      void* cols = op + first_tile[p] * kQTile * es;  // this part's first column
      const int64_t per_pass = part[p].rows_per_pass(kt);
      for (int64_t r0 = rb * blocks.size; r0 < last; r0 += per_pass) {
        part[p].run(kt, slot, &qr, g - first_tile[p], r0, static_cast<int>(std::min(per_pass, last - r0)), n, cols);
      }
    }
  });
  return out;
}

at::Tensor stacked_linear(const at::Tensor& x, const std::vector<std::string>& kinds, at::TensorList weights) {
  return run_stacked(x, parse_stacked(kinds, weights, "stacked_linear"), "stacked_linear");
}

// The binding's ops as plain C functions, for a process that never imports torch's Python package
// (models/native_model.py loads this library with ctypes after libc10 and libtorch_cpu; importing
// torch costs ~1 s and ~210 MiB, those two libraries ~0.2 s and ~100 MiB). Part of the binding's
// translation unit (included by cpu_ops.cpp after every op), so each function here runs the
// torch operator's own code: the same checks, the same kernels, the same bits.
//
// Conventions: a tensor crosses as an opaque `sglc_c_tensor*` (a heap at::Tensor): made over the
// caller's memory by sglc_c_wrap (never copied; the caller keeps that memory alive and unmoved
// while the handle lives) or returned by an op (owning its memory), and released by
// sglc_c_free. A function returning int gives 0 on success and -1 on failure, with the error's
// message written to `err` (at most `err_len` bytes, NUL-terminated); nothing is thrown across.

#pragma once

struct sglc_c_tensor {
  at::Tensor t;
};

namespace {

// dtype codes shared with models/native_model.py's DTYPE_CODES (numpy names in that order)
const at::ScalarType kCodeDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf,  at::kDouble, at::kLong,
                                      at::kInt,   at::kByte,     at::kChar,  at::kShort,  at::kBool};
constexpr int kCodeCount = sizeof(kCodeDtypes) / sizeof(kCodeDtypes[0]);

int dtype_code(at::ScalarType t) {
  for (int i = 0; i < kCodeCount; ++i)
    if (kCodeDtypes[i] == t) return i;
  return -1;
}

void put_error(const char* message, char* err, size_t err_len) {
  if (err == nullptr || err_len == 0) return;
  std::strncpy(err, message, err_len - 1);
  err[err_len - 1] = '\0';
}

// Runs body; its exception (a TORCH_CHECK's c10::Error or any std::exception) becomes -1 and err.
template <typename F>
int guarded(char* err, size_t err_len, F&& body) {
  try {
    body();
    return 0;
  } catch (const c10::Error& e) {
    put_error(e.what_without_backtrace(), err, err_len);
  } catch (const std::exception& e) {
    put_error(e.what(), err, err_len);
  }
  return -1;
}

sglc_c_tensor* own(at::Tensor t) { return new sglc_c_tensor{std::move(t)}; }

const at::Tensor& need(const sglc_c_tensor* t, const char* what) {
  TORCH_CHECK(t != nullptr, what, ": a tensor argument is null");
  return t->t;
}

std::optional<at::Tensor> maybe(const sglc_c_tensor* t) {
  return t == nullptr ? std::nullopt : std::optional<at::Tensor>(t->t);
}

std::vector<at::Tensor> tensor_list(sglc_c_tensor* const* ts, int64_t n, const char* what) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (int64_t i = 0; i < n; ++i) out.push_back(need(ts[i], what));
  return out;
}

std::vector<std::string> string_list(const char* const* ss, int64_t n) { return {ss, ss + n}; }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int sglc_c_load_kernels(const char* path, char* level, size_t level_len,
                                                               char* err, size_t err_len) {
  return guarded(err, err_len, [&] { put_error(load_kernels(path).c_str(), level, level_len); });
}

__attribute__((visibility("default"))) int sglc_c_use_kernels(const char* level, char* err, size_t err_len) {
  return guarded(err, err_len, [&] { use_kernels(level); });
}

__attribute__((visibility("default"))) void sglc_c_set_threads(int threads) { at::set_num_threads(threads); }

// The weight arena's chunks made from now on in ordinary pages (defer != 0) or huge pages
// (weight_arena.h says why a load defers them), and every chunk moved into huge pages now
// (returns the bytes asked for: the collapse is the kernel's best effort).
__attribute__((visibility("default"))) void sglc_c_defer_huge_pages(int defer) {
  weight_arena().set_defer_huge_pages(defer != 0);
}

__attribute__((visibility("default"))) size_t sglc_c_collapse_huge_pages() { return weight_arena().collapse_huge_pages(); }

// A tensor over `data` (row-major, contiguous), or null with err (an unknown dtype code, say).
__attribute__((visibility("default"))) sglc_c_tensor* sglc_c_wrap(void* data, int code, int ndim,
                                                                  const int64_t* shape, char* err, size_t err_len) {
  sglc_c_tensor* out = nullptr;
  guarded(err, err_len, [&] {
    TORCH_CHECK(code >= 0 && code < kCodeCount, "sglc_c_wrap: unknown dtype code ", code);
    TORCH_CHECK(ndim >= 0 && ndim <= 8, "sglc_c_wrap: ", ndim, " dimensions (at most 8)");
    at::Tensor t = at::from_blob(data, at::IntArrayRef(shape, ndim), at::TensorOptions().dtype(kCodeDtypes[code]));
    out = own(std::move(t));
  });
  return out;
}

// A new zero-filled contiguous tensor in the weight arena (huge pages: a KV buffer is streamed
// by every decode step, as the weights are), resident now, as the torch engine's pool is: the
// arena's memory is fresh from mmap, so zero already, and touching one byte a page has the kernel
// map it (a pass of at::zeros wrote every byte a second time, 4 KiB page by page: ~50 ms of a start).
__attribute__((visibility("default"))) sglc_c_tensor* sglc_c_zeros(int code, int ndim, const int64_t* shape, char* err,
                                                                   size_t err_len) {
  sglc_c_tensor* out = nullptr;
  guarded(err, err_len, [&] {
    TORCH_CHECK(code >= 0 && code < kCodeCount, "sglc_c_zeros: unknown dtype code ", code);
    TORCH_CHECK(ndim >= 0 && ndim <= 8, "sglc_c_zeros: ", ndim, " dimensions (at most 8)");
    at::Tensor t = weight_arena().empty(at::IntArrayRef(shape, ndim), at::TensorOptions().dtype(kCodeDtypes[code]));
    const int64_t page = sysconf(_SC_PAGESIZE), bytes = t.nbytes();
    volatile char* base = static_cast<char*>(t.data_ptr());
    at::parallel_for(0, (bytes + page - 1) / page, 256, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) base[p * page] = 0;
    });
    out = own(std::move(t));
  });
  return out;
}

__attribute__((visibility("default"))) void sglc_c_free(sglc_c_tensor* t) { delete t; }

// Shape, dtype code and data of a (contiguous) tensor an op returned.
__attribute__((visibility("default"))) int sglc_c_describe(const sglc_c_tensor* t, int64_t* shape, int max_dims,
                                                           int* ndim, int* code, void** data, char* err,
                                                           size_t err_len) {
  return guarded(err, err_len, [&] {
    const at::Tensor& x = need(t, "sglc_c_describe");
    TORCH_CHECK(x.is_contiguous(), "sglc_c_describe: the tensor is not contiguous");
    TORCH_CHECK(x.dim() <= max_dims, "sglc_c_describe: ", x.dim(), " dimensions, room for ", max_dims);
    *ndim = static_cast<int>(x.dim());
    for (int64_t i = 0; i < x.dim(); ++i) shape[i] = x.size(i);
    *code = dtype_code(x.scalar_type());
    TORCH_CHECK(*code >= 0, "sglc_c_describe: dtype ", x.scalar_type(), " has no code");
    *data = x.data_ptr();
  });
}

// A whole model's tensors repacked in one call, over the pool's threads without a barrier between
// tensors (repack_gguf_jobs): a load that called gguf_tiles per tensor gave up the GIL ~170-800
// times, and each time waited for the start's other Python threads to hand it back. Job j is
// `types[j]` with `cols[j]` columns, its rows the stacked parts (`part_counts[j]` of them, in order
// from `part_data` / `part_rows`); its outputs go to out[5 j ..] (counts[j] of them). With
// `release[j]`, once job j is repacked its parts' pages leave the process (GGUFRows::drop_pages:
// the parts must be an unwritten file mapping), so the file and its repacked copy are never
// resident at once. On failure nothing is returned: the tensors made so far are freed, and err
// names the job.
__attribute__((visibility("default"))) int sglc_c_gguf_tiles_batch(int64_t jobs, const char* const* types,
                                                                   const int64_t* cols, const int64_t* part_counts,
                                                                   const void* const* part_data,
                                                                   const int64_t* part_rows, const int* release,
                                                                   sglc_c_tensor** out, int* counts, char* err,
                                                                   size_t err_len) {
  std::vector<sglc_c_tensor*> made;
  const int status = guarded(err, err_len, [&] {
    auto naming_job = [&](int64_t j, auto&& body) {  // NOTE: an error names its job, for the caller's tensor name
      try {
        body();
      } catch (const c10::Error& e) {
        TORCH_CHECK(false, "gguf_tiles_batch: job ", j, " (", types[j], "): ", e.what_without_backtrace());
      }
    };
    std::vector<std::unique_ptr<GGUFTileJob>> tile_jobs;
    int64_t next_part = 0;
    for (int64_t j = 0; j < jobs; ++j) {
      naming_job(j, [&] {
        const GGUFTileType& ty = gguf_tile_type(types[j]);
        GGUFRows src;
        src.row_bytes = gguf_row_bytes(ty, cols[j]);
        TORCH_CHECK(part_counts[j] >= 1, "no parts");
        for (int64_t k = 0; k < part_counts[j]; ++k, ++next_part) {
          TORCH_CHECK(part_data[next_part] != nullptr && part_rows[next_part] > 0, "part ", k, " is empty");
          src.parts.emplace_back(static_cast<const uint8_t*>(part_data[next_part]), part_rows[next_part]);
          src.rows += part_rows[next_part];
        }
        tile_jobs.push_back(std::make_unique<GGUFTileJob>(std::move(src), ty, cols[j]));
      });
    }
    repack_gguf_jobs(tile_jobs, [&](size_t j) {
      if (release[j] != 0) tile_jobs[j]->rows().drop_pages();
    });
    for (int64_t j = 0; j < jobs; ++j) {
      naming_job(j, [&] {
        std::vector<at::Tensor> tiles = tile_jobs[j]->outputs();
        counts[j] = static_cast<int>(tiles.size());
        for (size_t i = 0; i < tiles.size(); ++i) made.push_back(out[5 * j + i] = own(std::move(tiles[i])));
      });
    }
  });
  if (status != 0)
    for (sglc_c_tensor* t : made) delete t;
  return status;
}

__attribute__((visibility("default"))) int sglc_c_rms_norm(const sglc_c_tensor* x, const sglc_c_tensor* weight,
                                                           double eps, sglc_c_tensor** out, char* err, size_t err_len) {
  return guarded(err, err_len, [&] { *out = own(rms_norm(need(x, "rms_norm"), need(weight, "rms_norm"), eps)); });
}

__attribute__((visibility("default"))) int sglc_c_stacked_linear(const sglc_c_tensor* x, const char* const* kinds,
                                                                 int64_t n_kinds, sglc_c_tensor* const* weights,
                                                                 int64_t n_weights, sglc_c_tensor** out, char* err,
                                                                 size_t err_len) {
  return guarded(err, err_len, [&] {
    const auto ws = tensor_list(weights, n_weights, "stacked_linear");
    *out = own(stacked_linear(need(x, "stacked_linear"), string_list(kinds, n_kinds), ws));
  });
}

__attribute__((visibility("default"))) DecodeLayer* sglc_c_layer_new() { return new DecodeLayer(); }

__attribute__((visibility("default"))) void sglc_c_layer_free(DecodeLayer* layer) { delete layer; }

__attribute__((visibility("default"))) int sglc_c_layer_set_projection(DecodeLayer* layer, const char* which,
                                                                       const char* const* kinds, int64_t n_kinds,
                                                                       sglc_c_tensor* const* tensors,
                                                                       int64_t n_tensors, const sglc_c_tensor* bias,
                                                                       char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    layer->set_projection(which, string_list(kinds, n_kinds), tensor_list(tensors, n_tensors, "set_projection"),
                          maybe(bias));
  });
}

__attribute__((visibility("default"))) int sglc_c_layer_set_attention(DecodeLayer* layer, int64_t q_heads,
                                                                      int64_t kv_heads, int64_t head_dim,
                                                                      const sglc_c_tensor* q_norm,
                                                                      const sglc_c_tensor* k_norm,
                                                                      const sglc_c_tensor* post_norm, double scale,
                                                                      double softcap, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    layer->set_attention(q_heads, kv_heads, head_dim, maybe(q_norm), maybe(k_norm), maybe(post_norm), scale, softcap);
  });
}

__attribute__((visibility("default"))) int sglc_c_layer_set_mlp(DecodeLayer* layer, const sglc_c_tensor* norm,
                                                                const sglc_c_tensor* post_norm, const char* act,
                                                                double eps, char* err, size_t err_len) {
  return guarded(err, err_len, [&] { layer->set_mlp(need(norm, "set_mlp"), maybe(post_norm), act, eps); });
}

__attribute__((visibility("default"))) int sglc_c_layer_set_experts(
    DecodeLayer* layer, const char* const* gate_up_kinds, int64_t n_gate_up_kinds, sglc_c_tensor* const* gate_up,
    int64_t n_gate_up, const char* const* down_kinds, int64_t n_down_kinds, sglc_c_tensor* const* down, int64_t n_down,
    const char* act, const sglc_c_tensor* router, int64_t top_k, int renormalize, int float_weights, char* err,
    size_t err_len) {
  return guarded(err, err_len, [&] {
    layer->set_experts(string_list(gate_up_kinds, n_gate_up_kinds), tensor_list(gate_up, n_gate_up, "set_experts"),
                       string_list(down_kinds, n_down_kinds), tensor_list(down, n_down, "set_experts"), act,
                       need(router, "set_experts"), top_k, renormalize != 0, float_weights != 0);
  });
}

// DecodeLayer::forward; *out: the next layer's input (or h after the last layer).
__attribute__((visibility("default"))) int sglc_c_layer_forward(
    DecodeLayer* layer, const sglc_c_tensor* h, const sglc_c_tensor* x, const sglc_c_tensor* positions,
    const sglc_c_tensor* cos, const sglc_c_tensor* sin, const sglc_c_tensor* k_cache, const sglc_c_tensor* v_cache,
    const sglc_c_tensor* loc, const sglc_c_tensor* index, const sglc_c_tensor* lens, const sglc_c_tensor* next_norm,
    sglc_c_tensor** out, char* err, size_t err_len) {
  return guarded(err, err_len, [&] {
    const char* what = "DecodeLayer.forward";
    at::Tensor k = need(k_cache, what), v = need(v_cache, what);
    *out = own(layer->forward(need(h, what), need(x, what), need(positions, what), need(cos, what), need(sin, what), k,
                              v, need(loc, what), need(index, what), need(lens, what), std::nullopt, std::nullopt,
                              maybe(next_norm)));
  });
}

}  // extern "C"

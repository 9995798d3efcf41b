// weight_arena: where the repacked GGUF tiles live (gguf_tiles.h allocates every output here; the
// torch-free engine's KV pool too, c_api.h's sglc_c_zeros). Memory is handed out once, from fresh
// mappings, so a tensor's bytes start zero. Part of the binding's translation unit (included by
// cpu_ops.cpp, which includes sys/mman.h, before gguf_tiles.h).
//
// A decode step streams every weight once, from memory, in tile order. In 4 KiB pages that walk
// misses the TLB on every page and the hardware prefetchers stop at every page edge; in 2 MiB pages
// it does neither: cold [1536 x 1024] linears at one row, 2 threads, AVX512 Xeon, ran Q4_K
// 10.8 -> 15.2 GB/s and Q6_K 10.1 -> 14.9 (bench/bench_huge_pages.py). Most Linux systems give
// anonymous memory huge pages only where madvise(MADV_HUGEPAGE) asks (transparent_hugepage=
// madvise), and an allocation the size of one tensor (a few hundred KB) is neither aligned to nor
// as large as one. So tensors are bump-allocated, 64-byte aligned, from 2 MiB-aligned chunks of at
// least 64 MiB marked MADV_HUGEPAGE; a chunk is unmapped when the last tensor in it is freed (the
// arena only points at the one it is filling). Where huge pages are off (or madvise is missing)
// they are ordinary pages.
//
// Deferred huge pages (set_defer_huge_pages, the torch-free engine's load): a huge page's first
// touch needs a free 2 MiB block, and on a VM whose balloon reports free memory to the host (free
// page reporting, order >= 9) those blocks are the ones the host took back: each fault then waits
// for the host to back and zero 2 MiB. Loading a 200 MB model took 0.13 s or 0.42 s by that luck
// (Firecracker, 2 cores); in 4 KiB pages, from the guest's recently freed ones, 0.17-0.18 s every
// time. So the load fills ordinary pages and collapse_huge_pages() (MADV_COLLAPSE, Linux 6.1+; on
// older kernels MADV_HUGEPAGE leaves it to khugepaged) moves every chunk into huge pages later,
// from a background thread once the engine serves.

#pragma once

class WeightArena {
 public:
  // A tensor of `sizes` and `options` (CPU) in the arena.
  at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    const size_t bytes = static_cast<size_t>(numel) * at::elementSize(at::typeMetaToScalarType(options.dtype()));
    const size_t padded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    std::shared_ptr<Chunk> chunk;
    char* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      chunk = current_.lock();
      if (!chunk || chunk->used + padded > chunk->size) {
        chunk = std::make_shared<Chunk>(std::max(kChunkBytes, (padded + kHuge - 1) / kHuge * kHuge), !defer_huge_);
        current_ = chunk;
        chunks_.erase(std::remove_if(chunks_.begin(), chunks_.end(), [](const auto& c) { return c.expired(); }),
                      chunks_.end());
        chunks_.push_back(chunk);
      }
      p = chunk->base + chunk->used;
      chunk->used += padded;
    }
    return at::from_blob(
        p, sizes, [chunk](void*) mutable { chunk.reset(); }, options.device(at::kCPU));
  }

  // Chunks made from now on start in ordinary pages (true) or ask for huge pages (false).
  void set_defer_huge_pages(bool defer) {
    std::lock_guard<std::mutex> lock(mutex_);
    defer_huge_ = defer;
  }

  // Every live chunk's used part moved into huge pages now (where the kernel collapses them; its
  // last 2 MiB filled whole); returns the bytes asked for.
  size_t collapse_huge_pages() {
    std::vector<std::shared_ptr<Chunk>> live;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<std::weak_ptr<Chunk>> kept;
      for (auto& weak : chunks_)
        if (auto chunk = weak.lock()) {
          live.push_back(chunk);
          kept.push_back(weak);
        }
      chunks_ = std::move(kept);
    }
    size_t asked = 0;
    for (auto& chunk : live) asked += chunk->collapse();
    return asked;
  }

 private:
  static constexpr size_t kAlign = 64, kHuge = size_t{2} << 20, kChunkBytes = size_t{64} << 20;

  struct Chunk {
    char* mapping = nullptr;  // what mmap gave (kHuge more than asked, for the alignment)
    size_t mapped = 0;
    char* base = nullptr;  // 2 MiB-aligned start
    size_t size = 0, used = 0;

    bool huge = false;  // MADV_HUGEPAGE given (at mapping, or by collapse)

    Chunk(size_t bytes, bool huge_now) : mapped(bytes + kHuge), size(bytes) {
      void* m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      TORCH_CHECK(m != MAP_FAILED, "weight arena: cannot map ", mapped, " bytes for weights");
      mapping = static_cast<char*>(m);
      const auto addr = reinterpret_cast<uintptr_t>(mapping);
      base = mapping + ((kHuge - addr % kHuge) % kHuge);
      if (huge_now) advise_huge();
    }

    void advise_huge() {
#ifdef MADV_HUGEPAGE
      madvise(base, size, MADV_HUGEPAGE);  // NOTE: advice only: ignored where huge pages are off
#endif
      huge = true;
    }

    size_t collapse() {
      if (huge) return 0;
      advise_huge();
      const size_t whole = std::min(size, (used + kHuge - 1) / kHuge * kHuge);
#ifndef MADV_COLLAPSE
      constexpr int MADV_COLLAPSE = 25;  // NOTE: Linux's number; older headers lack the name
#endif
      madvise(base, whole, MADV_COLLAPSE);  // NOTE: best effort: EINVAL on kernels before 6.1, khugepaged then
      return whole;
    }
    ~Chunk() { munmap(mapping, mapped); }
    Chunk(const Chunk&) = delete;
    Chunk& operator=(const Chunk&) = delete;
  };

  std::mutex mutex_;
  std::weak_ptr<Chunk> current_;  // NOTE: weak: a chunk whose tensors are all gone is unmapped
  std::vector<std::weak_ptr<Chunk>> chunks_;  // every chunk made, for collapse_huge_pages
  bool defer_huge_ = false;
};

WeightArena& weight_arena() {
  static WeightArena* arena = new WeightArena();  // NOTE: never destroyed: tensors may outlive statics
  return *arena;
}

// gguf_tiles: one GGUF tensor's blocks repacked, in one call, into the tile layout its native
// kernel reads (kernels/common/int_linear.h). Part of the binding's translation unit (included by
// cpu_ops.cpp after the integer linears, whose kQTile / kQBlock it uses).
//
// Why native: the same repacking in numpy (models/gguf_tiles.py, kept as the readable reference and
// the tests' oracle) made a dozen temporaries per tensor and held the GIL between them; it took
// ~1 s of a 2.5 s start for a 190 MB Q4_K_M file. Here each 32-value block is decoded into its
// levels once and written straight to its tile, over ATen's thread pool, with the GIL released.
//
// Out (the same tensors, bit for bit, as the reference):
//   Q4_0, Q4_1   q4 tiles uint8 [T, B, 4, 64], d and m float16 [T, B, 16] (Q4_0: m = -8 d)
//   Q5_0 / Q5_1  q5 tiles uint8 [T, B, 5, 64], d (and Q5_1's m) float16 [T, B, 16]
//   Q8_0         q8 tiles int8 [T, B, 8, 64], d float16 [T, B, 16]
//   Q4_K / Q5_K  q4 / q5 tiles, d and dmin float16 [T, K/256, 16], sc and mn uint8 [T, B, 16]
//   Q6_K         q6k tiles uint8 [T, B, 6, 64], d float16 [T, K/256, 16], sc int8 [T, K/16, 16]
// with T = ceil(rows / 16) (the last tile's missing channels zero), B = cols / 32. Tile bytes:
// load i < 4, byte 4 c + j pairs value 4 i + j (low nibble) with 16 + 4 i + j (high) of channel c;
// q5's load 4 holds the fifth bit of value 16 s + 4 i + j at bit 4 s + i of byte 4 c + j; q6k's
// loads 4 + s the high 2 bits of value 16 s + 4 i + j at bits 2 i; q8's load i byte 4 c + j is
// value 4 i + j. Every output lives in the weight arena (weight_arena.h: huge pages where the system
// gives them).

#pragma once

struct GGUFTileType {
  enum Kind { kQ40, kQ41, kQ50, kQ51, kQ80, kQ4K, kQ5K, kQ6K };
  Kind kind;
  const char* name;
  int64_t values;  // per block as stored (32, or a K-quant's 256)
  int64_t bytes;   // per stored block
  int64_t loads;   // 64-byte loads per tile block: 4 (q4), 5 (q5), 6 (q6k), 8 (q8)
};

// indexed by GGUFTileType::Kind
constexpr GGUFTileType kGGUFTileTypes[] = {
    {GGUFTileType::kQ40, "Q4_0", 32, 18, 4},   {GGUFTileType::kQ41, "Q4_1", 32, 20, 4},
    {GGUFTileType::kQ50, "Q5_0", 32, 22, 5},   {GGUFTileType::kQ51, "Q5_1", 32, 24, 5},
    {GGUFTileType::kQ80, "Q8_0", 32, 34, 8},   {GGUFTileType::kQ4K, "Q4_K", 256, 144, 4},
    {GGUFTileType::kQ5K, "Q5_K", 256, 176, 5}, {GGUFTileType::kQ6K, "Q6_K", 256, 210, 6},
};

constexpr bool tile_types_in_kind_order() {
  for (int i = 0; i < 8; ++i)
    if (kGGUFTileTypes[i].kind != i) return false;
  return true;
}
static_assert(tile_types_in_kind_order(), "kGGUFTileTypes must be indexed by kind");

inline uint16_t load_u16(const uint8_t* p) {  // NOTE: GGUF is little-endian, as every CPU we build for
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline void store_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

// Bit j of a nibble to bit 0 of byte j: n * (1 + 2^7 + 2^14 + 2^21) puts bit j at 8 j, and no
// other bit of n lands on a multiple of 8 there.
inline uint32_t spread_nibble(uint32_t n) { return (n * 0x00204081u) & 0x01010101u; }

// Channel c's tile words of 32-value block b of one row (nullptr: a padding channel, all zero),
// built from the stored bytes a word (4 values) at a time. Tile load i's word of channel c holds,
// in byte j, value 4 i + j in its low nibble and 16 + 4 i + j in its high one: for Q4_0 / Q4_1 /
// Q5_0 / Q5_1 exactly stored byte 4 i + j (low nibbles are values 0-15, high ones 16-31); for the
// K-quants the nibble of sub-block s (`shift`) of bytes 4 i + j and 16 + 4 i + j. A field shifted
// within a 32-bit word by less than 8 - its width, then masked per byte, never takes bits from the
// next byte.
template <int Kind>
inline void put_block(const uint8_t* row, int64_t b, int c, uint8_t* out) {
  constexpr GGUFTileType ty = kGGUFTileTypes[Kind];
  using K = GGUFTileType;
  uint8_t* at = out + 4 * c;
  if (row == nullptr) {
    for (int i = 0; i < ty.loads; ++i) store_u32(at + i * 64, 0);
    return;
  }
  constexpr uint32_t low4 = 0x0F0F0F0Fu;
  if constexpr (ty.values == 32) {
    const uint8_t* blk = row + b * ty.bytes;
    if constexpr (ty.kind == K::kQ80) {  // load i byte j: value 4 i + j as stored (int8)
      for (int i = 0; i < 8; ++i) std::memcpy(at + i * 64, blk + 2 + 4 * i, 4);
      return;
    }
    const uint8_t* qs = blk + (ty.kind == K::kQ40 ? 2 : ty.kind == K::kQ41 ? 4 : ty.kind == K::kQ50 ? 6 : 8);
    for (int i = 0; i < 4; ++i) std::memcpy(at + i * 64, qs + 4 * i, 4);
    if constexpr (ty.loads == 5) {  // load 4, bit 4 s + i of byte j: value 16 s + 4 i + j's fifth bit (bit of qh)
      const uint32_t qh = load_u32(blk + (ty.kind == K::kQ50 ? 2 : 4));
      uint32_t w = 0;
      for (int s = 0; s < 2; ++s)
        for (int i = 0; i < 4; ++i) w |= spread_nibble((qh >> (16 * s + 4 * i)) & 0x0Fu) << (4 * s + i);
      store_u32(at + 4 * 64, w);
    }
    return;
  }
  const uint8_t* sb = row + (b / 8) * ty.bytes;
  const int s = static_cast<int>(b % 8);  // sub-block of the super-block
  if constexpr (ty.kind == K::kQ6K) {  // sub-block 4 h + q: ql bytes 64 h + 32 (q & 1).., nibble q / 2; qh bytes 32 h.., bits 2 q
    const int h = s / 4, q = s % 4;
    const uint8_t* ql = sb + 64 * h + 32 * (q & 1);
    const uint8_t* qh = sb + 128 + 32 * h;
    const int lo_shift = 4 * (q >> 1), hi_shift = 2 * q;
    for (int i = 0; i < 4; ++i)
      store_u32(at + i * 64, ((load_u32(ql + 4 * i) >> lo_shift) & low4) |
                                 (((load_u32(ql + 16 + 4 * i) >> lo_shift) & low4) << 4));
    for (int half = 0; half < 2; ++half) {  // load 4 + half, bits 2 i of byte j: value 16 half + 4 i + j's high 2 bits
      uint32_t w = 0;
      for (int i = 0; i < 4; ++i) w |= ((load_u32(qh + 16 * half + 4 * i) >> hi_shift) & 0x03030303u) << (2 * i);
      store_u32(at + (4 + half) * 64, w);
    }
    return;
  }
  // Q4_K / Q5_K: sub-block 2 g + r is nibble r of bytes 32 g.. of qs; Q5_K's fifth bit of value i is bit s of qh[i]
  const uint8_t* qs = sb + (ty.kind == K::kQ4K ? 16 : 48) + 32 * (s / 2);
  const int shift = 4 * (s & 1);
  for (int i = 0; i < 4; ++i)
    store_u32(at + i * 64,
              ((load_u32(qs + 4 * i) >> shift) & low4) | (((load_u32(qs + 16 + 4 * i) >> shift) & low4) << 4));
  if constexpr (ty.kind == K::kQ5K) {
    const uint8_t* qh = sb + 16;
    uint32_t w = 0;
    for (int half = 0; half < 2; ++half)
      for (int i = 0; i < 4; ++i) w |= ((load_u32(qh + 16 * half + 4 * i) >> s) & 0x01010101u) << (4 * half + i);
    store_u32(at + 4 * 64, w);
  }
}

// Tile t's blocks (16 channels' rows, nullptr for padding) into its tile bytes.
template <int Kind>
void repack_tile_levels(const uint8_t* const row_of[], int64_t blocks, uint8_t* tile_out) {
  constexpr int64_t loads = kGGUFTileTypes[Kind].loads;
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* out = tile_out + b * loads * 64;
    for (int c = 0; c < kQTile; ++c) put_block<Kind>(row_of[c], b, c, out);
  }
}

// Q4_K / Q5_K's 12 scale bytes -> sub-block s's 6-bit scale and min.
inline void k_scale_min(const uint8_t* q, int s, uint8_t& sc, uint8_t& mn) {
  if (s < 4) {
    sc = q[s] & 0x3F;
    mn = q[s + 4] & 0x3F;
  } else {
    sc = (q[s + 4] & 0x0F) | ((q[s - 4] >> 6) << 4);
    mn = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
  }
}

// One tensor's rows as the file holds them: the parts' rows stacked in order (a mixture expert's
// gate and up rows repacked as one tensor, without first copying them together).
struct GGUFRows {
  std::vector<std::pair<const uint8_t*, int64_t>> parts;  // (first row's bytes, rows)
  int64_t rows = 0;
  int64_t row_bytes = 0;

  const uint8_t* row(int64_t r) const {
    for (const auto& [data, n] : parts) {
      if (r < n) return data + r * row_bytes;
      r -= n;
    }
    return nullptr;
  }

  // This process's pages under the parts dropped (madvise DONTNEED over whole pages: the parts
  // must be an unwritten file mapping, whose pages fault back in from the page cache if read).
  void drop_pages() const {
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    for (const auto& [data, n] : parts) {
      const auto lo = reinterpret_cast<uintptr_t>(data) / page * page;
      const auto hi = (reinterpret_cast<uintptr_t>(data) + n * row_bytes + page - 1) / page * page;
      madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);  // NOTE: advice: a failure keeps the pages
    }
  }
};

const GGUFTileType& gguf_tile_type(const std::string& type) {
  for (const auto& t : kGGUFTileTypes)
    if (type == t.name) return t;
  TORCH_CHECK(false, "gguf_tiles: no tile layout for GGUF type ", type, " (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)");
}

int64_t gguf_row_bytes(const GGUFTileType& ty, int64_t cols) {
  TORCH_CHECK(cols > 0 && cols % ty.values == 0, "gguf_tiles: ", ty.name, " with ", cols,
              " columns: columns must be a positive multiple of ", ty.values);
  return cols / ty.values * ty.bytes;
}

// One tensor's repacking: its outputs allocated when made (in the weight arena, nothing written
// yet), its tiles written by repack(t0, t1) from any thread in any order, its tensors returned by
// outputs() once every tile is written.
class GGUFTileJob {
 public:
  GGUFTileJob(GGUFRows src, const GGUFTileType& ty, int64_t cols)
      : src_(std::move(src)), ty_(ty), cols_(cols), blocks_(cols / kQBlock) {
    TORCH_CHECK(src_.rows > 0, "gguf_tiles: ", ty.name, " tensor without rows");
    tiles_ = (src_.rows + kQTile - 1) / kQTile;
    kquant_ = ty.values == 256;
    q6_ = ty.loads == 6;
    d_groups_ = kquant_ ? cols / 256 : blocks_;
    const auto u8 = at::TensorOptions().dtype(at::kByte);
    const auto f16 = at::TensorOptions().dtype(at::kHalf);
    levels_ = weight_arena().empty({tiles_, blocks_, ty.loads, 64}, ty.loads == 8 ? u8.dtype(at::kChar) : u8);
    // per-channel tables: [T, groups, 16]
    d_ = weight_arena().empty({tiles_, d_groups_, kQTile}, f16);
    using K = GGUFTileType;
    if (ty.kind == K::kQ40 || ty.kind == K::kQ41 || ty.kind == K::kQ51 || (kquant_ && !q6_))
      m_ = weight_arena().empty({tiles_, d_groups_, kQTile}, f16);  // Q4_0 / Q4_1 / Q5_1's m, K-quants' dmin
    if (q6_) {  // K-quants' sub-block scales (and Q4_K / Q5_K's mins)
      sc_ = weight_arena().empty({tiles_, cols / 16, kQTile}, at::TensorOptions().dtype(at::kChar));
    } else if (kquant_) {
      sc_ = weight_arena().empty({tiles_, blocks_, kQTile}, u8);
      mn_ = weight_arena().empty({tiles_, blocks_, kQTile}, u8);
    }
  }

  int64_t tiles() const { return tiles_; }
  const GGUFRows& rows() const { return src_; }

  void repack(int64_t t0, int64_t t1) {
    using K = GGUFTileType;
    const GGUFTileType& ty = ty_;
    const int64_t blocks = blocks_, d_groups = d_groups_, cols = cols_;
    const bool kquant = kquant_, q6 = q6_, q40 = ty.kind == K::kQ40;
    uint8_t* lp = static_cast<uint8_t*>(levels_.data_ptr());
    uint16_t* dp = reinterpret_cast<uint16_t*>(d_.data_ptr<at::Half>());
    uint16_t* mp = m_.defined() ? reinterpret_cast<uint16_t*>(m_.data_ptr<at::Half>()) : nullptr;
    uint8_t* scp = sc_.defined() ? static_cast<uint8_t*>(sc_.data_ptr()) : nullptr;
    uint8_t* mnp = mn_.defined() ? mn_.data_ptr<uint8_t>() : nullptr;
    for (int64_t t = t0; t < t1; ++t) {
      const uint8_t* row_of[kQTile];
      for (int c = 0; c < kQTile; ++c) {
        const int64_t r = t * kQTile + c;
        row_of[c] = r < src_.rows ? src_.row(r) : nullptr;
      }
      uint8_t* out = lp + t * blocks * ty.loads * 64;
      switch (ty.kind) {
        case K::kQ40: repack_tile_levels<K::kQ40>(row_of, blocks, out); break;
        case K::kQ41: repack_tile_levels<K::kQ41>(row_of, blocks, out); break;
        case K::kQ50: repack_tile_levels<K::kQ50>(row_of, blocks, out); break;
        case K::kQ51: repack_tile_levels<K::kQ51>(row_of, blocks, out); break;
        case K::kQ80: repack_tile_levels<K::kQ80>(row_of, blocks, out); break;
        case K::kQ4K: repack_tile_levels<K::kQ4K>(row_of, blocks, out); break;
        case K::kQ5K: repack_tile_levels<K::kQ5K>(row_of, blocks, out); break;
        case K::kQ6K: repack_tile_levels<K::kQ6K>(row_of, blocks, out); break;
      }
      // tables
      for (int c = 0; c < kQTile; ++c) {
        const uint8_t* row = row_of[c];
        for (int64_t g = 0; g < d_groups; ++g) {
          const int64_t at_ = (t * d_groups + g) * kQTile + c;
          const uint8_t* blk = row == nullptr ? nullptr : row + g * ty.bytes;
          if (blk == nullptr) {
            dp[at_] = 0;
            if (mp) mp[at_] = 0;
            continue;
          }
          if (q6) {
            dp[at_] = load_u16(blk + 208);
            continue;
          }
          dp[at_] = load_u16(blk);
          if (q40) {  // m = -8 d, exact in float16 unless 8 d overflows it
            const float m32 = static_cast<float>(c10::Half(dp[at_], c10::Half::from_bits())) * -8.0f;
            const c10::Half mh(m32);
            if (static_cast<float>(mh) != m32) overflow_ = true;
            mp[at_] = mh.x;
          } else if (mp) {
            mp[at_] = load_u16(blk + 2);
          }
        }
        if (!kquant) continue;
        const int64_t sub = q6 ? 16 : 8;  // scales per super-block
        for (int64_t g = 0; g < cols / 256; ++g) {
          const uint8_t* sb = row == nullptr ? nullptr : row + g * ty.bytes;
          for (int s = 0; s < sub; ++s) {
            const int64_t at_ = (t * (cols / 256 * sub) + g * sub + s) * kQTile + c;
            if (sb == nullptr) {
              scp[at_] = 0;
              if (mnp) mnp[at_] = 0;
            } else if (q6) {
              scp[at_] = sb[192 + s];
            } else {
              k_scale_min(sb + 4, s, scp[at_], mnp[at_]);
            }
          }
        }
      }
    }
  }

  std::vector<at::Tensor> outputs() const {
    TORCH_CHECK(!overflow_, "gguf_tiles: Q4_0: a block scale too large to write as Q4_1's offset (-8 d) in float16");
    if (q6_) return {levels_, d_, sc_};
    if (kquant_) return {levels_, d_, m_, sc_, mn_};
    if (m_.defined()) return {levels_, d_, m_};
    return {levels_, d_};
  }

 private:
  GGUFRows src_;
  const GGUFTileType& ty_;
  int64_t cols_, blocks_, tiles_ = 0, d_groups_ = 0;
  bool kquant_ = false, q6_ = false;
  at::Tensor levels_, d_, m_, sc_, mn_;
  std::atomic<bool> overflow_{false};
};

std::vector<at::Tensor> gguf_tiles_of_rows(const GGUFRows& src, const GGUFTileType& ty, int64_t cols) {
  GGUFTileJob job(src, ty, cols);
  at::parallel_for(0, job.tiles(), 1, [&](int64_t t0, int64_t t1) { job.repack(t0, t1); });
  return job.outputs();
}

// Every job's tiles over the pool's threads, each thread taking the next few tiles of any job
// (no barrier between tensors: a static split stalls at every tensor's end whenever one thread is
// off its core, and at a start the process's other threads are busy importing); job_done(j) runs
// on the thread that writes job j's last tiles.
template <typename F>
void repack_gguf_jobs(std::vector<std::unique_ptr<GGUFTileJob>>& jobs, F&& job_done) {
  constexpr int64_t kItemBytes = 64 << 10;  // source bytes per work item: ~10-30 us of repacking
  struct Item {
    size_t job;
    int64_t t0, t1;  // its tiles
  };
  std::vector<Item> items;
  std::unique_ptr<std::atomic<int64_t>[]> left(new std::atomic<int64_t>[jobs.size()]);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const int64_t tiles = jobs[j]->tiles();
    const int64_t step = std::max<int64_t>(1, kItemBytes / (kQTile * jobs[j]->rows().row_bytes));
    left[j] = (tiles + step - 1) / step;
    for (int64_t t = 0; t < tiles; t += step) items.push_back({j, t, std::min(t + step, tiles)});
  }
  std::atomic<size_t> next{0};
  at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) {
    for (size_t i = next++; i < items.size(); i = next++) {
      const Item& item = items[i];
      jobs[item.job]->repack(item.t0, item.t1);
      if (--left[item.job] == 0) job_done(item.job);
    }
  });
}

std::vector<at::Tensor> gguf_tiles(const at::Tensor& raw, const std::string& type, int64_t rows, int64_t cols) {
  const GGUFTileType& ty = gguf_tile_type(type);
  const int64_t row_bytes = gguf_row_bytes(ty, cols);
  TORCH_CHECK(rows > 0, "gguf_tiles: ", type, " [", rows, ", ", cols, "]: rows must be positive");
  TORCH_CHECK(raw.scalar_type() == at::kByte && raw.is_contiguous() && raw.numel() == rows * row_bytes,
              "gguf_tiles: raw must be contiguous uint8 holding ", rows, " x ", row_bytes, " bytes, got ", raw.sizes(),
              " ", raw.scalar_type());
  GGUFRows src;
  src.parts.emplace_back(raw.const_data_ptr<uint8_t>(), rows);
  src.rows = rows;
  src.row_bytes = row_bytes;
  return gguf_tiles_of_rows(src, ty, cols);
}

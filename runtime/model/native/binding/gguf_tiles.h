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

// The 32 levels of 32-value block b of one row (as stored: Q8_0's as int8 bytes), 0 for a
// padding channel (row == nullptr).
template <int Kind>
inline void block_levels(const uint8_t* row, int64_t b, uint8_t lv[32]) {
  constexpr GGUFTileType ty = kGGUFTileTypes[Kind];
  if (row == nullptr) {
    std::memset(lv, 0, 32);
    return;
  }
  using K = GGUFTileType;
  if constexpr (ty.values == 32) {
    const uint8_t* blk = row + b * ty.bytes;
    if constexpr (ty.kind == K::kQ80) {
      std::memcpy(lv, blk + 2, 32);
      return;
    }
    const int64_t qs_at = ty.kind == K::kQ40 ? 2 : ty.kind == K::kQ41 ? 4 : ty.kind == K::kQ50 ? 6 : 8;
    const uint8_t* qs = blk + qs_at;
    for (int i = 0; i < 16; ++i) {
      lv[i] = qs[i] & 0x0F;
      lv[16 + i] = qs[i] >> 4;
    }
    if constexpr (ty.loads == 5) {  // Q5_0 / Q5_1: value i's fifth bit is bit i of a little-endian u32
      const uint8_t* qh = blk + (ty.kind == K::kQ50 ? 2 : 4);
      for (int k = 0; k < 4; ++k) {  // bits of qh byte k -> bit 4 of lv[8 k ..]: each bit to its own byte
        const uint64_t picked = (qh[k] * 0x0101010101010101ull) & 0x8040201008040201ull;  // byte n: bit n or 0
        const uint64_t ones = ((picked + 0x7F7F7F7F7F7F7F7Full) >> 7) & 0x0101010101010101ull;  // no carry out of a byte
        uint64_t v;
        std::memcpy(&v, lv + 8 * k, 8);
        v |= ones << 4;
        std::memcpy(lv + 8 * k, &v, 8);
      }
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
    for (int i = 0; i < 32; ++i) lv[i] = ((ql[i] >> lo_shift) & 0x0F) | (((qh[i] >> hi_shift) & 0x03) << 4);
    return;
  }
  // Q4_K / Q5_K: sub-block 2 g + r is nibble r of bytes 32 g.. of qs; Q5_K's fifth bit of value i is bit s of qh[i]
  const uint8_t* qs = sb + (ty.kind == K::kQ4K ? 16 : 48) + 32 * (s / 2);
  const int shift = 4 * (s & 1);
  for (int i = 0; i < 32; ++i) lv[i] = (qs[i] >> shift) & 0x0F;
  if constexpr (ty.kind == K::kQ5K) {
    const uint8_t* qh = sb + 16;
    for (int i = 0; i < 32; ++i) lv[i] |= ((qh[i] >> s) & 1) << 4;
  }
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Channel c's levels of one block into its tile block (ty.loads x 64 bytes). Every output
// byte 4 c + j gathers values whose index is j mod 4, so each load's 4 bytes are built as one
// 32-bit word from words of 4 consecutive levels: a field shifted by at most 7 - its width stays
// inside its byte.
template <int Kind>
inline void put_levels(const uint8_t lv[32], int c, uint8_t* out) {
  constexpr GGUFTileType ty = kGGUFTileTypes[Kind];
  if constexpr (ty.loads == 8) {
    for (int i = 0; i < 8; ++i) std::memcpy(out + i * 64 + 4 * c, lv + 4 * i, 4);
    return;
  }
  constexpr uint32_t low4 = 0x0F0F0F0Fu;
  for (int i = 0; i < 4; ++i) {
    const uint32_t w = (load_u32(lv + 4 * i) & low4) | ((load_u32(lv + 16 + 4 * i) & low4) << 4);
    std::memcpy(out + i * 64 + 4 * c, &w, 4);
  }
  if constexpr (ty.loads == 5) {  // bit 4 s + i of byte j: the fifth bit of value 16 s + 4 i + j
    uint32_t w = 0;
    for (int s = 0; s < 2; ++s)
      for (int i = 0; i < 4; ++i) w |= ((load_u32(lv + 16 * s + 4 * i) >> 4) & 0x01010101u) << (4 * s + i);
    std::memcpy(out + 4 * 64 + 4 * c, &w, 4);
  } else if constexpr (ty.loads == 6) {  // load 4 + s, bits 2 i of byte j: the high 2 bits of value 16 s + 4 i + j
    for (int s = 0; s < 2; ++s) {
      uint32_t w = 0;
      for (int i = 0; i < 4; ++i) w |= ((load_u32(lv + 16 * s + 4 * i) >> 4) & 0x03030303u) << (2 * i);
      std::memcpy(out + (4 + s) * 64 + 4 * c, &w, 4);
    }
  }
}

// Tile t's levels (16 channels' rows, nullptr for padding) into its tile blocks.
template <int Kind>
void repack_tile_levels(const uint8_t* const row_of[], int64_t blocks, uint8_t* tile_out) {
  constexpr int64_t loads = kGGUFTileTypes[Kind].loads;
  uint8_t lv[32];
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* out = tile_out + b * loads * 64;
    for (int c = 0; c < kQTile; ++c) {
      block_levels<Kind>(row_of[c], b, lv);
      put_levels<Kind>(lv, c, out);
    }
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

std::vector<at::Tensor> gguf_tiles(const at::Tensor& raw, const std::string& type, int64_t rows, int64_t cols) {
  const GGUFTileType* found = nullptr;
  for (const auto& t : kGGUFTileTypes)
    if (type == t.name) found = &t;
  TORCH_CHECK(found != nullptr, "gguf_tiles: no tile layout for GGUF type ", type,
              " (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)");
  const GGUFTileType& ty = *found;
  TORCH_CHECK(rows > 0 && cols > 0 && cols % ty.values == 0, "gguf_tiles: ", type, " [", rows, ", ", cols,
              "]: columns must be a positive multiple of ", ty.values);
  const int64_t row_bytes = cols / ty.values * ty.bytes;
  TORCH_CHECK(raw.scalar_type() == at::kByte && raw.is_contiguous() && raw.numel() == rows * row_bytes,
              "gguf_tiles: raw must be contiguous uint8 holding ", rows, " x ", row_bytes, " bytes, got ", raw.sizes(),
              " ", raw.scalar_type());
  const int64_t tiles = (rows + kQTile - 1) / kQTile, blocks = cols / kQBlock;
  const bool kquant = ty.values == 256, q6 = ty.loads == 6;
  const auto u8 = at::TensorOptions().dtype(at::kByte);
  const auto f16 = at::TensorOptions().dtype(at::kHalf);
  at::Tensor levels = weight_arena().empty({tiles, blocks, ty.loads, 64}, ty.loads == 8 ? u8.dtype(at::kChar) : u8);
  // per-channel tables: [T, groups, 16]
  const int64_t d_groups = kquant ? cols / 256 : blocks;
  at::Tensor d = weight_arena().empty({tiles, d_groups, kQTile}, f16);
  at::Tensor m;  // Q4_0 / Q4_1 / Q5_1's m, K-quants' dmin
  using K = GGUFTileType;
  const bool q40 = ty.kind == K::kQ40;
  if (q40 || ty.kind == K::kQ41 || ty.kind == K::kQ51 || (kquant && !q6)) m = weight_arena().empty({tiles, d_groups, kQTile}, f16);
  at::Tensor sc, mn;  // K-quants' sub-block scales (and Q4_K / Q5_K's mins)
  if (q6) sc = weight_arena().empty({tiles, cols / 16, kQTile}, at::TensorOptions().dtype(at::kChar));
  else if (kquant) {
    sc = weight_arena().empty({tiles, blocks, kQTile}, u8);
    mn = weight_arena().empty({tiles, blocks, kQTile}, u8);
  }
  const uint8_t* src = raw.const_data_ptr<uint8_t>();
  uint8_t* lp = static_cast<uint8_t*>(levels.data_ptr());
  uint16_t* dp = reinterpret_cast<uint16_t*>(d.data_ptr<at::Half>());
  uint16_t* mp = m.defined() ? reinterpret_cast<uint16_t*>(m.data_ptr<at::Half>()) : nullptr;
  uint8_t* scp = sc.defined() ? static_cast<uint8_t*>(sc.data_ptr()) : nullptr;
  uint8_t* mnp = mn.defined() ? mn.data_ptr<uint8_t>() : nullptr;
  std::atomic<bool> overflow{false};
  at::parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const uint8_t* row_of[kQTile];
      for (int c = 0; c < kQTile; ++c) {
        const int64_t r = t * kQTile + c;
        row_of[c] = r < rows ? src + r * row_bytes : nullptr;
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
            if (static_cast<float>(mh) != m32) overflow = true;
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
  });
  TORCH_CHECK(!overflow, "gguf_tiles: Q4_0: a block scale too large to write as Q4_1's offset (-8 d) in float16");
  if (q6) return {levels, d, sc};
  if (kquant) return {levels, d, m, sc, mn};
  if (m.defined()) return {levels, d, m};
  return {levels, d};
}

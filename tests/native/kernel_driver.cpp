// Runs one kernel variant's table on inputs from a file and writes its outputs: how the tests
// check a variant this machine cannot load into torch (the NEON kernels, cross-compiled for
// aarch64 and run under qemu-aarch64; tests/test_native_cross_arch.py writes the inputs and
// holds the outputs to the same references as the x86 variants).
//
//   kernel_driver <op> <input file> <output file>
//
// A file is a run of little-endian arrays in the order given per op below; the input starts with
// an int64 header. Element types: f32, bf16/f16 (uint16 bits), i8, u8, i64.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel_table.h"

namespace {

struct Reader {
  FILE* f;
  template <typename T>
  std::vector<T> read(int64_t n) {
    std::vector<T> v(n);
    if (n > 0 && std::fread(v.data(), sizeof(T), n, f) != static_cast<size_t>(n)) throw std::runtime_error("short input");
    return v;
  }
  std::vector<uint8_t> bytes(int64_t n) { return read<uint8_t>(n); }
};

struct Writer {
  FILE* f;
  template <typename T>
  void write(const std::vector<T>& v) {
    std::fwrite(v.data(), sizeof(T), v.size(), f);
  }
};

int64_t elem_size(int slot) { return slot == SGLC_F32 ? 4 : slot == SGLC_F64 ? 8 : 2; }

// int_linear: header [rows, k, tiles, slot]; x [rows, k] (slot), q4 tiles u8 [tiles, k/32, 256],
// q4 d and m u16 [tiles, k/32, 16], q8 tiles i8 [tiles, k/32, 512], scales f32 [tiles * 16],
// bias [tiles * 16] (slot). Writes y4, y8 [rows, tiles * 16] (slot), q i8 [rows, k], dx, sx f32
// and sq i32 [rows, k/32].
void int_linear(const sglc_kernel_table& t, Reader& in, Writer& out) {
  const auto h = in.read<int64_t>(4);
  const int64_t rows = h[0], k = h[1], tiles = h[2], n = tiles * 16, blocks = k / 32;
  const int slot = static_cast<int>(h[3]);
  const int64_t es = elem_size(slot);
  const auto x = in.bytes(rows * k * es);
  const auto q4 = in.read<uint8_t>(tiles * blocks * 256);
  const auto d = in.read<uint16_t>(tiles * blocks * 16);
  const auto m = in.read<uint16_t>(tiles * blocks * 16);
  const auto q8 = in.read<int8_t>(tiles * blocks * 512);
  const auto scales = in.read<float>(n);
  const auto bias = in.bytes(n * es);
  std::vector<int8_t> q(rows * k);
  std::vector<float> dx(rows * blocks), sx(rows * blocks);
  std::vector<int32_t> sq(rows * blocks), sq16(rows * blocks * 2);
  t.quantize_rows[slot](x.data(), k, rows, k, q.data(), dx.data(), sx.data(), sq.data(), sq16.data());
  const sglc_quantized_rows act{q.data(), dx.data(), sx.data(), sq.data(), sq16.data(), k};
  std::vector<uint8_t> y4(rows * n * es), y8(rows * n * es);
  for (int64_t tile = 0; tile < tiles; ++tile) {
    for (int64_t r0 = 0; r0 < rows; r0 += t.int_rows_per_pass) {
      const int group = static_cast<int>(std::min<int64_t>(t.int_rows_per_pass, rows - r0));
      t.q4_tile[slot](q4.data(), d.data(), m.data(), &act, tile, r0, group, n, bias.data(), y4.data());
      t.q8_tile[slot](q8.data(), scales.data(), &act, tile, r0, group, n, bias.data(), y8.data());
    }
  }
  out.write(y4);
  out.write(y8);
  out.write(q);
  out.write(dx);
  out.write(sx);
  out.write(sq);
}

// gguf_linear: header [rows, k, tiles, slot] (k a multiple of 256); x [rows, k] (slot), q4 tiles
// u8 [tiles, k/32, 256] with Q4_K's d and dmin u16 [tiles, k/256, 16] and sc, mn u8 [tiles,
// k/32, 16], q8 tiles i8 [tiles, k/32, 512] with Q8_0's d u16 [tiles, k/32, 16], q6k tiles u8
// [tiles, k/32, 384] with Q6_K's d u16 [tiles, k/256, 16] and sc i8 [tiles, k/16, 16], bias
// (slot). Writes the Q4_K, Q8_0 and Q6_K products [rows, tiles * 16] (slot).
void gguf_linear(const sglc_kernel_table& t, Reader& in, Writer& out) {
  const auto h = in.read<int64_t>(4);
  const int64_t rows = h[0], k = h[1], tiles = h[2], n = tiles * 16, blocks = k / 32;
  const int slot = static_cast<int>(h[3]);
  const int64_t es = elem_size(slot);
  const auto x = in.bytes(rows * k * es);
  const auto q4 = in.read<uint8_t>(tiles * blocks * 256);
  const auto d = in.read<uint16_t>(tiles * blocks / 8 * 16);
  const auto dmin = in.read<uint16_t>(tiles * blocks / 8 * 16);
  const auto sc = in.read<uint8_t>(tiles * blocks * 16);
  const auto mn = in.read<uint8_t>(tiles * blocks * 16);
  const auto q8 = in.read<int8_t>(tiles * blocks * 512);
  const auto d8 = in.read<uint16_t>(tiles * blocks * 16);
  const auto q6 = in.read<uint8_t>(tiles * blocks * 384);
  const auto d6 = in.read<uint16_t>(tiles * blocks / 8 * 16);
  const auto sc6 = in.read<int8_t>(tiles * blocks * 2 * 16);
  const auto bias = in.bytes(n * es);
  std::vector<int8_t> q(rows * k);
  std::vector<float> dx(rows * blocks), sx(rows * blocks);
  std::vector<int32_t> sq(rows * blocks), sq16(rows * blocks * 2);
  t.quantize_rows[slot](x.data(), k, rows, k, q.data(), dx.data(), sx.data(), sq.data(), sq16.data());
  const sglc_quantized_rows act{q.data(), dx.data(), sx.data(), sq.data(), sq16.data(), k};
  std::vector<uint8_t> y4(rows * n * es), y8(rows * n * es), y6(rows * n * es);
  for (int64_t tile = 0; tile < tiles; ++tile) {
    for (int64_t r0 = 0; r0 < rows; r0 += t.int_rows_per_pass) {
      const int group = static_cast<int>(std::min<int64_t>(t.int_rows_per_pass, rows - r0));
      t.q6k_tile[slot](q6.data(), d6.data(), sc6.data(), &act, tile, r0, group, n, bias.data(), y6.data());
      t.q4k_tile[slot](q4.data(), d.data(), dmin.data(), sc.data(), mn.data(), &act, tile, r0, group, n, bias.data(),
                       y4.data());
      t.q8b_tile[slot](q8.data(), d8.data(), &act, tile, r0, group, n, bias.data(), y8.data());
    }
  }
  out.write(y4);
  out.write(y8);
  out.write(y6);
}

// half_linear: header [rows, k, tiles, slot]; x [rows, k] (slot), bf16 half tiles u16 [tiles, k, 16],
// f16 half tiles u16 [tiles, k, 16], bias (slot). Writes the bf16 and f16 products [rows, tiles * 16]
// (slot), each tile in calls of at most half_rows_per_pass rows, as the binding makes them.
void half_linear(const sglc_kernel_table& t, Reader& in, Writer& out) {
  const auto h = in.read<int64_t>(4);
  const int64_t rows = h[0], k = h[1], tiles = h[2], n = tiles * 16;
  const int slot = static_cast<int>(h[3]);
  const int64_t es = elem_size(slot);
  const auto x = in.bytes(rows * k * es);
  const auto wb = in.read<uint16_t>(tiles * k * 16);
  const auto wh = in.read<uint16_t>(tiles * k * 16);
  const auto bias = in.bytes(n * es);
  const sglc_quantized_rows act{nullptr, nullptr, nullptr, nullptr, nullptr, k, x.data(), k};
  std::vector<uint8_t> yb(rows * n * es), yh(rows * n * es);
  for (int64_t tile = 0; tile < tiles; ++tile) {
    for (int64_t r0 = 0; r0 < rows; r0 += t.half_rows_per_pass) {
      const int group = static_cast<int>(std::min<int64_t>(t.half_rows_per_pass, rows - r0));
      t.bf16w_tile[slot](wb.data(), &act, tile, r0, group, n, bias.data(), yb.data());
      t.f16w_tile[slot](wh.data(), &act, tile, r0, group, n, bias.data(), yh.data());
    }
  }
  out.write(yb);
  out.write(yh);
}

// q5_linear: header [rows, k, tiles, slot] (k a multiple of 256); x [rows, k] (slot), Q5_0 / Q5_1
// q5 tiles u8 [tiles, k/32, 320] with d and m u16 [tiles, k/32, 16], Q5_K q5 tiles u8 [tiles, k/32,
// 320] with d and dmin u16 [tiles, k/256, 16] and sc, mn u8 [tiles, k/32, 16], bias (slot).
// Writes the Q5_0 (the first tiles and d, m NULL), Q5_1 and Q5_K products [rows, tiles * 16] (slot).
void q5_linear(const sglc_kernel_table& t, Reader& in, Writer& out) {
  const auto h = in.read<int64_t>(4);
  const int64_t rows = h[0], k = h[1], tiles = h[2], n = tiles * 16, blocks = k / 32;
  const int slot = static_cast<int>(h[3]);
  const int64_t es = elem_size(slot);
  const auto x = in.bytes(rows * k * es);
  const auto q5 = in.read<uint8_t>(tiles * blocks * 320);
  const auto d = in.read<uint16_t>(tiles * blocks * 16);
  const auto m = in.read<uint16_t>(tiles * blocks * 16);
  const auto q5k = in.read<uint8_t>(tiles * blocks * 320);
  const auto dk = in.read<uint16_t>(tiles * blocks / 8 * 16);
  const auto dmin = in.read<uint16_t>(tiles * blocks / 8 * 16);
  const auto sc = in.read<uint8_t>(tiles * blocks * 16);
  const auto mn = in.read<uint8_t>(tiles * blocks * 16);
  const auto bias = in.bytes(n * es);
  std::vector<int8_t> q(rows * k);
  std::vector<float> dx(rows * blocks), sx(rows * blocks);
  std::vector<int32_t> sq(rows * blocks), sq16(rows * blocks * 2);
  t.quantize_rows[slot](x.data(), k, rows, k, q.data(), dx.data(), sx.data(), sq.data(), sq16.data());
  const sglc_quantized_rows act{q.data(), dx.data(), sx.data(), sq.data(), sq16.data(), k};
  std::vector<uint8_t> y0(rows * n * es), y1(rows * n * es), yk(rows * n * es);
  for (int64_t tile = 0; tile < tiles; ++tile) {
    for (int64_t r0 = 0; r0 < rows; r0 += t.int_rows_per_pass) {
      const int group = static_cast<int>(std::min<int64_t>(t.int_rows_per_pass, rows - r0));
      t.q5_tile[slot](q5.data(), d.data(), nullptr, &act, tile, r0, group, n, bias.data(), y0.data());
      t.q5_tile[slot](q5.data(), d.data(), m.data(), &act, tile, r0, group, n, bias.data(), y1.data());
      t.q5k_tile[slot](q5k.data(), dk.data(), dmin.data(), sc.data(), mn.data(), &act, tile, r0, group, n,
                       bias.data(), yk.data());
    }
  }
  out.write(y0);
  out.write(y1);
  out.write(yk);
}

// attention: header [heads, kv_heads, d, len, num_slots, slot]; q [heads, d], k and v
// [num_slots, kv_heads, d] (slot), slots i64 [len], scale and softcap f32 [2]. Writes m, l f32
// [heads] and the normalised output [heads, d] (slot).
void attention(const sglc_kernel_table& t, Reader& in, Writer& out) {
  const auto h = in.read<int64_t>(6);
  const int64_t heads = h[0], kvh = h[1], d = h[2], len = h[3], num_slots = h[4];
  const int slot = static_cast<int>(h[5]);
  const int64_t es = elem_size(slot);
  const auto q = in.bytes(heads * d * es);
  const auto k = in.bytes(num_slots * kvh * d * es);
  const auto v = in.bytes(num_slots * kvh * d * es);
  const auto slots = in.read<int64_t>(len);
  const auto scale = in.read<float>(2);
  std::vector<float> m(heads), l(heads), acc(heads * d), scratch(sglc_attend_scratch(heads, kvh, d, len));
  t.attend[slot](q.data(), d, k.data(), v.data(), kvh * d, slots.data(), len, heads, heads / kvh, d, scale[0],
                 scale[1], scratch.data(), m.data(), l.data(), acc.data());
  std::vector<uint8_t> o(heads * d * es);
  for (int64_t hh = 0; hh < heads; ++hh) t.write_normalised[slot](acc.data() + hh * d, l[hh], d, o.data() + hh * d * es);
  out.write(m);
  out.write(l);
  out.write(o);
}

// small_ops: header [rows, d, max_pos, slot]; x, delta [rows, d], w [d], gate_up [rows, 2d]
// (slot), positions i64 [rows], cos and sin f32 [max_pos, 64]. Writes rms_norm(x), then h + delta
// and its norm, then x with RoPE on its d / 64 heads, then silu(gate) * up, then gelu_tanh(gate) * up
// (all slot).
void small_ops(const sglc_kernel_table& t, Reader& in, Writer& out) {
  const auto h = in.read<int64_t>(4);
  const int64_t rows = h[0], d = h[1], max_pos = h[2];
  const int slot = static_cast<int>(h[3]);
  const int64_t es = elem_size(slot);
  auto x = in.bytes(rows * d * es);
  const auto delta = in.bytes(rows * d * es);
  const auto w = in.bytes(d * es);
  const auto gate_up = in.bytes(rows * 2 * d * es);
  const auto positions = in.read<int64_t>(rows);
  const auto cos = in.read<float>(max_pos * 64);
  const auto sin = in.read<float>(max_pos * 64);
  std::vector<uint8_t> norm(rows * d * es), hsum = x, hnorm(rows * d * es), silu(rows * d * es), gelu(rows * d * es);
  t.rms_norm[slot](x.data(), d, w.data(), norm.data(), d, rows, d, 1e-5f);
  t.add_rms_norm[slot](hsum.data(), d, delta.data(), d, w.data(), hnorm.data(), d, rows, d, 1e-5f);
  t.rope[slot](x.data(), d, positions.data(), cos.data(), sin.data(), rows, d / 64, 64);
  t.silu_mul[slot](gate_up.data(), 2 * d, silu.data(), d, rows, d);
  t.gelu_tanh_mul[slot](gate_up.data(), 2 * d, gelu.data(), d, rows, d);
  out.write(norm);
  out.write(hsum);
  out.write(hnorm);
  out.write(x);
  out.write(silu);
  out.write(gelu);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s int_linear|gguf_linear|q5_linear|half_linear|attention|small_ops|level <input> <output>\n", argv[0]);
    return 2;
  }
  const sglc_kernel_table& t = *sglc_kernels();
  const std::string op = argv[1];
  if (op == "level") {
    std::printf("%s\n", t.level);
    return 0;
  }
  FILE* fin = std::fopen(argv[2], "rb");
  FILE* fout = std::fopen(argv[3], "wb");
  if (fin == nullptr || fout == nullptr) {
    std::fprintf(stderr, "cannot open %s or %s\n", argv[2], argv[3]);
    return 2;
  }
  Reader in{fin};
  Writer out{fout};
  try {
    if (op == "int_linear") {
      int_linear(t, in, out);
    } else if (op == "gguf_linear") {
      gguf_linear(t, in, out);
    } else if (op == "q5_linear") {
      q5_linear(t, in, out);
    } else if (op == "half_linear") {
      half_linear(t, in, out);
    } else if (op == "attention") {
      attention(t, in, out);
    } else if (op == "small_ops") {
      small_ops(t, in, out);
    } else {
      std::fprintf(stderr, "unknown op %s\n", op.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", op.c_str(), e.what());
    return 1;
  }
  std::fclose(fout);
  std::fclose(fin);
  return 0;
}

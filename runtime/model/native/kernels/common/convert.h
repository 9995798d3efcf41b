// Element types and conversions shared by every variant (no torch: the bits of bf16 and half
// are kept in tagged 16-bit structs so overloads can tell them apart).
//
// NOTE: c10::BFloat16's own float conversion rounds through a NaN branch GCC does not
// vectorise; these are written so the loops around them do.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace sglc {

struct bf16 {
  uint16_t x;
};
struct f16 {
  uint16_t x;
};

inline float to_float(float v) { return v; }
inline float to_float(double v) { return static_cast<float>(v); }
inline float to_float(bf16 v) {
  const uint32_t bits = static_cast<uint32_t>(v.x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// IEEE half <-> float, round to nearest even (as c10::Half and F16C do).
inline float half_bits_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#elif defined(__aarch64__)
  __fp16 v;
  std::memcpy(&v, &h, sizeof(v));
  return static_cast<float>(v);
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
#endif
}

inline uint16_t float_to_half_bits(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, 0);  // NOTE: 0 = round to nearest even
#elif defined(__aarch64__)
  const __fp16 v = static_cast<__fp16>(f);
  uint16_t h;
  std::memcpy(&h, &v, sizeof(h));
  return h;
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u);  // inf / nan
  if (abs >= 0x477FF000u) return sign | 0x7C00u;                                      // overflows to inf
  if (abs < 0x38800000u) {  // subnormal half (or zero): add 0.5 as a float and read the low bits
    float v, magic;
    std::memcpy(&v, &abs, sizeof(v));
    const uint32_t magic_bits = 0x3F000000u;  // 0.5: its ulp is half's smallest subnormal
    std::memcpy(&magic, &magic_bits, sizeof(magic));
    v += magic;
    uint32_t r;
    std::memcpy(&r, &v, sizeof(r));
    return sign | static_cast<uint16_t>(r - magic_bits);
  }
  const uint32_t odd = (abs >> 13) & 1u;
  return sign | static_cast<uint16_t>((abs + 0xC8000FFFu + odd) >> 13);  // rebias exponent, round to even
#endif
}

inline float to_float(f16 v) { return half_bits_to_float(v.x); }

template <typename T>
inline T from_float(float v) {
  return static_cast<T>(v);
}
template <>
inline bf16 from_float<bf16>(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;  // round to nearest even
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return bf16{static_cast<uint16_t>(nan ? 0x7FC0u : rounded)};
}
template <>
inline f16 from_float<f16>(float v) {
  return f16{float_to_half_bits(v)};
}

// exp(x) to ~2 ulp for x in [-87, 88] (Cephes' expf polynomial): std::exp does not vectorise.
// n = round(x / ln 2) by the 1.5 * 2^23 trick (round to nearest even, plain adds): std::floor
// needs SSE4.1 to vectorise, which the generic x86 build lacks.
inline float exp_approx(float x) {
  x = std::min(std::max(x, -87.3f), 88.3f);
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693145751953125f;
  r = r - n * 1.428606765330187045e-06f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
  return p * two_n;
}

}  // namespace sglc

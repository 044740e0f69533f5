// Small float loops of the CPU decode path (cpu_decoder.cc, sampling.cc), written so that the
// compiler vectorises them: fixed-width lane accumulators instead of a serial reduction (float
// addition is not associative, so a plain `s += a[i]` loop stays scalar), and an exp without a
// library call.
//
// FLYWHEEL_VECTOR_CLONES on a function compiles it for AVX-512, AVX2+FMA and baseline x86-64 and
// picks one at load time (GCC target_clones), so the binary runs on any x86-64 and uses the
// widest vectors the machine has. Only functions that are called once per row or per head carry
// it; the helpers below are force-inlined into them.
#ifndef FLYWHEEL_MODEL_VECTOR_MATH_H_
#define FLYWHEEL_MODEL_VECTOR_MATH_H_

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLYWHEEL_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FLYWHEEL_VECTOR_CLONES
#endif
#define FLYWHEEL_INLINE inline __attribute__((always_inline))

namespace flywheel::vmath {

inline constexpr int kLanes = 16;  // accumulators per reduction: one AVX-512 register of floats

// exp(x) in float, within 2 ulp of std::exp over the range used here (Cephes expf: reduction by
// ln 2 split in two constants, degree-6 polynomial, exponent built from bits). exp of x below
// -87.3 returns ~1e-38 instead of 0 (flushed to 0 below -103), which no softmax can tell apart.
FLYWHEEL_INLINE float Exp(float x) {
  x = std::min(x, 88.3762626647949f);
  const bool tiny = x < -103.0f;
  x = std::max(x, -87.3365447505531f);
  const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  const float result = p * std::bit_cast<float>(bits);
  return tiny ? 0.0f : result;
}

// sum_i a[i] * b[i]
FLYWHEEL_INLINE float Dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

FLYWHEEL_INLINE float Sum(const float* __restrict a, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l];
  }
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < n; ++i) s += a[i];
  return s;
}

FLYWHEEL_INLINE float Max(const float* __restrict a, int64_t n) {
  float acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] = std::max(acc[l], a[i + l]);
  }
  float m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = std::max(m, acc[l]);
  for (; i < n; ++i) m = std::max(m, a[i]);
  return m;
}

// The vector helpers are always inlined, so the ABI of passing a 64-byte vector (which GCC warns
// about when a clone has no AVX-512) never applies.
#pragma GCC diagnostic ignored "-Wpsabi"

// GNU vector extensions: 16 floats, lowered to whatever registers the clone targets (one zmm on
// AVX-512, two ymm on AVX2, four xmm on baseline x86-64). Loads and stores are unaligned.
typedef float V16 __attribute__((vector_size(64)));
typedef int32_t V16i __attribute__((vector_size(64)));

FLYWHEEL_INLINE V16 Load(const float* p) {
  V16 v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}
FLYWHEEL_INLINE void Store(float* p, V16 v) { __builtin_memcpy(p, &v, sizeof(v)); }
// A broadcast written as a shuffle of lane 0: inside a function with a target attribute GCC 12
// builds {x, x, …} or x − V16{} lane by lane with masked moves, but a shuffle is one vbroadcastss.
FLYWHEEL_INLINE V16 Broadcast(float x) {
  V16 v{};
  v[0] = x;
  return __builtin_shuffle(v, V16i{});
}
FLYWHEEL_INLINE float HorizontalSum(V16 v) {
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += v[l];
  return s;
}
FLYWHEEL_INLINE float HorizontalMax(V16 v) {
  float m = v[0];
  for (int l = 1; l < kLanes; ++l) m = std::max(m, v[l]);
  return m;
}

// Exp for 16 lanes, the same algorithm as the scalar Exp (rounding to nearest by the 1.5·2²³
// trick instead of floor(t + 0.5): identical except exactly at half-integers).
FLYWHEEL_INLINE V16 Exp(V16 x) {
  const V16i tiny = x < Broadcast(-103.0f);
  x = x < Broadcast(88.3762626647949f) ? x : Broadcast(88.3762626647949f);
  x = x > Broadcast(-87.3365447505531f) ? x : Broadcast(-87.3365447505531f);
  const V16 magic = Broadcast(12582912.0f);
  const V16 n = (x * 1.44269504088896341f + magic) - magic;
  V16 r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  V16 p = Broadcast(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const V16i bits = (__builtin_convertvector(n, V16i) + 127) << 23;
  const V16 result = p * (V16)bits;
  return (V16)((V16i)result & ~tiny);
}

// out[i] = exp(a[i]) (out may be a).
FLYWHEEL_INLINE void ExpInto(const float* a, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Store(out + i, Exp(Load(a + i)));
  for (; i < n; ++i) out[i] = Exp(a[i]);
}

// out[i] = exp(a[i] - shift) (out may be a); returns the sum of out.
FLYWHEEL_INLINE float ExpShifted(const float* a, float shift, float* out, int64_t n) {
  V16 acc{};
  const V16 s = Broadcast(shift);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const V16 e = Exp(Load(a + i) - s);
    Store(out + i, e);
    acc += e;
  }
  float total = HorizontalSum(acc);
  for (; i < n; ++i) total += (out[i] = Exp(a[i] - shift));
  return total;
}

}  // namespace flywheel::vmath

#endif  // FLYWHEEL_MODEL_VECTOR_MATH_H_

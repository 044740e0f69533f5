// The float loops of the CPU decode path (cpu_decoder.cc, sampling.cc), written once on Google
// Highway (hwy/highway.h) and compiled for every x86 / Arm target it knows; the best target the
// CPU supports is picked at the first call (HWY_DYNAMIC_DISPATCH).
//
// Why Highway rather than compiler vectorisation of a fixed-width type: each target gets its own
// vector width (4 floats on SSE4/NEON, 8 on AVX2, 16 on AVX-512), and every kernel sizes its
// register tile from that width, so its accumulators fit the target's register file. A 16-float
// GNU vector type lowered to pairs of ymm registers under AVX2 spilled to the stack in the hot
// loops and made this path slower than LibTorch ops on AVX2 machines.
//
// Every function computes the same formula on every target; only the summation order differs.
// simd_kernels_test.cc checks each target the CPU supports against plain scalar loops, and
// ScopedTarget lets a test or a benchmark run a chosen target.
#ifndef FLYWHEEL_MODEL_SIMD_KERNELS_H_
#define FLYWHEEL_MODEL_SIMD_KERNELS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace flywheel::simd {

// Packed weights of a linear layer (PackedLinear): column blocks of kPackWidth outputs, each
// [k][kPackWidth] contiguous. A multiple of twice every target's vector width.
inline constexpr int64_t kPackWidth = 64;
// Keys are cached in tiles of kKeyTile positions, [capacity / kKeyTile][head_dim][kKeyTile]: the
// scores of a vector of positions are head_dim FMAs over contiguous memory. A multiple of every
// target's vector width.
inline constexpr int64_t kKeyTile = 16;

// y [m, n] (+)= x [m, k] · Wᵀ, W packed as above (`packed` holds ceil(n / kPackWidth) blocks).
void Linear(const float* x, int64_t m, const float* packed, int64_t n, int64_t k, float* y,
            bool accumulate);

// out = x / sqrt(mean(x²) + eps) * weight, per row of `dim` floats (HF Llama RMSNorm).
void RmsNormRows(const float* x, int64_t rows, int64_t dim, const float* weight, float eps,
                 float* out);

// SwiGLU: out[r, i] = silu(gate[r, i]) * up[r, i], gate_up [rows, 2 * width].
void SiluMul(const float* gate_up, int64_t rows, int64_t width, float* out);

// Rotary embedding in place on `heads` heads of `dim` floats ("rotate half", HF Llama):
// x·cos + rotate_half(x)·sin, cos/sin of the row's position [dim].
void Rope(float* x, int64_t heads, int64_t dim, const float* cos, const float* sin);

// Attention of `groups` query heads (q [groups, dim]) that share one kv head, over positions
// [0, length) of the tiled keys (see kKeyTile) and the values [capacity, dim]; out [groups, dim].
// `scores` holds groups × round_up(length, kKeyTile) floats. next_keys / next_values: the kv
// head attended next, fetched into the cache meanwhile (same layout; may equal keys / values).
void AttendHead(const float* q, int64_t groups, int64_t dim, const float* keys, const float* values,
                const float* next_keys, const float* next_values, int64_t length, float scale,
                float* scores, float* out);

// max_i a[i] (−inf for n = 0).
float Max(const float* a, int64_t n);
// out[i] = exp(a[i] − shift) (out may be a); returns Σ out[i].
float ExpShifted(const float* a, float shift, float* out, int64_t n);
// out[i] = a[i] / divisor (out may be a).
void Divide(const float* a, float divisor, float* out, int64_t n);

// exp(x) in float, within 2 ulp of std::exp over the range used here (Cephes expf: reduction by
// ln 2 split in two constants, degree-6 polynomial, exponent built from bits); the same
// algorithm as the vector kernels. exp below −87.3 gives ~1e-38 instead of 0 (0 below −103),
// which no softmax can tell apart.
float Exp(float x);

// Targets compiled into this binary that this CPU supports, best first (Highway's HWY_* bits).
std::vector<int64_t> SupportedTargets();
// The target the kernels dispatch to now.
int64_t CurrentTarget();
// Highway's name: "AVX3" (AVX-512 F/VL/DQ/BW), "AVX2" (with FMA), "SSE4", "NEON", "EMU128"
// (portable C++ on 128-bit arrays, no intrinsics), …
std::string TargetName(int64_t target);
// Targets compiled into this binary (whether or not this CPU runs them), best first, as names.
std::vector<std::string> CompiledTargetNames();

// While alive, every kernel runs `target` (one of SupportedTargets()). Process-wide and not
// thread-safe: for tests and benchmarks, with no kernel running on another thread.
class ScopedTarget {
 public:
  explicit ScopedTarget(int64_t target);
  ~ScopedTarget();
  ScopedTarget(const ScopedTarget&) = delete;
  ScopedTarget& operator=(const ScopedTarget&) = delete;
};

}  // namespace flywheel::simd

#endif  // FLYWHEEL_MODEL_SIMD_KERNELS_H_

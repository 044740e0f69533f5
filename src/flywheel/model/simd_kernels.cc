// Highway's multiple-target compilation: foreach_target.h includes this file once per target,
// each time with HWY_NAMESPACE set to that target's namespace (N_AVX2, N_SSE4, …); code outside
// HWY_NAMESPACE is compiled once (HWY_ONCE).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "flywheel/model/simd_kernels.cc"
#include "flywheel/model/simd_kernels.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace flywheel::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// A vector version of simd::Exp (the scalar one below, same constants). Rounding to nearest by
// adding and subtracting 1.5·2²³ instead of floor(t + 0.5): identical except exactly at
// half-integers.
HWY_INLINE V VecExp(D d, V x) {
  const hn::RebindToSigned<D> di;
  const auto tiny = hn::Lt(x, hn::Set(d, -103.0f));
  x = hn::Min(x, hn::Set(d, 88.3762626647949f));
  x = hn::Max(x, hn::Set(d, -87.3365447505531f));
  const V magic = hn::Set(d, 12582912.0f);
  const V n = hn::Sub(hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), magic), magic);
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  V p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::Add(hn::MulAdd(hn::Mul(p, r), r, r), hn::Set(d, 1.0f));
  const auto bits = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::IfThenZeroElse(tiny, hn::Mul(p, hn::BitCast(d, bits)));
}

// ---------------------------------------------------------------------------------------------
// Linear: register tiles of kR rows × 2 vectors of outputs. With 8-float vectors (AVX2) that is
// 2·kR accumulators, 2 weight vectors and 1 broadcast: kR = 4 uses 11 of the 16 ymm registers,
// so nothing spills; every weight vector loaded serves kR rows, every x value broadcast serves
// two vectors. On AVX-512 the same tile is 32 outputs wide.

template <int kR>
HWY_INLINE void LinearTile(D d, const float* HWY_RESTRICT x, int64_t k, const float* HWY_RESTRICT w,
                           float* HWY_RESTRICT y, int64_t ldy, int64_t width, bool accumulate) {
  const size_t N = hn::Lanes(d);
  V acc0[kR], acc1[kR];
  for (int r = 0; r < kR; ++r) acc0[r] = acc1[r] = hn::Zero(d);
  for (int64_t i = 0; i < k; ++i) {
    const V w0 = hn::LoadU(d, w + i * kPackWidth);
    const V w1 = hn::LoadU(d, w + i * kPackWidth + N);
    for (int r = 0; r < kR; ++r) {
      const V xr = hn::Set(d, x[r * k + i]);
      acc0[r] = hn::MulAdd(xr, w0, acc0[r]);
      acc1[r] = hn::MulAdd(xr, w1, acc1[r]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    float* yr = y + r * ldy;
    if (width == static_cast<int64_t>(2 * N)) {
      if (accumulate) {
        acc0[r] = hn::Add(acc0[r], hn::LoadU(d, yr));
        acc1[r] = hn::Add(acc1[r], hn::LoadU(d, yr + N));
      }
      hn::StoreU(acc0[r], d, yr);
      hn::StoreU(acc1[r], d, yr + N);
    } else {  // the last, partial columns of the matrix
      float tmp[2 * kPackWidth];
      hn::StoreU(acc0[r], d, tmp);
      hn::StoreU(acc1[r], d, tmp + N);
      for (int64_t j = 0; j < width; ++j) yr[j] = (accumulate ? yr[j] : 0.0f) + tmp[j];
    }
  }
}

void LinearImpl(const float* x, int64_t m, const float* packed, int64_t n, int64_t k, float* y,
                bool accumulate) {
  const D d;
  const int64_t cols = static_cast<int64_t>(2 * hn::Lanes(d));  // divides kPackWidth
  // Column tiles outermost: a tile's weights (k × cols floats) stay in L1 while every row tile
  // passes over them.
  for (int64_t col = 0; col < n; col += cols) {
    const float* w = packed + (col / kPackWidth) * k * kPackWidth + col % kPackWidth;
    const int64_t width = std::min(cols, n - col);
    float* yc = y + col;
    int64_t r = 0;
    for (; r + 4 <= m; r += 4) LinearTile<4>(d, x + r * k, k, w, yc + r * n, n, width, accumulate);
    switch (m - r) {
      case 3:
        LinearTile<3>(d, x + r * k, k, w, yc + r * n, n, width, accumulate);
        break;
      case 2:
        LinearTile<2>(d, x + r * k, k, w, yc + r * n, n, width, accumulate);
        break;
      case 1:
        LinearTile<1>(d, x + r * k, k, w, yc + r * n, n, width, accumulate);
        break;
      default:
        break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Row-wise element loops.

HWY_INLINE float SumOfSquares(D d, const float* HWY_RESTRICT x, int64_t n) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  V a0 = hn::Zero(d), a1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const V x0 = hn::LoadU(d, x + i), x1 = hn::LoadU(d, x + i + N);
    a0 = hn::MulAdd(x0, x0, a0);
    a1 = hn::MulAdd(x1, x1, a1);
  }
  for (; i + N <= n; i += N) {
    const V x0 = hn::LoadU(d, x + i);
    a0 = hn::MulAdd(x0, x0, a0);
  }
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

void RmsNormRowsImpl(const float* HWY_RESTRICT x, int64_t rows, int64_t dim,
                     const float* HWY_RESTRICT weight, float eps, float* HWY_RESTRICT out) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    const float mean = SumOfSquares(d, xr, dim) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(mean + eps);
    const V inv_v = hn::Set(d, inv);
    int64_t i = 0;
    for (; i + N <= dim; i += N) {
      hn::StoreU(hn::Mul(hn::LoadU(d, weight + i), hn::Mul(hn::LoadU(d, xr + i), inv_v)), d, o + i);
    }
    for (; i < dim; ++i) o[i] = weight[i] * (xr[i] * inv);
  }
}

void SiluMulImpl(const float* HWY_RESTRICT gate_up, int64_t rows, int64_t width,
                 float* HWY_RESTRICT out) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const V one = hn::Set(d, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * width;
    const float* u = g + width;
    float* o = out + r * width;
    int64_t i = 0;
    for (; i + N <= width; i += N) {
      const V x = hn::LoadU(d, g + i);
      const V silu = hn::Div(x, hn::Add(one, VecExp(d, hn::Neg(x))));
      hn::StoreU(hn::Mul(silu, hn::LoadU(d, u + i)), d, o + i);
    }
    for (; i < width; ++i) o[i] = g[i] / (1.0f + Exp(-g[i])) * u[i];
  }
}

void RopeImpl(float* HWY_RESTRICT x, int64_t heads, int64_t dim, const float* HWY_RESTRICT cos,
              const float* HWY_RESTRICT sin) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t half = dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * dim;
    int64_t i = 0;
    for (; i + N <= half; i += N) {
      const V a = hn::LoadU(d, v + i), b = hn::LoadU(d, v + i + half);
      hn::StoreU(hn::Sub(hn::Mul(a, hn::LoadU(d, cos + i)), hn::Mul(b, hn::LoadU(d, sin + i))), d,
                 v + i);
      hn::StoreU(hn::Add(hn::Mul(b, hn::LoadU(d, cos + i + half)),
                         hn::Mul(a, hn::LoadU(d, sin + i + half))),
                 d, v + i + half);
    }
    for (; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cos[i] - b * sin[i];
      v[i + half] = b * cos[i + half] + a * sin[i + half];
    }
  }
}

float MaxImpl(const float* HWY_RESTRICT a, int64_t n) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  V m = hn::Set(d, kMinusInf);
  int64_t i = 0;
  for (; i + N <= n; i += N) m = hn::Max(m, hn::LoadU(d, a + i));
  float s = hn::GetLane(hn::MaxOfLanes(d, m));
  for (; i < n; ++i) s = std::max(s, a[i]);
  return s;
}

float ExpShiftedImpl(const float* a, float shift, float* out, int64_t n) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const V s = hn::Set(d, shift);
  V acc = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const V e = VecExp(d, hn::Sub(hn::LoadU(d, a + i), s));
    hn::StoreU(e, d, out + i);
    acc = hn::Add(acc, e);
  }
  float total = hn::GetLane(hn::SumOfLanes(d, acc));
  for (; i < n; ++i) total += (out[i] = Exp(a[i] - shift));
  return total;
}

void DivideImpl(const float* a, float divisor, float* out, int64_t n) {
  const D d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const V v = hn::Set(d, divisor);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Div(hn::LoadU(d, a + i), v), d, out + i);
  for (; i < n; ++i) out[i] = a[i] / divisor;
}

// ---------------------------------------------------------------------------------------------
// Attention of kG query heads sharing one kv head. Register budget per step, as for Linear: at
// most 8 vector accumulators (kG × kP score vectors, kG × kC output vectors), so that with the
// loads and broadcasts they fit 16 registers.
//
// The cache is far larger than the L2, and every step reads all of it once. While one (row, kv
// head) is attended, the loops fetch the next one's keys and values at the same offsets: a whole
// head's work ahead, spread evenly over the loops. The fetches go to L2 (prefetcht1): measured
// faster than to L1, which they would crowd while the current head streams through.

// Position p of the tiled keys at dimension 0.
HWY_INLINE const float* KeyAt(const float* keys, int64_t dim, int64_t p) {
  return keys + (p / kKeyTile) * kKeyTile * dim + p % kKeyTile;
}

// Scores of kG heads for kP vectors of positions starting at `first` (a multiple of the vector
// width): kG·kP independent FMA chains over the head dimension, no stores in the inner loop.
template <int kG, int kP>
HWY_INLINE void ScoreBlock(D d, const float* HWY_RESTRICT q, int64_t dim,
                           const float* HWY_RESTRICT keys, const float* next_keys, int64_t first,
                           float scale, float* HWY_RESTRICT scores, int64_t stride) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  V acc[kG][kP];
  const float* k[kP];
  for (int p = 0; p < kP; ++p) {
    k[p] = KeyAt(keys, dim, first + p * N);
    for (int g = 0; g < kG; ++g) acc[g][p] = hn::Zero(d);
  }
  // The next head's keys at the same positions: kP·N·dim floats, a slice per dimension.
  const int64_t slice = kP * N * static_cast<int64_t>(sizeof(float));
  const char* next = reinterpret_cast<const char*>(KeyAt(next_keys, dim, first));
  for (int64_t j = 0; j < dim; ++j) {
    for (int64_t off = 0; off < slice; off += 64) __builtin_prefetch(next + j * slice + off, 0, 2);
    V kv[kP];
    for (int p = 0; p < kP; ++p) kv[p] = hn::LoadU(d, k[p] + j * kKeyTile);
    for (int g = 0; g < kG; ++g) {
      const V qj = hn::Set(d, q[g * dim + j]);
      for (int p = 0; p < kP; ++p) acc[g][p] = hn::MulAdd(qj, kv[p], acc[g][p]);
    }
  }
  const V scale_v = hn::Set(d, scale);
  for (int g = 0; g < kG; ++g) {
    for (int p = 0; p < kP; ++p) {
      hn::StoreU(hn::Mul(acc[g][p], scale_v), d, scores + g * stride + first + p * N);
    }
  }
}

// In place over one head's padded scores: exp(s − max); returns 1 / Σ. Positions from `length`
// on are set to −inf first, so they weigh 0.
HWY_INLINE float SoftmaxUnnormalised(D d, float* HWY_RESTRICT s, int64_t length, int64_t padded) {
  for (int64_t i = length; i < padded; ++i) s[i] = kMinusInf;
  const float m = MaxImpl(s, padded);
  return 1.0f / ExpShiftedImpl(s, m, s, padded);
}

// out[g, c·N .. (c + kC)·N) = Σ_i p[g, i] · v[i, …] for kC vectors of the head dimension; kU
// positions per iteration into separate accumulators when there are few chains.
template <int kG, int kC>
HWY_INLINE void WeightedValues(D d, const float* HWY_RESTRICT probs, int64_t stride,
                               const float* HWY_RESTRICT v, int64_t dim, int64_t c0,
                               const float* next_values, bool fetch, int64_t length,
                               const float* inv, float* HWY_RESTRICT out) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  constexpr int kU = kG * kC <= 4 ? 2 : 1;
  V acc[kU][kG][kC];
  for (int u = 0; u < kU; ++u) {
    for (int g = 0; g < kG; ++g) {
      for (int c = 0; c < kC; ++c) acc[u][g][c] = hn::Zero(d);
    }
  }
  const int64_t row_bytes = dim * static_cast<int64_t>(sizeof(float));
  const char* next = reinterpret_cast<const char*>(next_values);
  int64_t i = 0;
  for (; i + kU <= length; i += kU) {
    if (fetch) {  // the next head's values at these positions (once per head)
      for (int64_t off = 0; off < kU * row_bytes; off += 64) {
        __builtin_prefetch(next + i * row_bytes + off, 0, 2);
      }
    }
    for (int u = 0; u < kU; ++u) {
      V vv[kC];
      for (int c = 0; c < kC; ++c) vv[c] = hn::LoadU(d, v + (i + u) * dim + c0 + c * N);
      for (int g = 0; g < kG; ++g) {
        const V p = hn::Set(d, probs[g * stride + i + u]);
        for (int c = 0; c < kC; ++c) acc[u][g][c] = hn::MulAdd(p, vv[c], acc[u][g][c]);
      }
    }
  }
  for (; i < length; ++i) {
    for (int g = 0; g < kG; ++g) {
      const V p = hn::Set(d, probs[g * stride + i]);
      for (int c = 0; c < kC; ++c) {
        acc[0][g][c] = hn::MulAdd(p, hn::LoadU(d, v + i * dim + c0 + c * N), acc[0][g][c]);
      }
    }
  }
  for (int g = 0; g < kG; ++g) {
    const V inv_v = hn::Set(d, inv[g]);
    for (int c = 0; c < kC; ++c) {
      V total = acc[0][g][c];
      for (int u = 1; u < kU; ++u) total = hn::Add(total, acc[u][g][c]);
      hn::StoreU(hn::Mul(total, inv_v), d, out + g * dim + c0 + c * N);
    }
  }
}

// WeightedValues over the head dimension from vector c on: chunks of kC vectors, then of kC / 2,
// …, so that a head dimension narrower than the widest chunk still gets several FMA chains.
template <int kG, int kC>
HWY_INLINE void WeightedValuesFrom(D d, const float* probs, int64_t stride, const float* v,
                                   int64_t dim, const float* next_values, int64_t length,
                                   const float* inv, float* out, int64_t c) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (; (c + kC) * N <= dim; c += kC) {
    WeightedValues<kG, kC>(d, probs, stride, v, dim, c * N, next_values, c == 0, length, inv, out);
  }
  if constexpr (kC > 1) {
    WeightedValuesFrom<kG, kC / 2>(d, probs, stride, v, dim, next_values, length, inv, out, c);
  }
}

// kG heads (q [kG, dim]); dim a multiple of the vector width.
template <int kG>
HWY_INLINE void AttendGroup(D d, const float* q, int64_t dim, const float* keys, const float* v,
                            const float* next_keys, const float* next_values, int64_t length,
                            float scale, float* scores, float* out) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  constexpr int kP = 8 / kG;
  const int64_t padded = (length + kKeyTile - 1) / kKeyTile * kKeyTile;
  int64_t first = 0;
  for (; first + kP * N <= padded; first += kP * N) {
    ScoreBlock<kG, kP>(d, q, dim, keys, next_keys, first, scale, scores, padded);
  }
  for (; first < padded; first += N) {
    ScoreBlock<kG, 1>(d, q, dim, keys, next_keys, first, scale, scores, padded);
  }
  float inv[kG];
  for (int g = 0; g < kG; ++g) inv[g] = SoftmaxUnnormalised(d, scores + g * padded, length, padded);
  WeightedValuesFrom<kG, 8 / kG>(d, scores, padded, v, dim, next_values, length, inv, out, 0);
}

// Any dim: plain loops (head dims that are not a multiple of the vector width, e.g. tests').
void AttendScalar(const float* HWY_RESTRICT q, int64_t groups, int64_t dim,
                  const float* HWY_RESTRICT keys, const float* HWY_RESTRICT v, int64_t length,
                  float scale, float* HWY_RESTRICT scores, float* HWY_RESTRICT out) {
  for (int64_t g = 0; g < groups; ++g) {
    float* s = scores + g * length;
    const float* qg = q + g * dim;
    for (int64_t j = 0; j < length; ++j) {
      const float* k = KeyAt(keys, dim, j);
      float dot = 0;
      for (int64_t i = 0; i < dim; ++i) dot += qg[i] * k[i * kKeyTile];
      s[j] = dot * scale;
    }
    const float m = MaxImpl(s, length);
    const float inv = 1.0f / ExpShiftedImpl(s, m, s, length);
    float* o = out + g * dim;
    std::fill(o, o + dim, 0.0f);
    for (int64_t j = 0; j < length; ++j) {
      for (int64_t i = 0; i < dim; ++i) o[i] += s[j] * v[j * dim + i];
    }
    for (int64_t i = 0; i < dim; ++i) o[i] *= inv;
  }
}

void AttendHeadImpl(const float* q, int64_t groups, int64_t dim, const float* keys, const float* v,
                    const float* next_keys, const float* next_values, int64_t length, float scale,
                    float* scores, float* out) {
  const D d;
  if (dim % static_cast<int64_t>(hn::Lanes(d)) != 0) {
    return AttendScalar(q, groups, dim, keys, v, length, scale, scores, out);
  }
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    AttendGroup<2>(d, q + g * dim, dim, keys, v, next_keys, next_values, length, scale, scores,
                   out + g * dim);
  }
  if (g < groups) {
    AttendGroup<1>(d, q + g * dim, dim, keys, v, next_keys, next_values, length, scale, scores,
                   out + g * dim);
  }
}

int64_t TargetImpl() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace flywheel::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flywheel::simd {

HWY_EXPORT(LinearImpl);
HWY_EXPORT(RmsNormRowsImpl);
HWY_EXPORT(SiluMulImpl);
HWY_EXPORT(RopeImpl);
HWY_EXPORT(AttendHeadImpl);
HWY_EXPORT(MaxImpl);
HWY_EXPORT(ExpShiftedImpl);
HWY_EXPORT(DivideImpl);
HWY_EXPORT(TargetImpl);

void Linear(const float* x, int64_t m, const float* packed, int64_t n, int64_t k, float* y,
            bool accumulate) {
  HWY_DYNAMIC_DISPATCH(LinearImpl)(x, m, packed, n, k, y, accumulate);
}

void RmsNormRows(const float* x, int64_t rows, int64_t dim, const float* weight, float eps,
                 float* out) {
  HWY_DYNAMIC_DISPATCH(RmsNormRowsImpl)(x, rows, dim, weight, eps, out);
}

void SiluMul(const float* gate_up, int64_t rows, int64_t width, float* out) {
  HWY_DYNAMIC_DISPATCH(SiluMulImpl)(gate_up, rows, width, out);
}

void Rope(float* x, int64_t heads, int64_t dim, const float* cos, const float* sin) {
  HWY_DYNAMIC_DISPATCH(RopeImpl)(x, heads, dim, cos, sin);
}

void AttendHead(const float* q, int64_t groups, int64_t dim, const float* keys, const float* values,
                const float* next_keys, const float* next_values, int64_t length, float scale,
                float* scores, float* out) {
  HWY_DYNAMIC_DISPATCH(AttendHeadImpl)
  (q, groups, dim, keys, values, next_keys, next_values, length, scale, scores, out);
}

float Max(const float* a, int64_t n) { return HWY_DYNAMIC_DISPATCH(MaxImpl)(a, n); }

float ExpShifted(const float* a, float shift, float* out, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(ExpShiftedImpl)(a, shift, out, n);
}

void Divide(const float* a, float divisor, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(DivideImpl)(a, divisor, out, n);
}

std::vector<int64_t> SupportedTargets() { return hwy::SupportedAndGeneratedTargets(); }

int64_t CurrentTarget() { return HWY_DYNAMIC_DISPATCH(TargetImpl)(); }

std::string TargetName(int64_t target) { return hwy::TargetName(target); }

std::vector<std::string> CompiledTargetNames() {
  std::vector<std::string> names;
  for (int64_t t = HWY_TARGETS; t != 0; t &= t - 1) names.push_back(TargetName(t & -t));
  return names;
}

ScopedTarget::ScopedTarget(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
ScopedTarget::~ScopedTarget() { hwy::SetSupportedTargetsForTest(0); }

float Exp(float x) {
  x = std::min(x, 88.3762626647949f);
  const bool tiny = x < -103.0f;
  x = std::max(x, -87.3365447505531f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return tiny ? 0.0f : p * scale;
}

}  // namespace flywheel::simd
#endif  // HWY_ONCE

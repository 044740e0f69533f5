#include "flywheel/model/simd_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace flywheel::simd {
namespace {

// Plain scalar loops: the definition every target must reproduce up to summation order.
namespace reference {

void Linear(const std::vector<float>& x, int64_t m, const std::vector<float>& w, int64_t n,
            int64_t k, std::vector<float>& y, bool accumulate) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t i = 0; i < k; ++i) s += double{x[r * k + i]} * w[j * k + i];
      y[r * n + j] = static_cast<float>((accumulate ? y[r * n + j] : 0.0) + s);
    }
  }
}

// q [groups, dim]; keys and values [length, dim] (not tiled).
std::vector<float> Attend(const std::vector<float>& q, int64_t groups, int64_t dim,
                          const std::vector<float>& keys, const std::vector<float>& values,
                          int64_t length, float scale) {
  std::vector<float> out(groups * dim, 0.0f);
  for (int64_t g = 0; g < groups; ++g) {
    std::vector<double> s(length);
    double m = -INFINITY, total = 0;
    for (int64_t j = 0; j < length; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < dim; ++i) dot += double{q[g * dim + i]} * keys[j * dim + i];
      s[j] = dot * scale;
      m = std::max(m, s[j]);
    }
    for (double& x : s) total += (x = std::exp(x - m));
    for (int64_t i = 0; i < dim; ++i) {
      double o = 0;
      for (int64_t j = 0; j < length; ++j) o += s[j] * values[j * dim + i];
      out[g * dim + i] = static_cast<float>(o / total);
    }
  }
  return out;
}

}  // namespace reference

std::vector<float> Random(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// W [n, k] in the packed layout of PackedLinear.
std::vector<float> Pack(const std::vector<float>& w, int64_t n, int64_t k) {
  const int64_t blocks = (n + kPackWidth - 1) / kPackWidth;
  std::vector<float> packed(blocks * k * kPackWidth, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < k; ++i) {
      packed[(j / kPackWidth) * k * kPackWidth + i * kPackWidth + j % kPackWidth] = w[j * k + i];
    }
  }
  return packed;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, float tolerance,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * (1.0f + std::abs(want[i]))) << what << " at " << i;
  }
}

// Runs `body` once per target this CPU supports, with the kernels forced to that target.
template <typename F>
void ForEachTarget(F body) {
  const std::vector<int64_t> targets = SupportedTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t target : targets) {
    ScopedTarget scoped(target);
    SCOPED_TRACE(TargetName(target));
    ASSERT_EQ(CurrentTarget(), target);
    body();
  }
}

TEST(SimdKernelsTest, EveryTargetIsReportedAndTheBestIsTheDefault) {
  const std::vector<int64_t> targets = SupportedTargets();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(CurrentTarget(), targets.front());
  EXPECT_FALSE(CompiledTargetNames().empty());
  {
    ScopedTarget scoped(targets.back());
    EXPECT_EQ(CurrentTarget(), targets.back());
  }
  EXPECT_EQ(CurrentTarget(), targets.front());  // restored
}

TEST(SimdKernelsTest, LinearMatchesTheScalarProduct) {
  ForEachTarget([] {
    std::mt19937 rng(1);
    // Row counts around the 4-row tile, widths with partial blocks and partial tiles.
    for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
             {1, 64, 32}, {3, 70, 17}, {4, 128, 128}, {5, 9, 40}, {32, 344, 128}, {7, 200, 3}}) {
      for (bool accumulate : {false, true}) {
        const auto x = Random(m * k, rng), w = Random(n * k, rng);
        auto want = Random(m * n, rng);
        auto got = want;
        reference::Linear(x, m, w, n, k, want, accumulate);
        Linear(x.data(), m, Pack(w, n, k).data(), n, k, got.data(), accumulate);
        ExpectNear(got, want, 1e-5f,
                   ::testing::PrintToString(std::make_tuple(m, n, k, accumulate)));
      }
    }
  });
}

TEST(SimdKernelsTest, RowKernelsMatchTheirFormulas) {
  ForEachTarget([] {
    std::mt19937 rng(2);
    for (int64_t dim : {1, 7, 32, 36, 128}) {
      const int64_t rows = 3;
      const auto x = Random(rows * dim, rng), weight = Random(dim, rng);
      std::vector<float> got(rows * dim), want(rows * dim);
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i) ss += double{x[r * dim + i]} * x[r * dim + i];
        const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
        for (int64_t i = 0; i < dim; ++i) {
          want[r * dim + i] = static_cast<float>(weight[i] * (x[r * dim + i] * inv));
        }
      }
      RmsNormRows(x.data(), rows, dim, weight.data(), 1e-6f, got.data());
      ExpectNear(got, want, 1e-5f, "rmsnorm dim " + std::to_string(dim));

      const auto gate_up = Random(rows * 2 * dim, rng, 3.0f);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < dim; ++i) {
          const double g = gate_up[r * 2 * dim + i], u = gate_up[r * 2 * dim + dim + i];
          want[r * dim + i] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
        }
      }
      SiluMul(gate_up.data(), rows, dim, got.data());
      ExpectNear(got, want, 1e-5f, "silu dim " + std::to_string(dim));
    }
    for (int64_t dim : {8, 18, 32, 64, 128}) {
      const int64_t heads = 3;
      const auto x = Random(heads * dim, rng), angle = Random(dim, rng, 2.0f);
      std::vector<float> cos(dim), sin(dim);
      for (int64_t i = 0; i < dim; ++i) cos[i] = std::cos(angle[i]), sin[i] = std::sin(angle[i]);
      std::vector<float> want(x.size()), got = x;
      const int64_t half = dim / 2;
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
          const float a = x[h * dim + i], b = x[h * dim + i + half];
          want[h * dim + i] = a * cos[i] - b * sin[i];
          want[h * dim + i + half] = b * cos[i + half] + a * sin[i + half];
        }
      }
      Rope(got.data(), heads, dim, cos.data(), sin.data());
      ExpectNear(got, want, 1e-6f, "rope dim " + std::to_string(dim));
    }
  });
}

TEST(SimdKernelsTest, SoftmaxPiecesMatchTheirFormulas) {
  ForEachTarget([] {
    std::mt19937 rng(3);
    for (int64_t n : {1, 5, 16, 17, 512, 1000}) {
      auto a = Random(n, rng, 10.0f);
      if (n > 1) a[n / 2] = -INFINITY;  // a masked logit (never all of them: max would be −inf)
      float want_max = -INFINITY;
      for (float x : a) want_max = std::max(want_max, x);
      EXPECT_EQ(Max(a.data(), n), want_max);
      std::vector<float> got(n), want(n);
      double total = 0;
      for (int64_t i = 0; i < n; ++i) total += (want[i] = std::exp(a[i] - want_max));
      const float got_total = ExpShifted(a.data(), want_max, got.data(), n);
      ExpectNear(got, want, 2e-6f, "exp n " + std::to_string(n));
      EXPECT_NEAR(got_total, total, 1e-5 * total);
      if (n > 1) EXPECT_EQ(got[n / 2], 0.0f);
      Divide(a.data(), 0.7f, got.data(), n);
      for (int64_t i = 0; i < n; ++i) want[i] = a[i] / 0.7f;
      EXPECT_EQ(got, want);  // a division is exact on every target
    }
    EXPECT_EQ(Max(nullptr, 0), -INFINITY);
  });
}

TEST(SimdKernelsTest, AttendHeadMatchesSoftmaxAttention) {
  ForEachTarget([] {
    std::mt19937 rng(4);
    // head dims of the vector path and an odd one (plain loops); lengths around the key tile.
    for (int64_t dim : {32, 64, 128, 18}) {
      for (int64_t groups : {1, 2, 3}) {
        for (int64_t length : {1, 15, 16, 17, 100}) {
          const int64_t capacity = (length + kKeyTile - 1) / kKeyTile * kKeyTile;
          const auto q = Random(groups * dim, rng), keys = Random(length * dim, rng, 2.0f),
                     values = Random(capacity * dim, rng);
          // Tiled keys; positions past `length` hold garbage that must not leak in.
          std::vector<float> tiled = Random(capacity * dim, rng, 100.0f);
          for (int64_t j = 0; j < length; ++j) {
            for (int64_t i = 0; i < dim; ++i) {
              tiled[(j / kKeyTile) * kKeyTile * dim + i * kKeyTile + j % kKeyTile] =
                  keys[j * dim + i];
            }
          }
          const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
          std::vector<float> scores(groups * capacity), got(groups * dim);
          AttendHead(q.data(), groups, dim, tiled.data(), values.data(), tiled.data(),
                     values.data(), length, scale, scores.data(), got.data());
          ExpectNear(got, reference::Attend(q, groups, dim, keys, values, length, scale), 1e-5f,
                     ::testing::PrintToString(std::make_tuple(dim, groups, length)));
        }
      }
    }
  });
}

TEST(SimdKernelsTest, ScalarExpIsCloseToStdExp) {
  for (float x : {-120.0f, -90.0f, -20.0f, -1.5f, 0.0f, 0.3f, 10.0f, 88.0f}) {
    EXPECT_NEAR(Exp(x), std::exp(x), 3e-7f * std::exp(x) + 1e-37f) << x;
  }
  EXPECT_EQ(Exp(-INFINITY), 0.0f);
}

}  // namespace
}  // namespace flywheel::simd

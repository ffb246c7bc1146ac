// The vectorised exp / max / shifted-exp-sum of kernels/vec_math.h against std:: functions in double.
#include "kernels/vec_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/loss.h"
#include "test_util.h"

using namespace zaya;

// exp within 2 ulp (relative 2.4e-7) over the range softmax inputs take, and the edge cases.
TEST(VecMath, ExpWithinTwoUlp) {
  double worst = 0;
  for (float x = -87.f; x <= 88.f; x += 0.0013f) {
    const double want = std::exp(double(x));
    worst = std::max(worst, test::rel_diff(exp_f32(x), want));  // +inf for a NaN
  }
  EXPECT_LE(worst, 2.4e-7);
  std::printf("exp_f32 worst relative error on [-87, 88]: %.3g\n", worst);
  EXPECT_EQ(exp_f32(0.f), 1.f);
  EXPECT_EQ(exp_f32(-std::numeric_limits<float>::infinity()), 0.f);
  EXPECT_EQ(exp_f32(-200.f), 0.f);
  EXPECT_TRUE(std::isinf(exp_f32(std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
}

// Row primitives on every length 0..70 (vector body + masked tail), in place and out of place.
TEST(VecMath, RowPrimitivesMatchPlainLoops) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 4.f);
  for (int64_t n = 0; n <= 70; n++) {
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    float mx = -std::numeric_limits<float>::infinity();
    for (float v : x) mx = std::max(mx, v);
    EXPECT_EQ(row_max(x.data(), n), mx);
    const float shift = n ? mx : 0.f;
    std::vector<float> out(n + 1, -7.f);  // the slot past n must stay untouched
    double want = 0;
    for (float v : x) want += std::exp(double(v) - shift);
    const double got = exp_shift_sum(out.data(), x.data(), n, shift);
    EXPECT_NEAR(got, want, 1e-6 * std::max(1.0, want)) << n;
    EXPECT_NEAR(exp_shift_sum(nullptr, x.data(), n, shift), want, 1e-6 * std::max(1.0, want));
    for (int64_t i = 0; i < n; i++) EXPECT_NEAR(out[i], std::exp(double(x[i]) - shift), 3e-7) << n;
    EXPECT_EQ(out[n], -7.f);
  }
}

// dot_f32 on every length 0..70 (16-lane chains, the tail in order) against the double sum: fp32 rounding of
// at most a few ulp per term, so within 1e-6 of Σ|x·y| (a lost or doubled term is off by ~1/n of it).
TEST(VecMath, DotMatchesDoubleSum) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t n = 0; n <= 70; n++) {
    std::vector<float> x(n), y(n);
    for (auto& v : x) v = nd(rng);
    for (auto& v : y) v = nd(rng);
    double want = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
      want += double(x[i]) * y[i];
      mag += std::fabs(double(x[i]) * y[i]);
    }
    const float got = dot_f32(x.data(), y.data(), n);
    EXPECT_LE(std::fabs(got - want), 1e-6 * mag + 1e-30) << n;  // NaN fails too
  }
}

// dot_f32_many is dot_f32, bit for bit, for every count of dots (8, 4, 2 side by side and the rest one by
// one) and length (tails included), rows at a stride; a NaN in one row stays in that row.
TEST(VecMath, DotManyEqualsDotBitwise) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t n : {1, 15, 16, 37, 256}) {
    const int64_t ld = n + 3;
    for (int64_t m = 1; m <= 19; m++) {
      std::vector<float> x(n), ys(size_t(m * ld));
      for (auto& v : x) v = nd(rng);
      for (auto& v : ys) v = nd(rng);
      if (m == 13) ys[size_t(5 * ld + n / 2)] = NAN;
      std::vector<float> got(size_t(m), 0.f);
      dot_f32_many(got.data(), x.data(), ys.data(), ld, m, n);
      for (int64_t j = 0; j < m; j++) {
        const float want = dot_f32(x.data(), ys.data() + j * ld, n);
        if (m == 13 && j == 5) {
          EXPECT_TRUE(std::isnan(got[size_t(j)]));
          continue;
        }
        uint32_t a, b;
        std::memcpy(&a, &want, 4);
        std::memcpy(&b, &got[size_t(j)], 4);
        EXPECT_EQ(a, b) << "n=" << n << " m=" << m << " j=" << j;
      }
    }
  }
}

// dot_f32_grid is dot_f32 for every pair, bit for bit: the 4 x 4 blocks with their transposed lane-sum tree
// (16+ y-rows), the last ny % 4 y-rows, the last nx % 4 x-rows, few y-rows and lengths with a tail (the
// dot_f32_many path); a NaN stays in its pair's row and column.
TEST(VecMath, DotGridEqualsDotBitwise) {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t n : {16, 37, 256}) {
    for (int64_t nx : {1, 4, 7, 9}) {
      for (int64_t ny : {1, 3, 4, 6, 16, 17, 19, 20}) {
        const int64_t ldx = n + 5, ldy = n + 3, ldo = nx + 2;
        std::vector<float> xs(size_t(nx * ldx)), ys(size_t(ny * ldy));
        for (auto& v : xs) v = nd(rng);
        for (auto& v : ys) v = nd(rng);
        const bool nan = nx == 7 && (ny == 6 || ny == 19);
        if (nan) ys[size_t(2 * ldy + n / 2)] = NAN;  // y-row 2: every x-row's dot with it is NaN
        std::vector<float> got(size_t(ny * ldo), 0.f);
        dot_f32_grid(got.data(), ldo, xs.data(), ldx, nx, ys.data(), ldy, ny, n);
        for (int64_t j = 0; j < ny; j++)
          for (int64_t i = 0; i < nx; i++) {
            const float g = got[size_t(j * ldo + i)];
            if (nan && j == 2) {
              EXPECT_TRUE(std::isnan(g));
              continue;
            }
            const float want = dot_f32(xs.data() + i * ldx, ys.data() + j * ldy, n);
            uint32_t a, b;
            std::memcpy(&a, &want, 4);
            std::memcpy(&b, &g, 4);
            EXPECT_EQ(a, b) << "n=" << n << " nx=" << nx << " ny=" << ny << " i=" << i << " j=" << j;
          }
      }
    }
  }
}

// The cross-entropy kernels against a double-precision loop (loss 1e-6 relative, gradient 1e-7 abs), with an
// ignored row, and a NaN logit surfacing as a NaN loss.
TEST(VecMath, CrossEntropyMatchesDoubleLoop) {
  const int64_t N = 5, V = 1000;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> logits(N * V);
  for (auto& v : logits) v = nd(rng);
  std::vector<int32_t> targets = {7, -100, 999, 0, 500};
  double want_sum = 0;
  std::vector<double> want_grad(N * V, 0.0);
  for (int64_t i = 0; i < N; i++) {
    if (targets[i] < 0) continue;
    double mx = -1e300, s = 0;
    for (int64_t v = 0; v < V; v++) mx = std::max(mx, double(logits[i * V + v]));
    for (int64_t v = 0; v < V; v++) s += std::exp(double(logits[i * V + v]) - mx);
    const double lse = std::log(s) + mx;
    want_sum += lse - logits[i * V + targets[i]];
    for (int64_t v = 0; v < V; v++) want_grad[i * V + v] = std::exp(logits[i * V + v] - lse) / 4.0;
    want_grad[i * V + targets[i]] -= 1.0 / 4.0;
  }
  int64_t count = 0;
  EXPECT_NEAR(cross_entropy_forward(nullptr, logits.data(), targets.data(), N, V, &count), want_sum / 4,
              1e-6 * want_sum);
  EXPECT_EQ(count, 4);
  std::vector<float> grad(N * V);
  EXPECT_NEAR(cross_entropy_backward(grad.data(), logits.data(), targets.data(), N, V, 0.25f, &count),
              want_sum, 1e-6 * want_sum);
  const test::Diff d = test::diff(grad, want_grad);
  EXPECT_TRUE(d.within(1e-7)) << d.str();  // fp32 softmax of O(1) values: a few ulps of entries <= 0.25
  logits[3 * V + 17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(cross_entropy_forward(nullptr, logits.data(), targets.data(), N, V, nullptr)));
}

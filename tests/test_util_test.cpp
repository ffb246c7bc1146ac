// The comparison helpers every numeric test goes through (tests/test_util.h) must themselves be able to fail:
// a NaN or inf on either side, anywhere, is infinitely wrong; the worst entry is reported; `keep` masks
// rows; sizes that differ are wrong.
#include "test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

using namespace zaya;

namespace {
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();
}  // namespace

TEST(TestUtil, DiffMeasuresTheWorstEntry) {
  const std::vector<float> want = {1.f, -2.f, 4.f, 0.5f};
  const std::vector<float> got = {1.f, -2.001f, 4.f, 0.5f};
  const test::Diff d = test::diff(got, want);
  EXPECT_NEAR(d.max_abs, 1e-3, 1e-6);
  EXPECT_EQ(d.worst, 1u);
  EXPECT_EQ(d.scale, 4.0);
  EXPECT_NEAR(d.max_rel, 1e-3 / 4, 1e-7);
  EXPECT_EQ(d.non_finite, 0u);
  EXPECT_EQ(d.compared, 4u);
  EXPECT_TRUE(d.within(2e-3));
  EXPECT_FALSE(d.within(5e-4));
  EXPECT_TRUE(d.within(0, 1e-3));  // relative to max |want| = 4: 4e-3
  EXPECT_TRUE(test::diff(want, want).within(0));
}

TEST(TestUtil, NanAndInfAreInfinitelyWrong) {
  const std::vector<float> want = {1.f, 2.f, 3.f};
  for (float bad : {kNaN, kInf, -kInf}) {
    for (size_t at = 0; at < want.size(); at++) {
      std::vector<float> got = want;
      got[at] = bad;
      const test::Diff g = test::diff(got, want), w = test::diff(want, got);
      for (const test::Diff& d : {g, w}) {
        EXPECT_TRUE(std::isinf(d.max_abs)) << bad << " at " << at;
        EXPECT_TRUE(std::isinf(d.max_rel));
        EXPECT_EQ(d.non_finite, 1u);
        EXPECT_EQ(d.worst, at);
        EXPECT_FALSE(d.within(1e30, 1e30));
      }
      EXPECT_TRUE(std::isinf(test::max_abs_diff(got.data(), want.data(), got.size())));
      EXPECT_TRUE(std::isinf(test::rel_frobenius_diff(got.data(), want.data(), got.size())));
    }
  }
  // All NaN: nothing compares greater than a running max, which is what the helpers must not rely on.
  const std::vector<float> nan3(3, kNaN);
  EXPECT_FALSE(test::diff(nan3, nan3).within(1e30));
  EXPECT_TRUE(std::isinf(test::rel_diff(kNaN, 1.0)));
  EXPECT_TRUE(std::isinf(test::rel_diff(1.0, kNaN)));
  EXPECT_TRUE(std::isinf(test::abs_diff(kNaN, kNaN)));
  EXPECT_FALSE(test::abs_diff(kNaN, 0.0) <= 1e30);
}

TEST(TestUtil, KeepMasksRowsAndSizesMustAgree) {
  // Two rows of 2; row 1 holds a NaN and a large error but is masked out.
  const std::vector<float> want = {1.f, 2.f, 3.f, 4.f};
  const std::vector<float> got = {1.f, 2.5f, kNaN, 40.f};
  const std::vector<bool> keep = {true, false};
  const test::Diff d = test::diff(got.data(), want.data(), got.size(), &keep, 2);
  EXPECT_EQ(d.compared, 2u);
  EXPECT_NEAR(d.max_abs, 0.5, 1e-7);
  EXPECT_EQ(d.worst, 1u);
  const std::vector<bool> all = {true, true};
  EXPECT_TRUE(std::isinf(test::diff(got.data(), want.data(), got.size(), &all, 2).max_abs));
  // Sizes that differ.
  EXPECT_FALSE(test::diff(std::vector<float>{1.f}, std::vector<float>{1.f, 2.f}).within(1e30));
  // Mixed precision: a double reference.
  const std::vector<double> want_d = {1.0, 2.0};
  EXPECT_NEAR(test::diff(std::vector<float>{1.f, 2.25f}, want_d).max_abs, 0.25, 1e-12);
}

TEST(TestUtil, RelativeFrobenius) {
  const std::vector<float> want = {3.f, 4.f};  // ||want|| = 5
  const std::vector<float> got = {3.f, 4.5f};
  EXPECT_NEAR(test::rel_frobenius_diff(got.data(), want.data(), 2), 0.1, 1e-7);
  const std::vector<float> zero = {0.f, 0.f};
  EXPECT_NEAR(test::rel_frobenius_diff(got.data(), zero.data(), 2), std::sqrt(9.0 + 20.25), 1e-6);
}

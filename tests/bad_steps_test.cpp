// The loss-spike detector and the consecutive-bad-step count of train/bad_steps.h.
#include "train/bad_steps.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

using namespace zaya;
using namespace zaya::train;

TEST(BadSteps, SpikeNeedsAFullWindowAndTheZScore) {
  BadStepPolicy p(4.0, 10, 3);
  // Losses 2.0, 2.1, 2.0, 2.1, ...: mean 2.05, population std 0.05.
  for (int i = 0; i < 9; i++) {
    EXPECT_FALSE(p.is_spike(100.0)) << "no call before the window is full";
    p.record(false, i % 2 ? 2.1 : 2.0);
  }
  p.record(false, 2.1);
  EXPECT_NEAR(p.zscore(2.25), 4.0, 1e-9);
  EXPECT_FALSE(p.is_spike(2.24));
  EXPECT_TRUE(p.is_spike(2.26));
  EXPECT_FALSE(p.is_spike(1.0)) << "a drop is never a spike";
  BadStepPolicy off(0.0, 10, 3);
  for (int i = 0; i < 20; i++) off.record(false, 2.0 + 0.1 * (i % 2));
  EXPECT_FALSE(off.is_spike(1e9)) << "zscore 0 turns detection off";
}

TEST(BadSteps, RollbackAfterKConsecutiveBadStepsAndBadLossesStayOutOfTheWindow) {
  BadStepPolicy p(3.0, 4, 3);
  for (double l : {1.0, 1.1, 1.0, 1.1}) p.record(false, l);
  const double z = p.zscore(1.3);
  EXPECT_FALSE(p.record(true, 50.0));
  EXPECT_FALSE(p.record(true, NAN));
  EXPECT_EQ(p.consecutive_bad(), 2);
  EXPECT_EQ(p.zscore(1.3), z) << "bad losses never enter the window";
  EXPECT_FALSE(p.record(false, 1.05));  // a good step ends the run of bad ones
  EXPECT_EQ(p.consecutive_bad(), 0);
  EXPECT_FALSE(p.record(true, 9.0));
  EXPECT_FALSE(p.record(true, 9.0));
  EXPECT_TRUE(p.record(true, 9.0)) << "the third consecutive bad step asks for a rollback";
  EXPECT_EQ(p.consecutive_bad(), 0);
  BadStepPolicy never(3.0, 4, 0);
  for (int i = 0; i < 100; i++) EXPECT_FALSE(never.record(true, NAN)) << "max_bad 0: never roll back";
}

TEST(BadSteps, StateRoundTripsExactlyAndMalformedStateIsAnError) {
  BadStepPolicy a(3.0, 5, 3);
  for (double l : {2.718281828459045, 3.141592653589793, 1.0 / 3.0, 0.1, 1e-300, 7.0}) a.record(false, l);
  a.record(true, NAN);
  // Through text, as in a checkpoint manifest.
  const nlohmann::json s = nlohmann::json::parse(a.state().dump());
  BadStepPolicy b(3.0, 5, 3);
  b.load_state(s, "manifest.json");
  EXPECT_EQ(b.state(), a.state());
  EXPECT_EQ(b.zscore(5.0), a.zscore(5.0));
  EXPECT_EQ(b.consecutive_bad(), 1);
  EXPECT_THROW(b.load_state(nlohmann::json::parse(R"({"losses": "x", "consecutive_bad": 0})"), "m"), Error);
  EXPECT_THROW(b.load_state(nlohmann::json::parse(R"({"losses": [1, "x"], "consecutive_bad": 0})"), "m"),
               Error);
  EXPECT_THROW(b.load_state(nlohmann::json::parse(R"({"losses": []})"), "m"), Error);
}

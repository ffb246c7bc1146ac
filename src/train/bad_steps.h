// Bad training steps: loss-spike detection and the count of consecutive bad steps behind the rollback policy
// of the trainer (TrainConfig "fault"; docs/fault-tolerance.md).
//
// A step is bad when its loss or gradient norm is not finite, or when its loss is a spike: more than
// `zscore` standard deviations above the mean of the last `window` accepted losses (z = (loss - mean) / std,
// population std over the window; no spike is called before the window is full, nor when zscore is 0). Bad
// steps apply no update and never enter the window. After `max_bad` consecutive bad steps the trainer rolls
// back to its newest checkpoint and skips the data that led there (PaLM, OPT and Megatron-style).
// The window is part of the training state (saved in checkpoints) so that a resumed run decides exactly as
// the uninterrupted one.
#pragma once

#include <cstdint>
#include <deque>
#include <nlohmann/json.hpp>
#include <string>

namespace zaya::train {

class BadStepPolicy {
 public:
  BadStepPolicy(double zscore, int64_t window, int64_t max_bad);

  // The z-score of `loss` against the window, or 0 while the window is not full / detection is off.
  double zscore(double loss) const;
  // True when `loss` (finite) is a spike.
  bool is_spike(double loss) const { return zscore_ > 0 && zscore(loss) > zscore_; }

  // Records a step: an accepted one's loss enters the window and ends a run of bad steps; a bad one extends
  // it. Returns true when the run of consecutive bad steps reaches max_bad (> 0): the caller rolls back, and
  // the count starts again from 0.
  bool record(bool bad, double loss);
  int64_t consecutive_bad() const { return consecutive_; }

  nlohmann::json state() const;  // {"losses": [...], "consecutive_bad": n} (doubles round-trip exactly)
  // Throws zaya::Error naming `where` when `s` is malformed.
  void load_state(const nlohmann::json& s, const std::string& where);

 private:
  double zscore_;
  size_t window_;
  int64_t max_bad_;
  int64_t consecutive_ = 0;
  std::deque<double> losses_;
};

}  // namespace zaya::train

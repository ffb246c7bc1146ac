#include "train/bad_steps.h"

#include <cmath>

#include "core/error.h"

namespace zaya::train {

BadStepPolicy::BadStepPolicy(double zscore, int64_t window, int64_t max_bad)
    : zscore_(zscore), window_(size_t(window)), max_bad_(max_bad) {
  ZAYA_ASSERT(window >= 2, "a standard deviation needs two losses");
}

double BadStepPolicy::zscore(double loss) const {
  if (zscore_ <= 0 || losses_.size() < window_) return 0;
  double mean = 0;
  for (double l : losses_) mean += l;
  mean /= double(losses_.size());
  double var = 0;
  for (double l : losses_) var += (l - mean) * (l - mean);
  const double sd = std::sqrt(var / double(losses_.size()));
  // A flat window (sd 0) would call every change a spike: 1e-12 relative keeps it meaningful.
  return (loss - mean) / std::max(sd, 1e-12 * std::fabs(mean) + 1e-300);
}

bool BadStepPolicy::record(bool bad, double loss) {
  if (!bad) {
    consecutive_ = 0;
    losses_.push_back(loss);
    while (losses_.size() > window_) losses_.pop_front();
    return false;
  }
  consecutive_++;
  if (max_bad_ > 0 && consecutive_ >= max_bad_) {
    consecutive_ = 0;
    return true;
  }
  return false;
}

nlohmann::json BadStepPolicy::state() const {
  return {{"losses", std::vector<double>(losses_.begin(), losses_.end())}, {"consecutive_bad", consecutive_}};
}

void BadStepPolicy::load_state(const nlohmann::json& s, const std::string& where) {
  ZAYA_CHECK(s.is_object() && s.contains("losses") && s["losses"].is_array() &&
                 s.contains("consecutive_bad") && s["consecutive_bad"].is_number_integer(),
             where, ": field 'bad_steps' must be {\"losses\": [numbers], \"consecutive_bad\": integer}");
  losses_.clear();
  for (const auto& v : s["losses"]) {
    ZAYA_CHECK(v.is_number(), where, ": field 'bad_steps.losses' holds a non-number ", v.dump());
    losses_.push_back(v.get<double>());
  }
  while (losses_.size() > window_) losses_.pop_front();
  consecutive_ = s["consecutive_bad"].get<int64_t>();
}

}  // namespace zaya::train

#include "train/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace zaya::train {

double lr_at(const ScheduleConfig& s, double lr, int64_t step) {
  ZAYA_ASSERT(step >= 0, "schedule steps are 0-based");
  if (step < s.warmup_steps) return lr * double(step + 1) / double(s.warmup_steps);
  const double min_lr = s.min_lr_fraction * lr;
  if (s.kind == ScheduleKind::Constant) return lr;
  if (step >= s.total_steps) return min_lr;
  if (s.kind == ScheduleKind::Cosine) {
    const double p = double(step - s.warmup_steps) / double(s.total_steps - s.warmup_steps);
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
  }
  // WSD: the decay phase never starts inside the warmup.
  const int64_t decay_steps = std::llround(double(s.decay_fraction) * double(s.total_steps));
  const int64_t decay_start = std::max(s.warmup_steps, s.total_steps - decay_steps);
  if (step < decay_start) return lr;
  const double p = double(step - decay_start) / double(s.total_steps - decay_start);
  const double keep = s.decay_shape == DecayShape::Linear ? 1.0 - p : 1.0 - std::sqrt(p);
  return min_lr + (lr - min_lr) * keep;
}

}  // namespace zaya::train

// Learning-rate schedules: lr_at(step) for constant, linear warmup + cosine decay, and warmup-stable-decay.
#pragma once

#include <cstdint>

#include "train/optim_config.h"

namespace zaya::train {

// The learning rate of update `step` (0-based) for peak rate `lr`:
//   warmup   step < warmup_steps:  lr · (step + 1) / warmup_steps     (the first update is not at 0)
//   constant                       lr
//   cosine   min + (lr − min) · ½(1 + cos(π·p)),  p = (step − warmup) / (total − warmup)
//   wsd      lr until the decay starts at total − round(decay_fraction · total) (not before warmup ends),
//            then min + (lr − min) · (1 − p) (linear) or (1 − sqrt(p)) (1-sqrt), p over the decay phase
// with min = min_lr_fraction · lr; cosine and wsd give min from total_steps on.
double lr_at(const ScheduleConfig& s, double lr, int64_t step);

}  // namespace zaya::train

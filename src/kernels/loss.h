// Cross-entropy over fp32 logits (spec §5.9, backward §6.1).
#pragma once

#include <cstdint>

namespace zaya {

// logits[N, V], targets[N] (-100 = ignored) → per_token[N] (0 where ignored; nullable). Returns the mean over
// counted targets (0 when none); *count receives their number. Throws zaya::Error for targets outside [0, V).
double cross_entropy_forward(float* per_token, const float* logits, const int32_t* targets, int64_t N,
                             int64_t V, int64_t* count);

}  // namespace zaya

// Cross-entropy over fp32 logits (spec §5.9, backward §6.1).
#pragma once

#include <cstdint>

namespace zaya {

// logits[N, V], targets[N] (-100 = ignored) → per_token[N] (0 where ignored; nullable). Returns the mean over
// counted targets (0 when none); *count receives their number. Throws zaya::Error for targets outside [0, V).
double cross_entropy_forward(float* per_token, const float* logits, const int32_t* targets, int64_t N,
                             int64_t V, int64_t* count);

// Cross-entropy backward (spec §6.1) for a block of rows: dlogits[N,V] = (softmax(logits) − onehot(target))
// · scale for counted rows (target != -100), 0 for ignored rows; scale = 1/N_total for the mean loss over
// all counted targets of the batch. dlogits may alias logits. Returns the summed (unscaled) loss of the
// counted rows; *count (nullable) receives their number. Throws zaya::Error for targets outside [0, V).
double cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, int64_t N,
                              int64_t V, float scale, int64_t* count);

}  // namespace zaya

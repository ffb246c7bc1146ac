// CCA values with a one-token delay on half of the channels (spec §5.5f), backward spec §6.10.
// One sequence row of a fresh sequence: V[t] = [Vc[t] | Vd[t]], Vd[t] = Dv[t−1], Vd[0] = seed (= b_vd,
// the delayed projection of a zero input, or 0 without bias).
#pragma once

#include <cstdint>

namespace zaya {

// Backward for one row of S tokens, half = Kv/2:
//   dvals[S, Kv] = ḡV  →  dvc[t] = ḡV[t, :half] and ddv[t] = ḡV[t+1, half:] (0 for t = S−1), written with
//   row stride `ld` (so they can land in a fused projection gradient); dseed[half] += ḡV[0, half:]
//   (nullable: a seed without bias is the constant 0).
void delayed_values_backward(float* dvc, float* ddv, int64_t ld, float* dseed, const float* dvals, int64_t S,
                             int64_t half);

}  // namespace zaya

#include "kernels/delayed_values.h"

namespace zaya {

void delayed_values_backward(float* dvc, float* ddv, int64_t ld, float* dseed, const float* dvals, int64_t S,
                             int64_t half) {
  const int64_t Kv = 2 * half;
  for (int64_t s = 0; s < S; s++) {
    for (int64_t i = 0; i < half; i++) {
      dvc[s * ld + i] = dvals[s * Kv + i];
      ddv[s * ld + i] = s + 1 < S ? dvals[(s + 1) * Kv + half + i] : 0.f;
    }
  }
  if (dseed) {
    for (int64_t i = 0; i < half; i++) dseed[i] += dvals[half + i];
  }
}

}  // namespace zaya

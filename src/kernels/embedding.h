// Embedding lookup with the input scaling x0 = (E[id] + β_in) ⊙ α_in (spec §5.1), backward spec §6.2.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace zaya {

// dx0[T, H] = ḡx0 → dembed[V, H] += ḡx0 ⊙ α_in scattered to row ids[t], EXCEPT ids[t] == pad_id
// (padding_idx: the lookup gives the pad row no gradient; pass pad_id < 0 for none);
// dalpha[H] += Σ ḡx0 ⊙ (E[id] + β_in); dbeta[H] += Σ ḡx0 ⊙ α_in. embed [V, H] F32 or BF16.
void embedding_backward(float* dembed, float* dalpha, float* dbeta, const float* dx0, const int32_t* ids,
                        int64_t T, const Tensor& embed, const float* alpha, const float* beta,
                        int64_t pad_id);

}  // namespace zaya

// Model FLOPs of ZAYA1 (multiply-adds count 2), for MFU figures. Forward per token at sequence length S:
// every GEMM of the active path (q/k/v/o, router MLP, one expert's SwiGLU, LM head), both CCA convolutions
// and the attention products over the causal (or windowed) context, averaged over the S positions.
#pragma once

#include "model/zaya-config.h"

namespace zaya {

double forward_flops_per_token(const ZayaConfig& c, int64_t seq_len);

}  // namespace zaya

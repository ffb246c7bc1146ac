// The model as training holds it: fp32 master weights (what the optimizer updates), the compute model that
// runs forward/backward (shares every fp32 tensor with the master; in bf16 mode its GEMM weights are bf16
// copies refreshed after each update), fp32 gradients, and value/gradient pairs for the optimizer.
#pragma once

#include "model/zaya-backward.h"
#include "model/zaya.h"
#include "train/param_groups.h"

namespace zaya::train {

struct TrainModel {
  ZayaModel master;
  ZayaModel compute;
  ZayaGrads grads;
  std::vector<ParamRef> params;  // master value + gradient per parameter (buffers excluded)

  // From scratch (init_from empty: the HF initialisation with `seed`) or from an HF checkpoint directory.
  static TrainModel create(const ZayaConfig& cfg, const std::string& init_from, uint64_t seed, DType compute);
  // Copies the updated master GEMM weights into the bf16 compute weights (no-op in fp32).
  void refresh_compute();
  // Bytes of master weights and of gradients (fp32).
  size_t weight_bytes() const;
};

}  // namespace zaya::train

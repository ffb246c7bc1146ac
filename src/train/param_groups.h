// The trainer's view of a parameter (fp32 master value + fp32 gradient) and the ZAYA1 split of the
// parameters into optimizer groups (spec §9.2; group list and defaults in train/optim_config.h).
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "train/optim_config.h"

namespace zaya::train {

// One trainable tensor: `value` and `grad` are contiguous fp32 buffers of shape_numel(shape) floats.
struct ParamRef {
  std::string name;  // the Hugging Face name (model/zaya-weights.h named_params)
  Shape shape;
  float* value = nullptr;
  float* grad = nullptr;
};

struct ParamGroup {
  GroupId id;
  OptimKind kind;
  float lr_scale;
  float weight_decay;
  std::vector<size_t> params;  // indices into the ParamRef list, in list order
};

// The group a ZAYA1 parameter belongs to, from its name and shape. Throws zaya::Error for
// balancing_biases (a buffer, updated by the BalanceController) and for names it does not know.
GroupId zaya_param_group(const std::string& name, const Shape& shape);

// Splits `params` into the groups of the ZAYA1 recipe with the hyper-parameters of `cfg`; groups with no
// parameter are left out. Throws zaya::Error when a Muon group would get a tensor with fewer than 2 dims.
std::vector<ParamGroup> zaya_param_groups(const std::vector<ParamRef>& params, const OptimConfig& cfg);

}  // namespace zaya::train

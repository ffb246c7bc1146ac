// The optimizer of a training run: AdamW and Muon groups over the fp32 master weights, with fp32 state.
//
// State layout (for checkpoints; every tensor fp32 and shaped like its parameter unless noted):
//   "optim.step"                      I64 [1]   updates taken so far (t of the next update is step + 1)
//   "optim.<param name>.exp_avg"      AdamW first moment
//   "optim.<param name>.exp_avg_sq"   AdamW second moment
//   "optim.<param name>.momentum"     Muon momentum buffer (absent when muon.momentum == 0)
// state_tensors() returns views of the live state (save them); load_state() copies a saved set back.
//
// Sharded (ZeRO-1, dist/zero1.h): an optimizer built with a list of ParamShards holds state for those
// element ranges only and updates only them; a shard that is a part of its parameter names its state
// "optim.<param name>.<moment>@<begin>" with shape [end - begin] (a whole parameter keeps the names above).
// state_slices() / load_state_slices() describe the same state as element ranges of whole, parameter-shaped
// tensors named as above (no "@"): training checkpoints store it that way, so that a checkpoint saved with
// one sharding loads into any other (resharding W ranks -> W').
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "train/optim_config.h"
#include "train/param_groups.h"

namespace zaya::train {

// Elements [begin, end) of parameter `param` (an index into the ParamRef list) in its flat row-major data.
// A Muon parameter's shard covers whole matrices (begin and end multiples of rows·cols).
struct ParamShard {
  size_t param = 0;
  int64_t begin = 0, end = 0;
};

class Optimizer {
 public:
  // The ZAYA1 split of `params` (zaya_param_groups) with cfg's hyper-parameters. Allocates zeroed state.
  Optimizer(const std::vector<ParamRef>& params, const OptimConfig& cfg);
  // Explicit groups (every parameter in exactly one group), e.g. for models other than ZAYA1 or tests.
  Optimizer(const std::vector<ParamRef>& params, std::vector<ParamGroup> groups, const OptimConfig& cfg);
  // Only `shards` (in any order, non-overlapping) get state and updates: one rank's part of a ZeRO-1
  // optimizer. Throws zaya::Error for a shard outside its parameter or cutting a Muon matrix.
  Optimizer(const std::vector<ParamRef>& params, std::vector<ParamGroup> groups, const OptimConfig& cfg,
            const std::vector<ParamShard>& shards);

  // One update of every parameter (sharded: of every owned shard) from its gradient. `lr` is the scheduled
  // learning rate; a group uses lr · lr_scale. `params` must list the same names and shapes as at
  // construction (pointers may change). grad_scale multiplies every gradient as the update reads it (the
  // clipping factor: bitwise the update of gradients scaled beforehand).
  void step(const std::vector<ParamRef>& params, float lr, float grad_scale = 1.0f);

  int64_t steps_taken() const { return steps_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

  // Views of the state (names above), in parameter order after "optim.step".
  std::vector<std::pair<std::string, Tensor>> state_tensors();
  // Copies a saved state back. Every expected name must be present with its dtype and shape, and no other
  // name; errors name `what` (e.g. the checkpoint file) and every missing / unexpected / mis-shaped entry.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& saved, const std::string& what);
  // One range of state: elements [begin, begin + data.numel()) of the flat state tensor `name`, whose whole
  // shape is `whole` (its parameter's); data is a flat view of the live state. "optim.step" is whole (I64).
  struct StateSlice {
    std::string name;
    Tensor data;
    Shape whole;
    int64_t begin = 0;
  };
  std::vector<StateSlice> state_slices();
  // Fills every slice this optimizer holds through `fetch(slice)` (which writes slice.data or throws), then
  // takes the step counter from "optim.step".
  void load_state_slices(const std::function<void(const StateSlice&)>& fetch, const std::string& what);
  // Bytes of optimizer state (moments, momentum buffers, step counter).
  size_t state_bytes() const;

 private:
  struct Slot {
    size_t param;
    int64_t begin, end;  // the updated elements of the parameter
    std::string name;    // the parameter's name
    Shape shape;
    OptimKind kind;
    Tensor exp_avg, exp_avg_sq;  // AdamW
    Tensor momentum;             // Muon (undefined when momentum == 0)
    float lr_scale, weight_decay;
  };
  OptimConfig cfg_;
  std::vector<ParamGroup> groups_;
  std::vector<Slot> slots_;  // one per parameter (sharded: per shard), in parameter order
  size_t num_params_ = 0;
  Tensor step_tensor_;  // I64 [1], mirrors steps_ for state_tensors()
  int64_t steps_ = 0;
  std::vector<float> scratch_;
};

}  // namespace zaya::train

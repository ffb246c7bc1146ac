// ZeRO-1 data parallelism: every rank holds the whole model and computes gradients on its slice of the
// global batch; the optimizer state is split so that each rank owns (keeps state for, and updates) about
// 1/N of it. One step:
//   backward (local gradients) → reduce each shard's gradient to its owner (after the backward, or with
//   overlap started per block as soon as the block's gradients are final) → global norm from the owned
//   shards → owners clip and update their shards → broadcast each updated shard from its owner.
//
// Ownership (plan_zero1): Muon's Newton–Schulz needs whole matrices, so Muon parameters are split only at
// matrix boundaries (an expert tensor [E, R, C] is E matrices): matrices go, largest Newton–Schulz cost
// first, to the rank with the least cost so far (the expensive part of the update is balanced). AdamW is
// element-wise, so AdamW parameters are cut anywhere: they fill every rank up to an equal share of the
// optimizer-state bytes (the memory is balanced). Both are deterministic functions of the parameters,
// groups and world size.
#pragma once

#include <cstdint>
#include <vector>

#include "dist/comm.h"
#include "train/optimizer.h"
#include "train/param_groups.h"

namespace zaya::dist {

// Elements [begin, end) of parameter `param`, owned by rank `owner`.
struct Shard {
  size_t param = 0;
  int64_t begin = 0, end = 0;
  int owner = 0;
};

struct ShardPlan {
  int world = 1;
  std::vector<Shard> shards;  // cover every element of every parameter once; parameter, then begin order
  std::vector<size_t> state_bytes;   // [world] optimizer-state bytes each rank holds (moments, momentum)
  std::vector<double> update_flops;  // [world] Newton–Schulz flops of each rank's Muon matrices per step
  size_t total_state_bytes = 0;      // the single-process figure (Σ state_bytes)

  // The shards `rank` owns, as the optimizer takes them.
  std::vector<train::ParamShard> owned(int rank) const;
};

// The ownership plan of `params` (grouped as `groups`, hyper-parameters `cfg`) over `world` ranks (>= 1).
ShardPlan plan_zero1(const std::vector<train::ParamRef>& params, const std::vector<train::ParamGroup>& groups,
                     const train::OptimConfig& cfg, int world);

// The block a parameter belongs to: l for "model.layers.<l>.…", -1 for the others (embedding, final norm,
// head).
int64_t param_layer(const std::string& name);

// Time this rank spent in communication calls, seconds, summed over steps (reset with reset_stats()).
struct CommStats {
  double overlapped_s = 0;   // posting / progressing reductions inside the backward (between blocks)
  double reduce_wait_s = 0;  // after the backward: until every owned gradient is reduced
  double broadcast_s = 0;    // broadcasting the updated parameters
  double small_s = 0;        // counts, loss, norm, heartbeats
  int64_t steps = 0;
  double exposed_s() const { return overlapped_s + reduce_wait_s + broadcast_s + small_s; }
};

// The communication of one ZeRO-1 step over `params` (the same list, same buffers, on every rank).
class Zero1 {
 public:
  // overlap: start a block's reductions (nonblocking) from the backward's block_done callback; else every
  // reduction runs after the backward with the blocking collectives, which on one machine without an MPI
  // progress thread is the faster choice (docs/distributed.md has the measurements).
  Zero1(Comm& comm, const std::vector<train::ParamRef>& params, ShardPlan plan, bool overlap = false);

  Comm& comm() { return comm_; }
  const ShardPlan& plan() const { return plan_; }

  // The backward of the step's last micro-batch finished block `layer`: start reducing its shards.
  void block_done(int64_t layer);
  // Starts every reduction not started yet and waits for all: afterwards each owned shard's gradient is the
  // sum over ranks (other ranks' gradient entries are left as partial sums).
  void finish_reduce();
  // Σ over ranks of Σ g² over owned shards (each rank's part in fixed 64K-element blocks, then rank order):
  // the squared global gradient norm, the same on every rank.
  double global_grad_sq();
  // Every shard's value from its owner to every rank (after the owners' optimizer step; blocking: call it
  // right after a heartbeat).
  void broadcast_params();

  CommStats& stats() { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  void post_layer(size_t bucket);
  Comm& comm_;
  std::vector<train::ParamRef> params_;
  ShardPlan plan_;
  bool overlap_;
  std::vector<std::vector<size_t>> buckets_;  // shard indices per block (index l + 1; 0 = outside blocks)
  std::vector<bool> posted_;                  // per bucket, this step
  CommStats stats_;
};

}  // namespace zaya::dist

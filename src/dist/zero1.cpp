#include "dist/zero1.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "train/muon.h"

namespace zaya::dist {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::vector<train::ParamShard> ShardPlan::owned(int rank) const {
  std::vector<train::ParamShard> out;
  for (const Shard& s : shards)
    if (s.owner == rank) out.push_back({s.param, s.begin, s.end});
  return out;
}

int64_t param_layer(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  const char* digits = name.c_str() + prefix.size();
  char* end = nullptr;
  const long l = std::strtol(digits, &end, 10);
  return end != digits && *end == '.' ? int64_t(l) : -1;
}

ShardPlan plan_zero1(const std::vector<train::ParamRef>& params, const std::vector<train::ParamGroup>& groups,
                     const train::OptimConfig& cfg, int world) {
  ZAYA_CHECK(world >= 1, "ZeRO-1 plan over ", world, " ranks");
  ShardPlan plan;
  plan.world = world;
  plan.state_bytes.assign(size_t(world), 0);
  plan.update_flops.assign(size_t(world), 0.0);
  std::vector<train::OptimKind> kind(params.size(), train::OptimKind::AdamW);
  std::vector<bool> grouped(params.size(), false);
  for (const train::ParamGroup& g : groups)
    for (size_t i : g.params) {
      ZAYA_CHECK(i < params.size(), "ZeRO-1 plan: group lists parameter ", i, " of ", params.size());
      kind[i] = g.kind;
      grouped[i] = true;
    }
  const size_t muon_state = cfg.muon.momentum != 0.0f ? sizeof(float) : 0;  // momentum per element
  const size_t adamw_state = 2 * sizeof(float);                             // two moments per element

  // Muon: whole matrices, largest Newton–Schulz cost first, each to the least-loaded rank (ties: lowest
  // rank; equal costs keep parameter order, so the plan is deterministic).
  struct Item {
    size_t param;
    int64_t index;  // matrix index within the parameter
    double flops;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < params.size(); i++) {
    ZAYA_CHECK(grouped[i], "ZeRO-1 plan: parameter '", params[i].name, "' is in no optimizer group");
    if (kind[i] != train::OptimKind::Muon) continue;
    const Shape& sh = params[i].shape;
    ZAYA_CHECK(sh.size() >= 2, "ZeRO-1 plan: Muon parameter '", params[i].name, "' is not a matrix");
    const int64_t rows = sh[sh.size() - 2], cols = sh.back();
    const int64_t batch = shape_numel(sh) / std::max<int64_t>(1, rows * cols);
    for (int64_t j = 0; j < batch; j++)
      items.push_back({i, j, train::newton_schulz_flops(rows, cols, cfg.muon.ns_steps)});
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.flops > b.flops; });
  std::vector<std::vector<int>> matrix_owner(params.size());
  for (const Item& it : items) {
    const int r =
        int(std::min_element(plan.update_flops.begin(), plan.update_flops.end()) - plan.update_flops.begin());
    plan.update_flops[size_t(r)] += it.flops;
    const Shape& sh = params[it.param].shape;
    plan.state_bytes[size_t(r)] += size_t(sh[sh.size() - 2] * sh.back()) * muon_state;
    auto& owners = matrix_owner[it.param];
    if (owners.empty()) owners.assign(size_t(shape_numel(sh) / (sh[sh.size() - 2] * sh.back())), -1);
    owners[size_t(it.index)] = r;
  }

  // AdamW: a stream of every AdamW element in parameter order, cut so that every rank ends up with an equal
  // share of the total state bytes (a rank already over it through Muon gets no AdamW element).
  int64_t adamw_total = 0;
  for (size_t i = 0; i < params.size(); i++)
    if (kind[i] == train::OptimKind::AdamW) adamw_total += shape_numel(params[i].shape);
  size_t total_bytes = size_t(adamw_total) * adamw_state;
  for (size_t b : plan.state_bytes) total_bytes += b;
  const double target = double(total_bytes) / world;
  std::vector<double> deficit(static_cast<size_t>(world));
  double deficit_sum = 0;
  for (int r = 0; r < world; r++) {
    deficit[size_t(r)] = std::max(0.0, target - double(plan.state_bytes[size_t(r)]));
    deficit_sum += deficit[size_t(r)];
  }
  std::vector<int64_t> quota(size_t(world), 0);  // AdamW elements per rank
  int64_t assigned = 0;
  for (int r = 0; r < world; r++) {
    quota[size_t(r)] = r == world - 1    ? adamw_total - assigned
                       : deficit_sum > 0 ? int64_t(double(adamw_total) * deficit[size_t(r)] / deficit_sum)
                                         : (r == 0 ? adamw_total : 0);
    assigned += quota[size_t(r)];
  }
  int rank = 0;
  int64_t left = quota[0];  // AdamW elements `rank` still takes
  for (size_t i = 0; i < params.size(); i++) {
    const int64_t n = shape_numel(params[i].shape);
    if (kind[i] == train::OptimKind::Muon) {
      const Shape& sh = params[i].shape;
      const int64_t m = sh[sh.size() - 2] * sh.back();
      const auto& owners = matrix_owner[i];
      for (size_t j = 0; j < owners.size();) {  // runs of consecutive matrices with one owner
        size_t k = j;
        while (k < owners.size() && owners[k] == owners[j]) k++;
        plan.shards.push_back({i, int64_t(j) * m, int64_t(k) * m, owners[j]});
        j = k;
      }
      continue;
    }
    for (int64_t begin = 0; begin < n;) {
      while (left == 0 && rank < world - 1) left = quota[size_t(++rank)];
      const int64_t take = rank == world - 1 ? n - begin : std::min(left, n - begin);
      plan.shards.push_back({i, begin, begin + take, rank});
      plan.state_bytes[size_t(rank)] += size_t(take) * adamw_state;
      left -= take;
      begin += take;
    }
  }
  plan.total_state_bytes = total_bytes;
  return plan;
}

Zero1::Zero1(Comm& comm, const std::vector<train::ParamRef>& params, ShardPlan plan, bool overlap)
    : comm_(comm), params_(params), plan_(std::move(plan)), overlap_(overlap) {
  ZAYA_CHECK(plan_.world == comm_.size(), "ZeRO-1 plan for ", plan_.world, " ranks in a world of ",
             comm_.size());
  int64_t layers = 0;
  for (const train::ParamRef& p : params_) layers = std::max(layers, param_layer(p.name) + 1);
  buckets_.assign(size_t(layers + 1), {});
  for (size_t s = 0; s < plan_.shards.size(); s++) {
    const Shard& sh = plan_.shards[s];
    ZAYA_CHECK(sh.param < params_.size(), "ZeRO-1 plan names parameter ", sh.param, " of ", params_.size());
    buckets_[size_t(param_layer(params_[sh.param].name) + 1)].push_back(s);
  }
  posted_.assign(buckets_.size(), false);
}

void Zero1::post_layer(size_t bucket) {
  if (posted_[bucket]) return;
  posted_[bucket] = true;
  for (size_t s : buckets_[bucket]) {
    const Shard& sh = plan_.shards[s];
    comm_.ireduce_sum(params_[sh.param].grad + sh.begin, sh.end - sh.begin, sh.owner);
  }
}

void Zero1::block_done(int64_t layer) {
  if (!overlap_ || !comm_.active()) return;
  const double t0 = now_s();
  ZAYA_ASSERT(layer >= 0 && size_t(layer + 1) < buckets_.size(), "block_done of a block the plan has");
  post_layer(size_t(layer + 1));
  comm_.test_all();  // progress the reductions started so far while the next block computes
  stats_.overlapped_s += now_s() - t0;
}

void Zero1::finish_reduce() {
  const double t0 = now_s();
  // Blocks from the top down (the order the backward finishes them), then the rest; every rank posts the
  // same sequence of collectives.
  if (!overlap_) {
    // Nothing was started during the backward: blocking reductions, bucket by bucket in the same order.
    for (size_t b = buckets_.size(); b-- > 0;) {
      for (size_t s : buckets_[b]) {
        const Shard& sh = plan_.shards[s];
        comm_.reduce_sum(params_[sh.param].grad + sh.begin, sh.end - sh.begin, sh.owner);
      }
      posted_[b] = true;
    }
  }
  for (size_t b = buckets_.size(); b-- > 1;) post_layer(b);
  post_layer(0);
  comm_.wait_all("gradient reduction");
  std::fill(posted_.begin(), posted_.end(), false);
  stats_.reduce_wait_s += now_s() - t0;
  stats_.steps++;
}

double Zero1::global_grad_sq() {
  constexpr int64_t kBlock = 1 << 16;
  double local = 0;
  for (const Shard& sh : plan_.shards) {
    if (sh.owner != comm_.rank()) continue;
    const float* g = params_[sh.param].grad;
    for (int64_t b0 = sh.begin; b0 < sh.end; b0 += kBlock) {
      double s = 0;
      for (int64_t i = b0; i < std::min(sh.end, b0 + kBlock); i++) s += double(g[i]) * double(g[i]);
      local += s;
    }
  }
  const double t0 = now_s();
  const double sum = comm_.sum_in_rank_order(local, "gradient norm");
  stats_.small_s += now_s() - t0;
  return sum;
}

void Zero1::broadcast_params() {
  const double t0 = now_s();
  for (const Shard& sh : plan_.shards)
    comm_.ibroadcast(params_[sh.param].value + sh.begin, sh.end - sh.begin, sh.owner);
  comm_.wait_all("parameter broadcast");
  stats_.broadcast_s += now_s() - t0;
}

}  // namespace zaya::dist

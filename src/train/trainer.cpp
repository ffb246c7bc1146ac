// The training run (trainer.h) as one object whose methods are its phases, in the order they run. Before
// it, run_training() decides how the run starts (train/run_start.h: the run's identity and directories, a
// fresh start, a resume, or a run that is already complete and needs nothing).
//   start-up (the constructor): data, model, optimizer (ZeRO-1 shards), balancer;
//   resume(): <out>/run.json and the training checkpoint to continue from (RunOptions::resume);
//   begin_steps(): heartbeat, events.jsonl, the checkpoint staging buffer, metrics.jsonl;
//   the step loop (run()): draw the batches, train the step, report a bad one, agree on preemption and the
//     last step, evaluate, log the metrics, roll back after too many bad steps or commit / save checkpoints;
//   finish(): the final model, sample, plot and summary.
// Checkpoint saving and committing is train/checkpoint_saves.h; log lines and the run's files are
// train/train_log.h.
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "ckpt/async_saver.h"
#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/tool_script.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "dist/zero1.h"
#include "eval/task_runner.h"
#include "io/output_dir.h"
#include "kernels/gemm.h"
#include "kernels/loss.h"
#include "model/generate.h"
#include "model/zaya-backward.h"
#include "model/zaya-checkpoint.h"
#include "model/zaya-flops.h"
#include "model/zaya-init.h"
#include "tokenizer/tokenizer.h"
#include "train/bad_steps.h"
#include "train/balancer.h"
#include "train/checkpoint_saves.h"
#include "train/optimizer.h"
#include "train/preempt.h"
#include "train/run_identity.h"
#include "train/run_start.h"
#include "train/train_log.h"
#include "train/train_model.h"
#include "train/train_step.h"

namespace zaya::train {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::string format_duration(double s) {
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s / 3600), int(s / 60) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s / 60), int(s) % 60);
  return buf;
}

// Mean CE over `batches` validation batches (the same batches every time: a fresh loader with a fixed seed).
double validation_loss(const ZayaModel& model, const std::shared_ptr<const data::IndexedDataset>& val,
                       const TrainConfig& c) {
  data::DataLoader loader(val, 12345);
  ForwardScratch sc;
  ForwardResult res;
  double sum = 0;
  int64_t count_total = 0;
  for (int64_t i = 0; i < c.eval_batches; i++) {
    data::Batch b = loader.next_batch(c.micro_batch, c.seq_len);
    ZayaCache cache(model.cfg, b.rows);
    zaya_forward(model, cache, b.input_ids.data(), nullptr, b.rows, b.seq_len, {}, res, sc);
    int64_t n = 0;
    double mean = cross_entropy_forward(nullptr, res.logits.data(), b.targets.data(), b.rows * b.seq_len,
                                        model.cfg.vocab_size, &n);
    sum += mean * double(n);
    count_total += n;
  }
  return count_total ? sum / double(count_total) : 0.0;
}

// Entropy (nats/token) of the dataset's own unigram distribution: the loss of a model that knows only token
// frequencies. A trained model's validation loss must end well below it.
double unigram_entropy(const data::IndexedDataset& ds) {
  std::map<uint32_t, int64_t> counts;
  int64_t total = 0;
  for (size_t i = 0; i < ds.num_sequences(); i++) {
    for (uint32_t t : ds.sequence(i)) counts[t]++;
    total += int64_t(ds.length(i));
  }
  double h = 0;
  for (const auto& [tok, n] : counts) {
    double p = double(n) / double(total);
    h -= p * std::log(p);
  }
  return h;
}

// Fault injection for the failure tests (tests/dist_test.cpp): ZAYA_DIST_FAULT="hang:<rank>:<step>" makes
// that rank stop responding at the start of that step, "exit:<rank>:<step>" makes it die there.
void inject_fault(int rank, int64_t step) {
  const char* spec = std::getenv("ZAYA_DIST_FAULT");
  if (!spec) return;
  char kind[8] = {};
  int fault_rank = -1;
  long fault_step = -1;
  if (std::sscanf(spec, "%7[a-z]:%d:%ld", kind, &fault_rank, &fault_step) != 3) return;
  if (fault_rank != rank || fault_step != step) return;
  if (!std::strcmp(kind, "exit")) std::_Exit(9);
  if (!std::strcmp(kind, "hang"))
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// Slow steps for the preemption test (tests/checkpoint_test.cpp): ZAYA_SLOW_STEP_MS=<ms> sleeps that long at
// the start of every step so that a signal surely arrives mid-run.
void inject_slow_step() {
  static const char* ms = std::getenv("ZAYA_SLOW_STEP_MS");
  if (ms) std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(ms)));
}

// Every tensor rank `rank` saves: its shards of the master weights, its optimizer state, and on rank 0 the
// buffers (balancing biases) and the balancer state (the same on every rank).
std::vector<ckpt::TensorEntry> checkpoint_tensors(TrainModel& tm, const dist::ShardPlan& plan,
                                                  Optimizer& optim, BalanceController& balancer, int rank) {
  std::vector<ckpt::TensorEntry> out;
  for (const dist::Shard& s : plan.shards) {
    if (s.owner != rank) continue;
    const ParamRef& p = tm.params[s.param];
    const bool whole = s.begin == 0 && s.end == shape_numel(p.shape);
    Tensor v = whole ? Tensor::view(DType::F32, p.shape, p.value, nullptr)
                     : Tensor::view(DType::F32, {s.end - s.begin}, p.value + s.begin, nullptr);
    out.push_back({p.name, v, whole ? Shape{} : p.shape, whole ? 0 : s.begin});
  }
  if (rank == 0) {
    ZayaWeights w = tm.master.w;  // named_params needs a mutable structure; tensors are shared
    for (auto& np : named_params(tm.master.cfg, w))
      if (np.is_buffer) out.push_back({np.name, *np.slot, {}, 0});
    for (auto& [name, t] : balancer.state_tensors()) out.push_back({name, t, {}, 0});
  }
  // Optimizer state as slices of whole tensors (any world size can load them); the step counter is the same
  // on every rank: rank 0 saves it.
  for (const Optimizer::StateSlice& s : optim.state_slices()) {
    if (s.name == "optim.step" && rank != 0) continue;
    const bool whole = s.begin == 0 && s.data.numel() == shape_numel(s.whole);
    out.push_back({s.name, whole ? Tensor::view(s.data.dtype, s.whole, s.data.data, nullptr) : s.data,
                   whole ? Shape{} : s.whole, s.begin});
  }
  return out;
}

// What must match between the run that saved a checkpoint and the one resuming it for the data stream and
// the sharding to continue identically.
nlohmann::json run_shape(const TrainConfig& c, int world) {
  return {{"micro_batch", c.micro_batch},      {"seq_len", c.seq_len}, {"grad_accum", c.grad_accum},
          {"data_seed", c.data_seed},          {"world", world},       {"dtype", dtype_name(c.dtype)},
          {"num_params", c.model.num_params()}};
}

// Test hooks (tests/checkpoint_test.cpp), in data steps (the step's batches are the data_step-th drawn):
// ZAYA_FAULT_NAN=<first>-<last> makes those steps report a NaN loss (as bad data would);
// ZAYA_FAULT_SPIKE=<first>-<last> shows the spike detector 10x their loss.
struct FaultHooks {
  int64_t nan_first = -1, nan_last = -1, spike_first = -1, spike_last = -1;
};
FaultHooks fault_hooks_from_env() {
  FaultHooks f;
  if (const char* e = std::getenv("ZAYA_FAULT_NAN")) std::sscanf(e, "%ld-%ld", &f.nan_first, &f.nan_last);
  if (const char* e = std::getenv("ZAYA_FAULT_SPIKE"))
    std::sscanf(e, "%ld-%ld", &f.spike_first, &f.spike_last);
  return f;
}

// The run's data: the training stream and the (optional) validation text.
struct TrainData {
  std::shared_ptr<const data::IndexedDataset> train, val;  // val: null without "val_data"
  data::DataLoader loader;                                 // the training batches, in order
  double val_unigram = NAN;  // the validation text's unigram entropy (nats/token), NaN without one
};

// Opens the datasets of `c` for a run over `world` ranks and reports the validation text.
TrainData open_train_data(const TrainConfig& c, int world) {
  // Batch sizes are global: rank r takes rows [r·B/N, (r+1)·B/N) of every micro-batch of B rows.
  ZAYA_CHECK(c.micro_batch >= world, c.source, ": batch.micro_batch is ", c.micro_batch,
             " rows, fewer than the ", world, " ranks it is split over (it is the global micro-batch)");
  auto train_data = data::IndexedDataset::open(c.train_data);
  std::shared_ptr<const data::IndexedDataset> val_data;
  if (!c.val_data.empty()) val_data = data::IndexedDataset::open(c.val_data);
  for (const auto& ds : {train_data, val_data}) {
    if (!ds) continue;
    // Every token id must fit the model's vocabulary.
    ZAYA_CHECK(ds->num_tokens() > 0, c.source, ": dataset has no tokens");
  }
  data::DataLoader loader(train_data, c.data_seed);
  const double val_unigram = val_data ? unigram_entropy(*val_data) : NAN;
  if (val_data)
    say("train: validation text: %lu tokens, unigram entropy %.4f nats/token\n",
        (unsigned long)val_data->num_tokens(), val_unigram);
  return {train_data, val_data, std::move(loader), val_unigram};
}

// What one training step produced, for the metrics row and the log line.
struct StepRecord {
  StepResult sr;            // loss (as the fault hooks show it), grad norm, lr, expert counts
  bool bad = false;         // non-finite or rejected (a spike): no update was applied
  double comm_s = 0;        // this rank's time blocked in communication
  double tps = 0, mfu = 0;  // tokens/s of the step and the job's MFU
  double elapsed = 0;       // seconds since the first step of this process began
  double eta = 0;           // seconds to the end of the run (the EMA of tokens/s; max_minutes caps it)
};

class Trainer {
 public:
  // Start-up (collective): data, model, optimizer, balancer; reports the setup. `start`: the run's
  // identity and the checkpoint to resume (train/run_start.h), decided before.
  Trainer(const TrainConfig& c, const RunOptions& run, RunStart start);
  TrainSummary run();

 private:
  void report_setup() const;
  // Resuming, and rolling back after too many bad steps.
  void resume();
  void restore(const ckpt::Checkpoint& ck, bool with_loader);
  int64_t roll_back(int64_t at_step);
  // The step loop: what comes before it, then the parts of a step in the order run() calls them.
  void begin_steps();
  std::vector<data::Batch> draw_batches();
  StepRecord train_one_step(const std::vector<data::Batch>& micro_batches);
  void report_bad_step(const StepResult& sr);
  void measure_speed(StepRecord& s, clock_type::time_point t_step);
  int agreed_preemption();
  bool agreed_last_step();
  double maybe_evaluate(bool last);
  void log_metrics(const StepRecord& s, double val, bool last);
  void save_checkpoint(int64_t at_step);
  nlohmann::json checkpoint_state() const;
  void stop_for_signal(int signal);
  // The end of the run.
  TrainSummary finish();
  void report_time_limit() const;
  void report_communication() const;
  void write_model() const;
  void write_sample() const;
  void write_plot() const;
  void write_summary() const;

  const TrainConfig& c_;
  const RunOptions& run_;
  const clock_type::time_point t_start_;
  PreemptGuard preempt_guard_;  // SIGTERM / SIGINT / SIGUSR1: finish the step, checkpoint, return normally
  dist::Comm& comm_;
  const int rank_, world_;
  const bool root_;
  RunStart start_;        // the run's identity, the checkpoint to resume (released after the restore)
  RunIdentity identity_;  // run id and config hash (train/run_identity.h)

  // The training state a checkpoint saves and restores: weights, optimizer and balancer state, the bad-step
  // window and the counters below, the data position.
  TrainData data_;
  TrainModel tm_;
  std::vector<ParamGroup> groups_;   // the Muon / AdamW split the plan and the optimizer were built from
  dist::ShardPlan plan_;             // ZeRO-1: which rank owns which optimizer shards
  Optimizer optim_;                  // this rank's shards of the optimizer (all of it in a world of one)
  std::unique_ptr<dist::Zero1> dp_;  // data parallel (world > 1): gradient reduction, shard broadcast
  BalanceController balancer_;
  BadStepPolicy bad_steps_;
  TrainSummary sum_;
  int64_t data_step_ = 1;  // the step's batches are the data_step-th step's worth drawn by this run
                           // (rollbacks do not rewind it): the ZAYA_FAULT_NAN hook and the rollback log
                           // count in it
  int64_t rollbacks_ = 0;

  // Start-up figures.
  const std::vector<int64_t> state_per_rank_;  // optimizer state bytes of every rank
  const size_t state_single_;                  // ... of a single process
  const double peak_;                          // GEMM GFLOP/s, all ranks together
  const double flops_per_token_;               // forward + backward

  // Outputs.
  EventLog events_;  // rollbacks, skipped updates, failed saves (rank 0)
  CheckpointSaves saves_;
  MetricsLog metrics_;

  // Task evaluation (eval.tasks, rank 0): the tasks' requests, built once; the last evaluation's figures.
  std::vector<eval::PreparedTask> tasks_;
  std::vector<std::pair<std::string, double>> task_metrics_;

  // The step loop.
  FaultHooks faults_;
  ForwardScratch scratch_;
  int64_t first_step_ = 1;  // after a resume, the checkpoint's step + 1
  int64_t step_ = 0;
  double ema_tps_ = 0;
  clock_type::time_point t_loop_;
  int stopped_by_signal_ = 0;  // the preemption signal that ended the loop early, 0 when it ran to the end
  bool time_limited_ = false;  // max_minutes ended the loop before c.steps
};

Trainer::Trainer(const TrainConfig& c, const RunOptions& run, RunStart start)
    : c_(c),
      run_(run),
      t_start_(clock_type::now()),
      comm_(dist::Comm::world()),
      rank_(comm_.rank()),
      world_(comm_.size()),
      root_(comm_.is_root()),
      start_(std::move(start)),
      identity_(start_.identity),
      data_(open_train_data(c, world_)),
      tm_(TrainModel::create(c.model, c.init_from, c.init_seed, c.dtype)),
      groups_(zaya_param_groups(tm_.params, c.optim)),
      plan_(dist::plan_zero1(tm_.params, groups_, c.optim, world_)),
      optim_(world_ > 1 ? Optimizer(tm_.params, groups_, c.optim, plan_.owned(rank_))
                        : Optimizer(tm_.params, groups_, c.optim)),
      dp_(world_ > 1 ? std::make_unique<dist::Zero1>(comm_, tm_.params, plan_, run.overlap) : nullptr),
      balancer_(c.model.num_hidden_layers, c.model.num_experts, c.optim.balancer),
      bad_steps_(c.spike_zscore, c.spike_window, c.max_bad_steps),
      state_per_rank_(comm_.allgather(int64_t(optim_.state_bytes()), "optimizer size")),
      state_single_(plan_.total_state_bytes + sizeof(int64_t)),  // + the step counter
      // MFU is the job's: global tokens/s against the sum of every rank's measured GEMM peak (each with its
      // threads).
      peak_(comm_.sum_in_rank_order(measure_gemm_peak_gflops(c.dtype), "GEMM peak")),
      flops_per_token_(3.0 * forward_flops_per_token(c.model, c.seq_len)),
      saves_(c, comm_, events_),
      metrics_(c.out_dir + "/metrics.jsonl", root_) {
  report_setup();
}

void Trainer::report_setup() const {
  const ZayaConfig& mc = c_.model;
  const size_t weight_bytes = tm_.weight_bytes();
  say("train: %.2f M parameters, %ld layers x %ld experts, %s GEMMs, %ld tokens/step (%ld x %ld x %ld)\n"
      "train: weights %.1f MB + grads %.1f MB + optimizer state %.1f MB (fp32); GEMM peak %.0f GFLOP/s (all "
      "ranks)\n",
      mc.num_params() / 1e6, long(mc.num_hidden_layers), long(mc.num_experts),
      c_.dtype == DType::BF16 ? "bf16" : "fp32", long(c_.tokens_per_step()), long(c_.micro_batch),
      long(c_.seq_len), long(c_.grad_accum), weight_bytes / 1e6, weight_bytes / 1e6,
      optim_.state_bytes() / 1e6, peak_);
  if (world_ == 1) return;
  std::string per_rank;
  int64_t most = 0;
  for (int r = 0; r < world_; r++) {
    per_rank += str_cat(r ? ", " : "", state_per_rank_[size_t(r)] / 1e6);
    most = std::max(most, state_per_rank_[size_t(r)]);
  }
  say("train: data parallel over %d ranks x %d OpenMP threads (rank %d): batch rows split %ld-way; ZeRO-1 "
      "optimizer state per rank [%s] MB, at most %.3f of the single-process %.1f MB (ideal 1/%d = "
      "%.3f)%s\n",
      world_, num_threads(), rank_, long(world_), per_rank.c_str(), double(most) / double(state_single_),
      state_single_ / 1e6, world_, 1.0 / world_,
      run_.overlap ? "; gradient reductions started during the backward (--overlap)" : "");
}

// The run: resume, then the steps until the last one (c.steps or max_minutes), a preemption signal or a
// failed save with checkpoint.on_error = stop; then the end of the run.
TrainSummary Trainer::run() {
  resume();
  begin_steps();
  for (step_ = first_step_; step_ <= c_.steps; step_++) {
    const auto t_step = clock_type::now();
    inject_fault(rank_, step_);
    inject_slow_step();
    StepRecord s = train_one_step(draw_batches());
    if (s.bad) report_bad_step(s.sr);
    const bool roll = bad_steps_.record(s.bad, s.sr.loss);
    measure_speed(s, t_step);
    const int preempted = agreed_preemption();
    const bool last = agreed_last_step();
    time_limited_ = last && step_ < c_.steps;
    const double val = maybe_evaluate(last);
    log_metrics(s, val, last);
    sum_.final_train_loss = s.sr.loss;
    sum_.steps = step_;
    heartbeat(root_, step_, "step");
    if (roll && !preempted) {
      step_ = roll_back(step_);  // the loop continues with the step after the checkpoint's
      continue;
    }
    saves_.settle(false, sum_.steps);  // commits the save in flight once every rank's write finished
    // Preempted: a checkpoint at this step even with checkpoint.every 0, so that --resume auto continues.
    if (preempted || (c_.ckpt_every > 0 && (step_ % c_.ckpt_every == 0 || last))) save_checkpoint(step_);
    if (preempted) {
      stop_for_signal(preempted);
      break;
    }
    if (saves_.failed_step() >= 0 || last) break;
  }
  return finish();
}

// ---- Resuming and rolling back ----

// Records the run in <out>/run.json and continues from the checkpoint the start chose (train/run_start.h:
// RunOptions::resume, the run's identity and directories), if any.
void Trainer::resume() {
  const std::unique_ptr<ckpt::Checkpoint> ck = std::move(start_.checkpoint);  // freed after the restore
  saves_.set_identity(identity_);
  if (root_) write_run_json(c_.out_dir, identity_, c_);
  if (!ck) return;
  restore(*ck, true);
  first_step_ = ck->step() + 1;
  sum_.steps = ck->step();
  metrics_.truncate(first_step_);
  say("train: resumed from %s (step %ld)\n", ck->dir().c_str(), long(ck->step()));
}

// The state a checkpoint restores: weights, optimizer and balancer state, the bad-step window and
// counters; with `with_loader` also the data position (a rollback keeps the current one: it skips the data
// that led to the bad steps).
void Trainer::restore(const ckpt::Checkpoint& ck, bool with_loader) {
  const nlohmann::json& st = ck.state();
  // Batch sizes are global, so the data stream and the trajectory do not depend on the world size: a
  // checkpoint of W ranks continues at W' (the slices are re-cut to this run's ZeRO-1 plan).
  nlohmann::json want = run_shape(c_, world_), saved = st.value("run", nlohmann::json());
  if (saved.is_object()) saved.erase("world");
  want.erase("world");
  ZAYA_CHECK(saved == want, ck.dir(), ": saved with ", saved.dump(), ", this run is ", want.dump(),
             " (batch, data seed, dtype and model must match to continue)");
  if (ck.world() != world_)
    say("train: resharding %s: saved by %d rank%s, loading into %d\n", ck.dir().c_str(), ck.world(),
        ck.world() == 1 ? "" : "s", world_);
  ZayaWeights w = tm_.master.w;
  for (auto& np : named_params(tm_.master.cfg, w)) ck.assemble(np.name, DType::F32, np.shape, np.slot->data);
  optim_.load_state_slices(
      [&](const Optimizer::StateSlice& s) {
        ck.assemble_range(s.name, s.data.dtype, s.whole, s.begin, s.data.numel(), s.data.data);
      },
      ck.dir());
  std::vector<std::pair<std::string, Tensor>> bal_state;
  for (auto& t : ck.tensors_of(0))
    if (t.first.rfind("balancer.", 0) == 0) bal_state.push_back(t);
  balancer_.load_state(bal_state, ck.dir());
  tm_.refresh_compute();
  const std::string where = ck.dir() + "/manifest.json";
  try {
    if (with_loader) {
      const auto& ls = st.at("loader");
      data_.loader.restore(
          {ls.at("seed").get<uint64_t>(), ls.at("epoch").get<uint64_t>(), ls.at("position").get<uint64_t>()});
      data_step_ = st.value("data_step", ck.step() + 1);
      rollbacks_ = st.value("rollbacks", int64_t(0));
      sum_.skipped_steps = st.value("skipped_steps", int64_t(0));  // a rollback keeps the run's count
    }
    if (st.contains("bad_steps")) bad_steps_.load_state(st["bad_steps"], where);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat(where, ": field 'state' is malformed (", e.what(), ")"));
  }
}

// Roll back after too many consecutive bad steps: the newest committed checkpoint's state, the current
// data position (the batches since that checkpoint are skipped). Returns the step to continue after.
int64_t Trainer::roll_back(int64_t at_step) {
  saves_.settle(true, sum_.steps);
  std::vector<std::string> skipped;
  // Only this run's checkpoints (another run's may share the directory).
  std::unique_ptr<ckpt::Checkpoint> ck = ckpt::open_latest(c_.ckpt_dir, &skipped, [&](const std::string& d) {
    const std::string id = checkpoint_run_id(d);
    return id.empty() || id == identity_.run_id;
  });
  for (const auto& why : skipped) say("train: rollback: skipping %s\n", why.c_str());
  ZAYA_CHECK(ck, "step ", at_step, ": ", c_.max_bad_steps,
             " consecutive bad steps (non-finite or spiking loss) and no checkpoint under ", c_.ckpt_dir,
             " to roll back to (set checkpoint.every)");
  ZAYA_CHECK(++rollbacks_ <= 10 * std::max<int64_t>(1, c_.max_bad_steps), "step ", at_step, ": ",
             rollbacks_ - 1, " rollbacks already: the run does not recover (lower the learning rate?)");
  restore(*ck, false);
  const int64_t back_to = ck->step();
  say("train: step %ld: %ld consecutive bad steps: rolled back to %s (step %ld); the data continues after "
      "this step's batches (the batches of %ld steps skipped)\n",
      long(at_step), long(c_.max_bad_steps), ck->dir().c_str(), long(back_to), long(at_step - back_to));
  events_.write({{"event", "rollback"},
                 {"step", at_step},
                 {"to_step", back_to},
                 {"checkpoint", ck->dir()},
                 {"skipped_data_steps", at_step - back_to}});
  metrics_.truncate(back_to + 1);
  return back_to;
}

// Before the first step: the "started" heartbeat, events.jsonl, the checkpoint staging buffer, metrics.jsonl
// (appended to after a resume) and the test hooks.
void Trainer::begin_steps() {
  heartbeat(root_, first_step_ - 1, "started");
  events_.open(c_.out_dir + "/events.jsonl", root_);
  if (c_.ckpt_every > 0)
    saves_.reserve(ckpt::AsyncSaver::layout_bytes(checkpoint_tensors(tm_, plan_, optim_, balancer_, rank_)));
  metrics_.open(first_step_ > 1);
  if (root_ && !c_.eval_tasks.empty()) {  // read and tokenized once; an error stops the run before step 1
    const Tokenizer tok = Tokenizer::load(c_.tokenizer);
    for (const auto& t : c_.eval_tasks) {
      tasks_.push_back(eval::prepare_task(t.task, t.data_dir, t.num_fewshot, t.limit, 1234, tok, c_.seq_len));
      say("eval task %s: %zu requests from %s/%s\n", t.task.c_str(), tasks_.back().requests.size(),
          t.data_dir.c_str(), t.task.c_str());
    }
  }
  faults_ = fault_hooks_from_env();
  t_loop_ = clock_type::now();
}

// ---- One training step ----

// This rank's slices of the step's grad_accum micro-batches (ids checked here so that a bad one names the
// dataset file).
std::vector<data::Batch> Trainer::draw_batches() {
  const ZayaConfig& mc = c_.model;
  std::vector<data::Batch> micro_batches;
  for (int64_t micro = 0; micro < c_.grad_accum; micro++) {
    micro_batches.push_back(data_.loader.next_batch(c_.micro_batch, c_.seq_len, rank_, world_));
    for (int32_t id : micro_batches.back().input_ids)
      ZAYA_CHECK(id >= 0 && id < mc.vocab_size, c_.train_data, ": token id ", id,
                 " does not fit the model's vocabulary of ", mc.vocab_size);
  }
  return micro_batches;
}

// Forward, backward and (unless the step is bad) the update; the fault hooks act here.
StepRecord Trainer::train_one_step(const std::vector<data::Batch>& micro_batches) {
  const bool inject_nan = data_step_ >= faults_.nan_first && data_step_ <= faults_.nan_last;
  const double spike_factor =
      data_step_ >= faults_.spike_first && data_step_ <= faults_.spike_last ? 10.0 : 1.0;
  data_step_++;
  const double comm_before = dp_ ? dp_->stats().exposed_s() : 0;
  auto reject = [&](double l) -> const char* {
    if (inject_nan) return "non-finite loss (injected by ZAYA_FAULT_NAN)";
    return bad_steps_.is_spike(l * spike_factor) ? "loss spike" : nullptr;
  };
  StepRecord s;
  s.sr = train_step(tm_, optim_, balancer_, micro_batches, c_.optim, step_, scratch_, c_.recompute, dp_.get(),
                    reject);
  if (inject_nan) s.sr.loss = NAN;
  if (s.sr.rejected && spike_factor != 1.0) s.sr.loss *= spike_factor;
  s.comm_s = dp_ ? dp_->stats().exposed_s() - comm_before : 0;
  s.bad = !s.sr.finite || s.sr.rejected;
  return s;
}

// A bad step (no update applied): counted, logged and recorded in events.jsonl.
void Trainer::report_bad_step(const StepResult& sr) {
  sum_.skipped_steps++;
  const std::string why = !sr.finite            ? "non-finite loss or gradient"
                          : std::isnan(sr.loss) ? std::string(sr.rejected)
                                                : str_cat(sr.rejected, " (z = ", bad_steps_.zscore(sr.loss),
                                                          " > ", c_.spike_zscore, ")");
  say("train: step %ld: %s, loss %.4f, grad norm %.3g: update skipped (%ld skipped so far, %ld in a "
      "row)\n",
      long(step_), why.c_str(), sr.loss, sr.grad_norm, long(sum_.skipped_steps),
      long(bad_steps_.consecutive_bad() + 1));
  events_.write({{"event", "skipped_update"},
                 {"step", step_},
                 {"reason", why},
                 {"loss", sr.loss},
                 {"grad_norm", sr.grad_norm}});
}

// Throughput of the step that began at t_step, MFU, and the time left.
void Trainer::measure_speed(StepRecord& s, clock_type::time_point t_step) {
  const double dt = seconds_since(t_step);
  s.tps = c_.tokens_per_step() / dt;
  ema_tps_ = step_ == first_step_ ? s.tps : 0.9 * ema_tps_ + 0.1 * s.tps;
  s.elapsed = seconds_since(t_loop_);
  s.eta = (c_.steps - step_) * c_.tokens_per_step() / ema_tps_;
  if (c_.max_minutes > 0) s.eta = std::min(s.eta, c_.max_minutes * 60 - seconds_since(t_start_));
  s.mfu = s.tps * flops_per_token_ / 1e9 / peak_;
}

// A preemption signal on any rank stops every rank after this step (mpirun may deliver it to rank 0 only):
// the first rank's signal in rank order names it. 0 when none, or at the last step (the run is over anyway:
// finish it normally).
int Trainer::agreed_preemption() {
  int preempted = preempt_signal();
  if (world_ > 1)
    for (int64_t sig : comm_.allgather(preempted, "preemption signal"))
      if (sig != 0) {
        preempted = int(sig);
        break;
      }
  if (step_ == c_.steps) preempted = 0;
  return preempted;
}

// The last step: c.steps, or the first after max_minutes.
bool Trainer::agreed_last_step() {
  bool last = step_ == c_.steps || (c_.max_minutes > 0 && seconds_since(t_start_) > c_.max_minutes * 60);
  if (c_.max_minutes > 0 && world_ > 1) {  // clocks differ: every rank stops when any one's time is up
    int64_t any = last;
    comm_.allreduce_sum(&any, 1, "time limit");
    last = any > 0;
  }
  return last;
}

// The validation loss (rank 0) every eval_every steps and at the last step; NaN when not evaluated.
double Trainer::maybe_evaluate(bool last) {
  if (!root_ || !data_.val || !((c_.eval_every > 0 && step_ % c_.eval_every == 0) || last)) return NAN;
  sum_.final_val_loss = validation_loss(tm_.compute, data_.val, c_);
  task_metrics_.clear();
  for (size_t i = 0; i < tasks_.size(); i++) {
    const auto m =
        eval::headline_metrics(eval::score_task(tm_.compute, tasks_[i], {}), c_.eval_tasks[i].task);
    task_metrics_.insert(task_metrics_.end(), m.begin(), m.end());
  }
  return sum_.final_val_loss;
}

// The step's row of metrics.jsonl and, every log_every steps (and at the first, last and evaluated ones),
// its log line.
void Trainer::log_metrics(const StepRecord& s, double val, bool last) {
  const int64_t L = c_.model.num_hidden_layers, E = c_.model.num_experts;
  const std::vector<int64_t>& counts = s.sr.counts;  // [L, E+1]
  std::vector<double> ent = router_load_entropy(counts.data(), L, E);
  double ent_min = 1e9, skip_frac = 0;
  for (int64_t l = 0; l < L; l++) {
    ent_min = std::min(ent_min, ent[l] / std::log(double(E)));
    int64_t tot = 0;
    for (int64_t e = 0; e <= E; e++) tot += counts[l * (E + 1) + e];
    skip_frac += tot ? double(counts[l * (E + 1) + E]) / double(tot) / double(L) : 0;
  }
  nlohmann::json row = {{"step", step_},
                        {"loss", s.sr.loss},
                        {"lr", s.sr.lr},
                        {"grad_norm", s.sr.grad_norm},
                        {"tokens_per_s", s.tps},
                        {"mfu", s.mfu},
                        {"seconds", s.elapsed},
                        {"tokens", step_ * c_.tokens_per_step()},
                        {"skip_fraction", skip_frac}};
  nlohmann::json ent_norm = nlohmann::json::array(), load = nlohmann::json::array();
  for (int64_t l = 0; l < L; l++) {
    ent_norm.push_back(ent[l] / std::log(double(E)));
    load.push_back(std::vector<int64_t>(counts.begin() + l * (E + 1), counts.begin() + (l + 1) * (E + 1)));
  }
  row["load_entropy"] = ent_norm;  // per layer, divided by ln E (1 = perfectly balanced)
  row["expert_counts"] = load;     // per layer, E experts then skip
  std::string task_line;
  if (!std::isnan(val)) {
    row["val_loss"] = val;
    for (const auto& [key, value] : task_metrics_) {
      row[key] = value;
      task_line += str_cat(" | ", key, " ", value);
    }
  }
  if (dp_) row["comm_s"] = s.comm_s;  // rank 0's time blocked in communication this step
  metrics_.write(row);
  if (step_ % c_.log_every == 0 || step_ == 1 || last || !std::isnan(val)) {
    say("step %5ld/%ld | loss %.4f | lr %.2e | gnorm %6.3f | %7.0f tok/s | MFU %4.1f%% | load H/lnE min "
        "%.3f | skip %.3f | ETA %s%s\n",
        long(step_), long(c_.steps), s.sr.loss, s.sr.lr, s.sr.grad_norm, s.tps, 100 * s.mfu, ent_min,
        skip_frac, format_duration(std::max(0.0, s.eta)).c_str(),
        std::isnan(val) ? "" : str_cat(" | val ", val, task_line).c_str());
  }
}

// A training checkpoint of step `at_step` (train/checkpoint_saves.h): this rank's tensors and the state.
void Trainer::save_checkpoint(int64_t at_step) {
  saves_.save(
      at_step, [&] { return checkpoint_tensors(tm_, plan_, optim_, balancer_, rank_); },
      [&] { return checkpoint_state(); });
}

// The manifest's "state": what restore() reads besides the tensors, and what a resumed run must match.
nlohmann::json Trainer::checkpoint_state() const {
  const data::LoaderState ls = data_.loader.state();
  return {{"loader", {{"seed", ls.seed}, {"epoch", ls.epoch}, {"position", ls.position}}},
          {"optimizer_steps", optim_.steps_taken()},
          {"balancer_steps", balancer_.steps_taken()},
          {"skipped_steps", sum_.skipped_steps},
          {"data_step", data_step_},
          {"rollbacks", rollbacks_},
          {"bad_steps", bad_steps_.state()},
          // Training draws no random numbers after the initialisation: the loader's order is a function
          // of (seed, epoch), saved above. The final sample's sampler is seeded afresh.
          {"rng", {{"loader_seed", ls.seed}}},
          {"run", run_shape(c_, world_)},
          {"identity", identity_.to_json()},
          {"threads", num_threads()},
          {"train_config", nlohmann::json::parse(c_.text, nullptr, false).is_discarded()
                               ? nlohmann::json(c_.text)
                               : nlohmann::json::parse(c_.text)}};
}

// Preempted: the checkpoint of this step (just started) is committed before the loop ends.
void Trainer::stop_for_signal(int signal) {
  saves_.settle(true, sum_.steps);
  say("train: received %s at step %ld: %s, exiting\n", preempt_signal_name(signal), long(step_),
      saves_.last_good_step() == step_ ? "checkpoint written" : "the checkpoint FAILED (see above)");
  stopped_by_signal_ = signal;
}

// ---- The end of the run ----

// Waits for the last save; a failed save with on_error = stop ends the run here (TrainSummary::stopped).
// Rank 0 of a run that was not preempted then writes the model, sample, plot and summary.
TrainSummary Trainer::finish() {
  saves_.settle(true, sum_.steps);
  saves_.report_stalls();
  if (saves_.failed_step() >= 0) {
    const int64_t good = saves_.last_good_step();
    sum_.stopped = str_cat("the checkpoint save of step ", saves_.failed_step(),
                           " failed (checkpoint.on_error = stop; ", "stopped after step ", sum_.steps, "); ",
                           good >= 0 ? "the newest good checkpoint is " + ckpt::step_dir(c_.ckpt_dir, good)
                                     : std::string("no checkpoint of this run completed"));
    return sum_;
  }
  sum_.seconds = seconds_since(t_start_);
  sum_.time_limited = time_limited_ && !stopped_by_signal_;
  if (sum_.time_limited) report_time_limit();
  if (dp_) report_communication();
  // Preempted: the training checkpoint is the result; the final model, sample, plot and summary are the
  // resumed run's (metrics.jsonl ends at the checkpoint's step, where the resumed run appends).
  if (!root_ || stopped_by_signal_) return sum_;  // rank 0 writes the model, sample, plot and summary
  heartbeat(root_, step_, "finishing");           // a supervisor must not take the writing below for a hang
  write_model();
  heartbeat(root_, step_, "finishing");
  write_sample();
  write_plot();
  write_summary();
  return sum_;
}

// max_minutes ended the run early: where, and whether --resume auto can continue it.
void Trainer::report_time_limit() const {
  const char* ck = c_.ckpt_every <= 0                      ? "no checkpoint configured"
                   : saves_.last_good_step() == sum_.steps ? "checkpoint written"
                                                           : "the checkpoint FAILED (see above)";
  say("train: time limit of %g min reached at step %ld of %ld; %s\n", c_.max_minutes, long(sum_.steps),
      long(c_.steps), ck);
}

void Trainer::report_communication() const {
  const dist::CommStats& st = dp_->stats();
  const double n = double(std::max<int64_t>(1, st.steps));
  say("train: communication per step (rank %d): %.1f ms blocked = %.1f ms reduction during the backward "
      "(overlapped part) + %.1f ms reduction wait after it + %.1f ms parameter broadcast + %.1f ms small "
      "collectives\n",
      rank_, 1e3 * st.exposed_s() / n, 1e3 * st.overlapped_s / n, 1e3 * st.reduce_wait_s / n,
      1e3 * st.broadcast_s / n, 1e3 * st.small_s / n);
}

// The trained model in HF layout, with its tokenizer.
void Trainer::write_model() const {
  namespace fs = std::filesystem;
  const std::string model_dir = c_.out_dir + "/model";
  remove_model_files(model_dir);  // e.g. a tokenizer.json that TRAIN.json no longer names
  save_hf_checkpoint(model_dir, tm_.master.cfg, tm_.master.w,
                     c_.save_dtype == "bf16" ? DType::BF16 : DType::F32);
  if (!c_.tokenizer.empty())
    fs::copy_file(c_.tokenizer, model_dir + "/tokenizer.json", fs::copy_options::overwrite_existing);
  say("train: %ld steps in %s; checkpoint written to %s\n", long(sum_.steps),
      format_duration(sum_.seconds).c_str(), model_dir.c_str());
  if (data_.val)
    say("train: final validation loss %.4f nats/token vs the validation text's unigram entropy %.4f\n",
        sum_.final_val_loss, data_.val_unigram);
}

// A sample from the trained model (with a tokenizer and sample_tokens > 0): printed and sample.txt.
void Trainer::write_sample() const {
  if (c_.tokenizer.empty() || c_.sample_tokens <= 0) return;
  Tokenizer tok = Tokenizer::load(c_.tokenizer);
  std::vector<int32_t> prompt = tok.encode(c_.sample_prompt, true);
  GenerateOptions go;
  go.max_new_tokens = c_.sample_tokens;
  go.sampler.greedy = c_.sample_temperature <= 0;
  go.sampler.temperature = c_.sample_temperature;
  go.sampler.top_k = c_.sample_top_k;
  go.sampler.seed = 1;
  auto out = generate(tm_.compute, prompt.data(), 1, int64_t(prompt.size()), go);
  std::string text = c_.sample_prompt + tok.decode(out[0], true);
  std::printf("sample: %s\n", text.c_str());
  std::ofstream(c_.out_dir + "/sample.txt") << text << "\n";
}

// The plot (needs python3-matplotlib; the metrics stay in metrics.jsonl either way).
void Trainer::write_plot() const {
  const std::string plot = c_.out_dir + "/training.png", script = find_tool_script("plot_train.py");
  if (script.empty()) {
    say("train: no plot: tools/plot_train.py is neither beside this binary nor in ../tools from it\n");
    return;
  }
  if (run_with_heartbeat("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1", root_, step_,
                         "finishing") != 0) {
    say("train: no plot (%s needs /usr/bin/python3 with matplotlib)\n", script.c_str());
    return;
  }
  const std::string cmd = "/usr/bin/python3 " + shell_quote(script) + " " +
                          shell_quote(c_.out_dir + "/metrics.jsonl") + " " + shell_quote(plot) + " 2>&1";
  if (run_with_heartbeat(cmd, root_, step_, "finishing") == 0)
    say("train: plot written to %s\n", plot.c_str());
  else
    say("train: no plot: %s failed (see above)\n", script.c_str());
}

// summary.json: the TrainSummary, the world and the optimizer and communication figures.
void Trainer::write_summary() const {
  nlohmann::json s = {
      {"run_id", identity_.run_id},
      {"config_hash", identity_.config_hash},
      {"steps", sum_.steps},
      {"steps_planned", c_.steps},
      // All the steps trained: --resume auto leaves a complete run as it is.
      {"complete", sum_.steps == c_.steps},
      {"final_train_loss", sum_.final_train_loss},
      {"final_val_loss", sum_.final_val_loss},
      {"seconds", sum_.seconds},
      {"skipped_steps", sum_.skipped_steps},
      {"val_unigram_entropy", data_.val ? nlohmann::json(data_.val_unigram) : nlohmann::json(nullptr)},
      {"world", world_},
      {"optimizer_state_bytes_per_rank", state_per_rank_},
      {"optimizer_state_bytes_single", state_single_}};
  if (sum_.time_limited) s["stopped"] = str_cat("time limit of ", c_.max_minutes, " min");
  if (dp_) {
    const dist::CommStats& st = dp_->stats();
    const double n = double(std::max<int64_t>(1, st.steps));
    s["comm_ms_per_step"] = {{"blocked", 1e3 * st.exposed_s() / n},
                             {"during_backward", 1e3 * st.overlapped_s / n},
                             {"reduce_wait", 1e3 * st.reduce_wait_s / n},
                             {"broadcast", 1e3 * st.broadcast_s / n},
                             {"small", 1e3 * st.small_s / n}};
  }
  std::ofstream(c_.out_dir + "/summary.json") << s.dump(2) << "\n";
}

// The summary of a run that had already finished, for the caller (its summary.json, read on rank 0);
// nothing is trained or written.
TrainSummary already_complete(const TrainConfig& c, const RunStart& start, bool root) {
  TrainSummary s;
  s.already_complete = true;
  s.steps = start.checkpoint ? start.checkpoint->step() : c.steps;
  if (!root) return s;
  std::ifstream f(c.out_dir + "/summary.json");
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_object()) {
    s.final_train_loss = j.value("final_train_loss", 0.0);
    s.final_val_loss = j.value("final_val_loss", 0.0);
    s.skipped_steps = j.value("skipped_steps", int64_t(0));
    s.seconds = j.value("seconds", 0.0);
  }
  return s;
}

}  // namespace

TrainSummary run_training(const TrainConfig& c, const RunOptions& run) {
  dist::Comm& comm = dist::Comm::world();
  // say() routing and the output directory, for the whole run.
  RunLog log(run.rank_log_dir, c.out_dir, comm.rank(), comm.is_root());
  // First the run's directories and the checkpoint to resume: another run's directory is refused before
  // the expensive start-up, and a run that has already finished is left as it is.
  RunStart start = plan_run_start(c, run.resume, run.overwrite, comm);
  if (start.complete) return already_complete(c, start, comm.is_root());
  Trainer trainer(c, run, std::move(start));
  return trainer.run();
}

}  // namespace zaya::train

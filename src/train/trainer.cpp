#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "ckpt/async_saver.h"
#include "ckpt/checkpoint.h"
#include "core/error.h"
#include "core/threads.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "dist/zero1.h"
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
#include "train/clip.h"
#include "train/optimizer.h"
#include "train/preempt.h"
#include "train/schedule.h"
#include "train/train_model.h"
#include "train/train_step.h"

namespace zaya::train {

namespace {

using clock_type = std::chrono::steady_clock;

// Where the trainer's log lines go: stderr on rank 0 only, and with RunOptions::rank_log_dir each rank's own
// file as well.
struct LogSink {
  bool to_stderr = true;
  std::FILE* file = nullptr;
};
LogSink g_log;

__attribute__((format(printf, 1, 2))) void say(const char* fmt, ...) {
  va_list ap;
  if (g_log.to_stderr) {
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
  }
  if (g_log.file) {
    va_start(ap, fmt);
    std::vfprintf(g_log.file, fmt, ap);
    va_end(ap);
    std::fflush(g_log.file);
  }
}

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

// Liveness for a supervisor (`zaya launch`, src/launch/): with ZAYA_HEARTBEAT_FILE set, rank 0 rewrites that
// file with "<step> <phase>\n" at start-up, after every step and around every checkpoint save; a supervisor
// that sees its modification time stop advancing treats the job as hung. Rank 0 suffices: a rank that hangs
// stops rank 0 at the next collective.
void heartbeat(bool root, int64_t step, const char* phase) {
  static const char* path = std::getenv("ZAYA_HEARTBEAT_FILE");
  if (!root || !path) return;
  std::FILE* f = std::fopen(path, "w");
  if (!f) return;  // liveness is advisory: never stop training for it
  std::fprintf(f, "%lld %s\n", (long long)step, phase);
  std::fclose(f);
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

// Keeps the metrics rows of steps before `first_step` (a resumed run appends after them).
void truncate_metrics(const std::string& path, int64_t first_step) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step") || j["step"].get<int64_t>() >= first_step) break;
    kept += line + "\n";
  }
  in.close();
  std::ofstream(path + ".tmp", std::ios::binary) << kept;
  fs::rename(path + ".tmp", path);
}

}  // namespace

TrainSummary run_training(const TrainConfig& c, const RunOptions& run) {
  namespace fs = std::filesystem;
  const auto t_start = clock_type::now();
  PreemptGuard preempt_guard;  // SIGTERM / SIGINT / SIGUSR1: finish the step, checkpoint, return normally
  dist::Comm& comm = dist::Comm::world();
  const int rank = comm.rank(), world = comm.size();
  const bool root = comm.is_root();
  g_log.to_stderr = root;
  if (!run.rank_log_dir.empty()) {
    fs::create_directories(run.rank_log_dir);
    const std::string path = str_cat(run.rank_log_dir, "/rank", rank, ".log");
    g_log.file = std::fopen(path.c_str(), "w");
    ZAYA_CHECK(g_log.file, path, ": cannot write the rank's log");
  }
  if (root) fs::create_directories(c.out_dir);
  const ZayaConfig& mc = c.model;
  const int64_t L = mc.num_hidden_layers, E = mc.num_experts;
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

  TrainModel tm = TrainModel::create(mc, c.init_from, c.init_seed, c.dtype);
  ZayaModel& master = tm.master;
  ZayaModel& compute = tm.compute;
  // ZeRO-1: this rank's shards of the optimizer (all of it in a world of one).
  std::vector<ParamGroup> groups = zaya_param_groups(tm.params, c.optim);
  dist::ShardPlan plan = dist::plan_zero1(tm.params, groups, c.optim, world);
  Optimizer optim = world > 1 ? Optimizer(tm.params, groups, c.optim, plan.owned(rank))
                              : Optimizer(tm.params, groups, c.optim);
  std::unique_ptr<dist::Zero1> dp;
  if (world > 1) dp = std::make_unique<dist::Zero1>(comm, tm.params, plan, run.overlap);
  BalanceController balancer(L, E, c.optim.balancer);
  const std::vector<int64_t> state_per_rank = comm.allgather(int64_t(optim.state_bytes()), "optimizer size");
  const size_t state_single = plan.total_state_bytes + sizeof(int64_t);  // + the step counter

  // MFU is the job's: global tokens/s against the sum of every rank's measured GEMM peak (each with its
  // threads).
  const double peak = comm.sum_in_rank_order(measure_gemm_peak_gflops(c.dtype), "GEMM peak");
  const double flops_per_token = 3.0 * forward_flops_per_token(mc, c.seq_len);  // forward + backward
  const size_t weight_bytes = tm.weight_bytes();
  say("train: %.2f M parameters, %ld layers x %ld experts, %s GEMMs, %ld tokens/step (%ld x %ld x %ld)\n"
      "train: weights %.1f MB + grads %.1f MB + optimizer state %.1f MB (fp32); GEMM peak %.0f GFLOP/s (all "
      "ranks)\n",
      mc.num_params() / 1e6, long(L), long(E), c.dtype == DType::BF16 ? "bf16" : "fp32",
      long(c.tokens_per_step()), long(c.micro_batch), long(c.seq_len), long(c.grad_accum), weight_bytes / 1e6,
      weight_bytes / 1e6, optim.state_bytes() / 1e6, peak);
  if (world > 1) {
    std::string per_rank;
    int64_t most = 0;
    for (int r = 0; r < world; r++) {
      per_rank += str_cat(r ? ", " : "", state_per_rank[size_t(r)] / 1e6);
      most = std::max(most, state_per_rank[size_t(r)]);
    }
    say("train: data parallel over %d ranks x %d OpenMP threads (rank %d): batch rows split %ld-way; ZeRO-1 "
        "optimizer state per rank [%s] MB, at most %.3f of the single-process %.1f MB (ideal 1/%d = "
        "%.3f)%s\n",
        world, num_threads(), rank, long(world), per_rank.c_str(), double(most) / double(state_single),
        state_single / 1e6, world, 1.0 / world,
        run.overlap ? "; gradient reductions started during the backward (--overlap)" : "");
  }

  // The state a checkpoint restores: weights, optimizer and balancer state, the bad-step window and
  // counters; with `with_loader` also the data position (a rollback keeps the current one: it skips the data
  // that led to the bad steps).
  TrainSummary sum;
  BadStepPolicy bad_steps(c.spike_zscore, c.spike_window, c.max_bad_steps);
  int64_t data_step = 1;  // the step's batches are the data_step-th step's worth drawn by this run (rollbacks
                          // do not rewind it): the ZAYA_FAULT_NAN hook and the rollback log count in it
  int64_t rollbacks = 0;
  auto restore = [&](const ckpt::Checkpoint& ck, bool with_loader) {
    const nlohmann::json& st = ck.state();
    // Batch sizes are global, so the data stream and the trajectory do not depend on the world size: a
    // checkpoint of W ranks continues at W' (the slices are re-cut to this run's ZeRO-1 plan).
    nlohmann::json want = run_shape(c, world), saved = st.value("run", nlohmann::json());
    if (saved.is_object()) saved.erase("world");
    want.erase("world");
    ZAYA_CHECK(saved == want, ck.dir(), ": saved with ", saved.dump(), ", this run is ", want.dump(),
               " (batch, data seed, dtype and model must match to continue)");
    if (ck.world() != world)
      say("train: resharding %s: saved by %d rank%s, loading into %d\n", ck.dir().c_str(), ck.world(),
          ck.world() == 1 ? "" : "s", world);
    ZayaWeights w = master.w;
    for (auto& np : named_params(master.cfg, w)) ck.assemble(np.name, DType::F32, np.shape, np.slot->data);
    optim.load_state_slices(
        [&](const Optimizer::StateSlice& s) {
          ck.assemble_range(s.name, s.data.dtype, s.whole, s.begin, s.data.numel(), s.data.data);
        },
        ck.dir());
    std::vector<std::pair<std::string, Tensor>> bal_state;
    for (auto& t : ck.tensors_of(0))
      if (t.first.rfind("balancer.", 0) == 0) bal_state.push_back(t);
    balancer.load_state(bal_state, ck.dir());
    tm.refresh_compute();
    const std::string where = ck.dir() + "/manifest.json";
    try {
      if (with_loader) {
        const auto& ls = st.at("loader");
        loader.restore({ls.at("seed").get<uint64_t>(), ls.at("epoch").get<uint64_t>(),
                        ls.at("position").get<uint64_t>()});
        data_step = st.value("data_step", ck.step() + 1);
        rollbacks = st.value("rollbacks", int64_t(0));
        sum.skipped_steps = st.value("skipped_steps", int64_t(0));  // a rollback keeps the run's count
      }
      if (st.contains("bad_steps")) bad_steps.load_state(st["bad_steps"], where);
    } catch (const nlohmann::json::exception& e) {
      throw Error(str_cat(where, ": field 'state' is malformed (", e.what(), ")"));
    }
  };
  int64_t first_step = 1;
  if (!run.resume.empty()) {
    std::unique_ptr<ckpt::Checkpoint> ck;
    if (run.resume == "auto") {
      std::vector<std::string> skipped;
      ck = ckpt::open_latest(c.ckpt_dir, &skipped);
      for (const auto& why : skipped) say("train: resume: skipping %s\n", why.c_str());
      // Directories without COMPLETE were never committed (a save cut short): they do not stop a fresh
      // start. A committed one that fails to verify does: starting over would silently lose the run.
      int64_t committed = 0;
      for (const auto& l : ckpt::list_checkpoints(c.ckpt_dir)) committed += l.complete;
      ZAYA_CHECK(ck || committed == 0, c.ckpt_dir, ": none of the ", committed,
                 " committed checkpoints verifies; refusing to start over (remove them or pick one with "
                 "--resume DIR)");
      if (!ck)
        say("train: resume auto: no committed checkpoint under %s, starting fresh\n", c.ckpt_dir.c_str());
    } else {
      ck = std::make_unique<ckpt::Checkpoint>(ckpt::Checkpoint::open(run.resume));
    }
    if (ck) {
      restore(*ck, true);
      first_step = ck->step() + 1;
      sum.steps = ck->step();
      if (root) truncate_metrics(c.out_dir + "/metrics.jsonl", first_step);
      say("train: resumed from %s (step %ld)\n", ck->dir().c_str(), long(ck->step()));
    }
  }
  heartbeat(root, first_step - 1, "started");
  std::ofstream events;  // rollbacks, skipped updates, failed saves: one JSON object per line (rank 0)
  if (root) events.open(c.out_dir + "/events.jsonl", std::ios::app);
  auto event = [&](nlohmann::json e) {
    if (root) events << e.dump() << "\n" << std::flush;
  };

  // Checkpoints. A save stages this rank's state (the stall) and writes it in the background; the commit
  // (rank 0: manifest, COMPLETE, retention) follows at the first step boundary where every rank's write has
  // finished, decided collectively so that all ranks agree. One save in flight at most.
  ckpt::AsyncSaveOptions save_opt;
  save_opt.io_threads = int(c.ckpt_io_threads);
  ckpt::AsyncSaver saver(save_opt);
  struct PendingSave {
    int64_t step = 0;
    std::string dir;
    nlohmann::json state;  // captured when staged: the loader and counters of that step
    clock_type::time_point t0;
    double stall_s = 0;
    int64_t local = 0;  // this rank's write: 0 in flight, 1 written, 2 failed
    std::string error;
  };
  std::optional<PendingSave> pending;
  int64_t last_good_step = -1;    // the newest checkpoint committed by this run
  int64_t failed_save_step = -1;  // with checkpoint.on_error = stop: the save that failed, which ends the run
  double stall_total = 0, stall_max = 0;
  int64_t saves = 0;
  auto settle = [&](bool block) {
    if (!pending) return;
    if (pending->local == 0 && (block || saver.idle())) {
      pending->error = saver.wait();
      pending->local = pending->error.empty() ? 1 : 2;
      if (!pending->error.empty() && !root)  // only rank 0 logs to stderr: other ranks say it themselves
        std::fprintf(stderr, "zaya train: rank %d: checkpoint step %ld failed: %s\n", rank,
                     long(pending->step), pending->error.c_str());
    }
    int64_t all = pending->local;  // 0 if any rank still writes, else 2 if any failed, else 1
    if (world > 1) {
      bool writing = false, failed = false;
      for (int64_t s : comm.allgather(pending->local, "checkpoint write status")) {
        writing |= s == 0;
        failed |= s == 2;
      }
      all = writing ? 0 : failed ? 2 : 1;
    }
    if (all == 0) return;
    const PendingSave p = std::move(*pending);
    pending.reset();
    if (all == 2) {
      // The previous checkpoint is untouched; the partial directory has no manifest and is removed.
      if (root) {
        std::error_code ec;
        std::filesystem::remove_all(p.dir, ec);
      }
      say("train: WARNING: checkpoint at step %ld failed%s%s; the newest good checkpoint is %s; %s\n",
          long(p.step), p.error.empty() ? " on another rank" : ": ", p.error.c_str(),
          last_good_step >= 0 ? ckpt::step_dir(c.ckpt_dir, last_good_step).c_str() : "none from this run",
          c.ckpt_on_error == "stop" ? "stopping (checkpoint.on_error = stop)"
                                    : "training continues (checkpoint.on_error = continue)");
      event({{"event", "checkpoint_failed"}, {"step", p.step}, {"error", p.error}});
      if (c.ckpt_on_error == "stop") failed_save_step = p.step;
      return;
    }
    heartbeat(root, std::max(sum.steps, p.step), "committing");  // the step reached, not the saved one
    if (root) {
      ckpt::commit(p.dir, p.step, world, p.state);
      auto removed = ckpt::apply_retention(c.ckpt_dir, c.ckpt_keep_last, c.ckpt_keep_every);
      const ckpt::AsyncSaveStats& s = saver.last_stats();
      say("train: checkpoint %s committed: %.1f MB per rank staged in %.3f s (the training stall), written "
          "in "
          "%.2f s (%.0f MB/s%s) while training went on, %.2f s from staging to commit%s\n",
          p.dir.c_str(), s.bytes / 1e6, p.stall_s, s.write_s, s.bytes / 1e6 / std::max(s.write_s, 1e-9),
          s.direct ? ", O_DIRECT" : ", buffered", seconds_since(p.t0),
          removed.empty() ? "" : str_cat("; retention removed ", removed.size()).c_str());
    }
    last_good_step = p.step;
    heartbeat(root, std::max(sum.steps, p.step), "saved");
  };
  auto save_checkpoint = [&](int64_t at_step) {
    settle(true);  // at most one save in flight
    const std::string dir = ckpt::step_dir(c.ckpt_dir, at_step);
    heartbeat(root, at_step, "saving");
    const auto t0 = clock_type::now();
    if (root) ckpt::remove_partial(dir);
    comm.allgather(0, "checkpoint start");
    PendingSave p;
    p.step = at_step;
    p.dir = dir;
    p.t0 = t0;
    saver.start(dir, rank, checkpoint_tensors(tm, plan, optim, balancer, rank));
    const data::LoaderState ls = loader.state();
    p.state = {{"loader", {{"seed", ls.seed}, {"epoch", ls.epoch}, {"position", ls.position}}},
               {"optimizer_steps", optim.steps_taken()},
               {"balancer_steps", balancer.steps_taken()},
               {"skipped_steps", sum.skipped_steps},
               {"data_step", data_step},
               {"rollbacks", rollbacks},
               {"bad_steps", bad_steps.state()},
               // Training draws no random numbers after the initialisation: the loader's order is a function
               // of (seed, epoch), saved above. The final sample's sampler is seeded afresh.
               {"rng", {{"loader_seed", ls.seed}}},
               {"run", run_shape(c, world)},
               {"threads", num_threads()},
               {"train_config", nlohmann::json::parse(c.text, nullptr, false).is_discarded()
                                    ? nlohmann::json(c.text)
                                    : nlohmann::json::parse(c.text)}};
    p.stall_s = seconds_since(t0);
    stall_total += p.stall_s;
    stall_max = std::max(stall_max, p.stall_s);
    saves++;
    pending = std::move(p);
    if (!c.ckpt_async) settle(true);
  };
  if (c.ckpt_every > 0)
    saver.reserve(ckpt::AsyncSaver::layout_bytes(checkpoint_tensors(tm, plan, optim, balancer, rank)));

  std::ofstream metrics;
  auto open_metrics = [&](bool append) {
    if (!root) return;
    metrics.open(c.out_dir + "/metrics.jsonl", std::ios::out | (append ? std::ios::app : std::ios::trunc));
    ZAYA_CHECK(metrics.good(), c.out_dir, "/metrics.jsonl: cannot write");
  };
  open_metrics(first_step > 1);
  // Roll back after too many consecutive bad steps: the newest committed checkpoint's state, the current
  // data position (the batches since that checkpoint are skipped). Returns the step to continue after.
  auto roll_back = [&](int64_t at_step) -> int64_t {
    settle(true);
    std::vector<std::string> skipped;
    std::unique_ptr<ckpt::Checkpoint> ck = ckpt::open_latest(c.ckpt_dir, &skipped);
    for (const auto& why : skipped) say("train: rollback: skipping %s\n", why.c_str());
    ZAYA_CHECK(ck, "step ", at_step, ": ", c.max_bad_steps,
               " consecutive bad steps (non-finite or spiking loss) and no checkpoint under ", c.ckpt_dir,
               " to roll back to (set checkpoint.every)");
    ZAYA_CHECK(++rollbacks <= 10 * std::max<int64_t>(1, c.max_bad_steps), "step ", at_step, ": ",
               rollbacks - 1, " rollbacks already: the run does not recover (lower the learning rate?)");
    restore(*ck, false);
    const int64_t back_to = ck->step();
    say("train: step %ld: %ld consecutive bad steps: rolled back to %s (step %ld); the data continues after "
        "this step's batches (the batches of %ld steps skipped)\n",
        long(at_step), long(c.max_bad_steps), ck->dir().c_str(), long(back_to), long(at_step - back_to));
    event({{"event", "rollback"},
           {"step", at_step},
           {"to_step", back_to},
           {"checkpoint", ck->dir()},
           {"skipped_data_steps", at_step - back_to}});
    if (root) {
      metrics.close();
      truncate_metrics(c.out_dir + "/metrics.jsonl", back_to + 1);
      open_metrics(true);
    }
    return back_to;
  };
  // Test hooks (tests/checkpoint_test.cpp), in data steps (the step's batches are the data_step-th drawn):
  // ZAYA_FAULT_NAN=<first>-<last> makes those steps report a NaN loss (as bad data would);
  // ZAYA_FAULT_SPIKE=<first>-<last> shows the spike detector 10x their loss.
  int64_t nan_first = -1, nan_last = -1, spike_first = -1, spike_last = -1;
  if (const char* f = std::getenv("ZAYA_FAULT_NAN")) std::sscanf(f, "%ld-%ld", &nan_first, &nan_last);
  if (const char* f = std::getenv("ZAYA_FAULT_SPIKE")) std::sscanf(f, "%ld-%ld", &spike_first, &spike_last);

  ForwardScratch scratch;
  double ema_tps = 0;
  const auto t_loop = clock_type::now();
  int64_t step = 0;
  int stopped_by_signal = 0;  // the preemption signal that ended the loop early, 0 when it ran to the end
  for (step = first_step; step <= c.steps; step++) {
    const auto t_step = clock_type::now();
    inject_fault(rank, step);
    inject_slow_step();
    // The step's batches (ids checked here so that a bad one names the dataset file), then the step itself.
    std::vector<data::Batch> micro_batches;
    for (int64_t micro = 0; micro < c.grad_accum; micro++) {
      micro_batches.push_back(loader.next_batch(c.micro_batch, c.seq_len, rank, world));
      for (int32_t id : micro_batches.back().input_ids)
        ZAYA_CHECK(id >= 0 && id < mc.vocab_size, c.train_data, ": token id ", id,
                   " does not fit the model's vocabulary of ", mc.vocab_size);
    }
    const bool inject_nan = data_step >= nan_first && data_step <= nan_last;
    const double spike_factor = data_step >= spike_first && data_step <= spike_last ? 10.0 : 1.0;
    data_step++;
    const double comm_before = dp ? dp->stats().exposed_s() : 0;
    auto reject = [&](double l) -> const char* {
      if (inject_nan) return "non-finite loss (injected by ZAYA_FAULT_NAN)";
      return bad_steps.is_spike(l * spike_factor) ? "loss spike" : nullptr;
    };
    StepResult sr =
        train_step(tm, optim, balancer, micro_batches, c.optim, step, scratch, c.recompute, dp.get(), reject);
    if (inject_nan) sr.loss = NAN;
    if (sr.rejected && spike_factor != 1.0) sr.loss *= spike_factor;
    const double comm_s = dp ? dp->stats().exposed_s() - comm_before : 0;
    const double loss = sr.loss, lr = sr.lr;
    const std::vector<int64_t>& counts = sr.counts;
    const bool bad = !sr.finite || sr.rejected;
    if (bad) {
      sum.skipped_steps++;
      const std::string why =
          !sr.finite ? "non-finite loss or gradient"
          : std::isnan(sr.loss)
              ? std::string(sr.rejected)
              : str_cat(sr.rejected, " (z = ", bad_steps.zscore(sr.loss), " > ", c.spike_zscore, ")");
      say("train: step %ld: %s, loss %.4f, grad norm %.3g: update skipped (%ld skipped so far, %ld in a "
          "row)\n",
          long(step), why.c_str(), loss, sr.grad_norm, long(sum.skipped_steps),
          long(bad_steps.consecutive_bad() + 1));
      event({{"event", "skipped_update"},
             {"step", step},
             {"reason", why},
             {"loss", loss},
             {"grad_norm", sr.grad_norm}});
    }
    const bool roll = bad_steps.record(bad, loss);
    const double dt = seconds_since(t_step);
    const double tps = c.tokens_per_step() / dt;
    ema_tps = step == first_step ? tps : 0.9 * ema_tps + 0.1 * tps;
    const double elapsed = seconds_since(t_loop);
    double eta = (c.steps - step) * c.tokens_per_step() / ema_tps;
    if (c.max_minutes > 0) eta = std::min(eta, c.max_minutes * 60 - seconds_since(t_start));
    std::vector<double> ent = router_load_entropy(counts.data(), L, E);
    double ent_min = 1e9, skip_frac = 0;
    for (int64_t l = 0; l < L; l++) {
      ent_min = std::min(ent_min, ent[l] / std::log(double(E)));
      int64_t tot = 0;
      for (int64_t e = 0; e <= E; e++) tot += counts[l * (E + 1) + e];
      skip_frac += tot ? double(counts[l * (E + 1) + E]) / double(tot) / double(L) : 0;
    }
    const double mfu = tps * flops_per_token / 1e9 / peak;

    // A preemption signal on any rank stops every rank after this step (mpirun may deliver it to rank 0
    // only): the first rank's signal in rank order names it.
    int preempted = preempt_signal();
    if (world > 1)
      for (int64_t sig : comm.allgather(preempted, "preemption signal"))
        if (sig != 0) {
          preempted = int(sig);
          break;
        }
    if (step == c.steps) preempted = 0;  // the run is over anyway: finish it normally

    double val = NAN;
    bool last = step == c.steps || (c.max_minutes > 0 && seconds_since(t_start) > c.max_minutes * 60);
    if (c.max_minutes > 0 && world > 1) {  // clocks differ: every rank stops when any one's time is up
      int64_t any = last;
      comm.allreduce_sum(&any, 1, "time limit");
      last = any > 0;
    }
    if (root && val_data && ((c.eval_every > 0 && step % c.eval_every == 0) || last)) {
      val = validation_loss(compute, val_data, c);
      sum.final_val_loss = val;
    }
    nlohmann::json row = {{"step", step},
                          {"loss", loss},
                          {"lr", lr},
                          {"grad_norm", sr.grad_norm},
                          {"tokens_per_s", tps},
                          {"mfu", mfu},
                          {"seconds", elapsed},
                          {"tokens", step * c.tokens_per_step()},
                          {"skip_fraction", skip_frac}};
    nlohmann::json ent_norm = nlohmann::json::array(), load = nlohmann::json::array();
    for (int64_t l = 0; l < L; l++) {
      ent_norm.push_back(ent[l] / std::log(double(E)));
      load.push_back(std::vector<int64_t>(counts.begin() + l * (E + 1), counts.begin() + (l + 1) * (E + 1)));
    }
    row["load_entropy"] = ent_norm;  // per layer, divided by ln E (1 = perfectly balanced)
    row["expert_counts"] = load;     // per layer, E experts then skip
    if (!std::isnan(val)) row["val_loss"] = val;
    if (dp) row["comm_s"] = comm_s;  // rank 0's time blocked in communication this step
    if (root) {
      metrics << row.dump() << "\n";
      metrics.flush();
    }
    if (step % c.log_every == 0 || step == 1 || last || !std::isnan(val)) {
      say("step %5ld/%ld | loss %.4f | lr %.2e | gnorm %6.3f | %7.0f tok/s | MFU %4.1f%% | load H/lnE min "
          "%.3f | skip %.3f | ETA %s%s\n",
          long(step), long(c.steps), loss, lr, sr.grad_norm, tps, 100 * mfu, ent_min, skip_frac,
          format_duration(std::max(0.0, eta)).c_str(),
          std::isnan(val) ? "" : str_cat(" | val ", val).c_str());
    }
    sum.final_train_loss = loss;
    sum.steps = step;
    heartbeat(root, step, "step");
    if (roll && !preempted) {
      step = roll_back(step);  // the loop continues with the step after the checkpoint's
      continue;
    }
    settle(false);  // commits the save in flight once every rank's write finished
    // Preempted: a checkpoint at this step even with checkpoint.every 0, so that --resume auto continues.
    if (preempted || (c.ckpt_every > 0 && (step % c.ckpt_every == 0 || last))) save_checkpoint(step);
    if (preempted) {
      settle(true);
      say("train: received %s at step %ld: %s, exiting\n", preempt_signal_name(preempted), long(step),
          last_good_step == step ? "checkpoint written" : "the checkpoint FAILED (see above)");
      stopped_by_signal = preempted;
      break;
    }
    if (failed_save_step >= 0 || last) break;
  }
  settle(true);
  if (saves > 0)
    say("train: %ld checkpoints: training stall %.3f s mean, %.3f s max per save\n", long(saves),
        stall_total / double(saves), stall_max);
  if (failed_save_step >= 0) {
    sum.stopped = str_cat("the checkpoint save of step ", failed_save_step,
                          " failed (checkpoint.on_error = stop; ", "stopped after step ", sum.steps, "); ",
                          last_good_step >= 0
                              ? "the newest good checkpoint is " + ckpt::step_dir(c.ckpt_dir, last_good_step)
                              : std::string("no checkpoint of this run completed"));
    if (g_log.file) std::fclose(g_log.file);
    g_log = {};
    return sum;
  }
  sum.seconds = seconds_since(t_start);
  if (dp) {
    const dist::CommStats& st = dp->stats();
    const double n = double(std::max<int64_t>(1, st.steps));
    say("train: communication per step (rank %d): %.1f ms blocked = %.1f ms reduction during the backward "
        "(overlapped part) + %.1f ms reduction wait after it + %.1f ms parameter broadcast + %.1f ms small "
        "collectives\n",
        rank, 1e3 * st.exposed_s() / n, 1e3 * st.overlapped_s / n, 1e3 * st.reduce_wait_s / n,
        1e3 * st.broadcast_s / n, 1e3 * st.small_s / n);
  }
  // Preempted: the training checkpoint is the result; the final model, sample, plot and summary are the
  // resumed run's (metrics.jsonl ends at the checkpoint's step, where the resumed run appends).
  if (!root || stopped_by_signal) {  // rank 0 writes the checkpoint, sample, plot and summary
    if (g_log.file) std::fclose(g_log.file);
    g_log = {};
    return sum;
  }

  // The trained model in HF layout, with its tokenizer.
  const std::string model_dir = c.out_dir + "/model";
  save_hf_checkpoint(model_dir, master.cfg, master.w, c.save_dtype == "bf16" ? DType::BF16 : DType::F32);
  if (!c.tokenizer.empty())
    fs::copy_file(c.tokenizer, model_dir + "/tokenizer.json", fs::copy_options::overwrite_existing);
  say("train: %ld steps in %s; checkpoint written to %s\n", long(sum.steps),
      format_duration(sum.seconds).c_str(), model_dir.c_str());
  if (val_data)
    say("train: final validation loss %.4f nats/token vs the validation text's unigram entropy %.4f\n",
        sum.final_val_loss, val_unigram);

  // A sample from the trained model.
  if (!c.tokenizer.empty() && c.sample_tokens > 0) {
    Tokenizer tok = Tokenizer::load(c.tokenizer);
    std::vector<int32_t> prompt = tok.encode(c.sample_prompt, true);
    GenerateOptions go;
    go.max_new_tokens = c.sample_tokens;
    go.sampler.greedy = c.sample_temperature <= 0;
    go.sampler.temperature = c.sample_temperature;
    go.sampler.top_k = c.sample_top_k;
    go.sampler.seed = 1;
    auto out = generate(compute, prompt.data(), 1, int64_t(prompt.size()), go);
    std::string text = c.sample_prompt + tok.decode(out[0], true);
    std::printf("sample: %s\n", text.c_str());
    std::ofstream(c.out_dir + "/sample.txt") << text << "\n";
  }

  // The plot (needs python3-matplotlib; the metrics stay in metrics.jsonl either way).
  std::string plot = c.out_dir + "/training.png";
  std::string cmd =
      "/usr/bin/python3 tools/plot_train.py '" + c.out_dir + "/metrics.jsonl' '" + plot + "' 2>&1";
  if (fs::exists("tools/plot_train.py") && std::system(cmd.c_str()) == 0)
    say("train: plot written to %s\n", plot.c_str());
  else
    say("train: no plot (needs /usr/bin/python3 with matplotlib and tools/plot_train.py)\n");
  nlohmann::json s = {
      {"steps", sum.steps},
      {"final_train_loss", sum.final_train_loss},
      {"final_val_loss", sum.final_val_loss},
      {"seconds", sum.seconds},
      {"skipped_steps", sum.skipped_steps},
      {"val_unigram_entropy", val_data ? nlohmann::json(val_unigram) : nlohmann::json(nullptr)},
      {"world", world},
      {"optimizer_state_bytes_per_rank", state_per_rank},
      {"optimizer_state_bytes_single", state_single}};
  if (dp) {
    const dist::CommStats& st = dp->stats();
    const double n = double(std::max<int64_t>(1, st.steps));
    s["comm_ms_per_step"] = {{"blocked", 1e3 * st.exposed_s() / n},
                             {"during_backward", 1e3 * st.overlapped_s / n},
                             {"reduce_wait", 1e3 * st.reduce_wait_s / n},
                             {"broadcast", 1e3 * st.broadcast_s / n},
                             {"small", 1e3 * st.small_s / n}};
  }
  std::ofstream(c.out_dir + "/summary.json") << s.dump(2) << "\n";
  if (g_log.file) std::fclose(g_log.file);
  g_log = {};
  return sum;
}

}  // namespace zaya::train

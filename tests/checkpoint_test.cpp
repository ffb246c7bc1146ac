// Training checkpoints (ckpt/checkpoint.h, `zaya train --resume`) on real files:
//   1. 8 steps straight vs 4 steps + checkpoint + a killed process + a fresh process resuming to 8: every
//      logged loss, the final parameters, optimizer and balancer state are bitwise equal;
//   2. a truncated data file, a flipped byte and a missing completion marker are each detected and
//      `--resume auto` falls back to the previous checkpoint (and still ends bitwise equal);
//   3. retention keeps the newest K and every M-th step; slices assemble; malformed manifests are errors;
//   4. SIGTERM mid-run: the step finishes, a checkpoint is written at it, exit 0; resuming ends bitwise
//   equal;
//   5. `zaya export` of the last checkpoint equals the final saved model bitwise.
#include "ckpt/checkpoint.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "data/prepare.h"
#include "model/zaya-weights.h"
#include "test_util.h"
#include "tiny_training_data.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"

using namespace zaya;
namespace fs = std::filesystem;

namespace {

// A temp directory with a tiny corpus, its tokenizer and prepared shards (as tests/train_test.cpp).
struct Fixture {
  fs::path dir;
  Fixture() {
    dir = fs::temp_directory_path() / ("zaya_ckpt_test_" + std::to_string(getpid()));
    test::write_tiny_training_dir(dir, 5);
  }
  ~Fixture() { fs::remove_all(dir); }

  // A TRAIN.json for run `name` (output in dir/name, checkpoints every 4 steps), written to dir/name.json.
  // Saves are synchronous unless `async_saves`: an asynchronous save commits at the first step boundary
  // after its write finished, so which checkpoints exist when a process is killed depends on timing; the
  // tests that assert a particular one exists use synchronous saves.
  std::string config(const std::string& name, bool async_saves = false,
                     const std::string& checkpoint_extra = "", const std::string& top_extra = "") const {
    const std::string text = test::tiny_train_json(
        dir, dir / name, 3, 4, 4, 5,
        std::string(", \"async\": ") + (async_saves ? "true" : "false") + checkpoint_extra, top_extra);
    const std::string path = (dir / (name + ".json")).string();
    std::ofstream(path) << text;
    return path;
  }
};

// Runs the zaya binary; returns its exit status (the log goes to `log`).
int run_zaya(const std::string& env, const std::string& args, const std::string& log,
             const std::string& launcher = "") {
  return test::run_shell(env + " " + launcher + " " + ZAYA_BINARY + " " + args, log);
}

std::vector<std::string> metrics_field(const fs::path& path, const char* field) {
  std::vector<std::string> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    out.push_back(std::to_string(j["step"].get<int64_t>()) + ":" + j[field].dump());
  }
  return out;
}

std::string bytes_of(const fs::path& p) {
  return test::read_text(p.string());
}

// The straight run's results: losses, grad norms, the final checkpoint's data file and the saved model.
struct RunResult {
  std::vector<std::string> losses, grad_norms;
  std::string final_state, final_model;
};

RunResult result_of(const fs::path& out, int world = 1) {
  RunResult r{metrics_field(out / "metrics.jsonl", "loss"), metrics_field(out / "metrics.jsonl", "grad_norm"),
              "", bytes_of(out / "model" / "model.safetensors")};
  for (int rank = 0; rank < world; rank++)
    r.final_state +=
        bytes_of(out / "checkpoints" / "step_00000008" / ("rank_0000" + std::to_string(rank) + ".bin"));
  return r;
}

// mpirun as root in CI containers, ranks not bound, one thread each (as tests/dist_test.cpp).
const char* kMpirun2 =
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 mpirun --oversubscribe "
    "--bind-to none -x OMP_NUM_THREADS -x ZAYA_DIST_FAULT -np 2";

void expect_same(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.losses.size(), 8u);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.grad_norms, b.grad_norms);
  EXPECT_FALSE(a.final_state.empty());
  EXPECT_TRUE(a.final_state == b.final_state) << "parameters / optimizer / balancer state differ";
  EXPECT_TRUE(a.final_model == b.final_model) << "saved models differ";
}

void flip_byte(const fs::path& p, size_t at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(std::streamoff(at));
  char c;
  f.get(c);
  f.seekp(std::streamoff(at));
  f.put(char(c ^ 0x10));
}

}  // namespace

TEST(Checkpoint, ResumeIsBitExactAndBrokenCheckpointsAreSkipped) {
  Fixture fx;
  const fs::path a = fx.dir / "straight", b = fx.dir / "killed";
  ASSERT_EQ(run_zaya("", "train --config " + fx.config("straight"), (fx.dir / "a.log").string()), 0)
      << test::read_text((fx.dir / "a.log").string());
  const RunResult straight = result_of(a);

  // 4 steps, checkpoint, then the process dies at the start of step 5; a fresh process resumes.
  const std::string cfg_b = fx.config("killed");
  EXPECT_EQ(run_zaya("ZAYA_DIST_FAULT=exit:0:5", "train --config " + cfg_b, (fx.dir / "b1.log").string()), 9);
  EXPECT_TRUE(fs::exists(b / "checkpoints" / "step_00000004" / "COMPLETE"));
  EXPECT_FALSE(fs::exists(b / "checkpoints" / "step_00000008"));
  ASSERT_EQ(run_zaya("", "train --config " + cfg_b + " --resume auto", (fx.dir / "b2.log").string()), 0)
      << test::read_text((fx.dir / "b2.log").string());
  EXPECT_NE(test::read_text((fx.dir / "b2.log").string()).find("resumed from"), std::string::npos);
  expect_same(straight, result_of(b));

  // Broken newest checkpoints: each is reported and skipped, and the previous one is used.
  const fs::path root = b / "checkpoints", step8 = root / "step_00000008", step4 = root / "step_00000004";
  const fs::path good8 = fx.dir / "good8";
  fs::copy(step8, good8, fs::copy_options::recursive);
  auto expect_fallback = [&](const std::string& reason) {
    std::vector<std::string> skipped;
    auto ck = ckpt::open_latest(root.string(), &skipped);
    ASSERT_TRUE(ck);
    EXPECT_EQ(ck->step(), 4);
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_NE(skipped[0].find(reason), std::string::npos) << skipped[0];
    EXPECT_NE(skipped[0].find("step_00000008"), std::string::npos) << skipped[0];
    fs::remove_all(step8);
    fs::copy(good8, step8, fs::copy_options::recursive);
  };
  fs::resize_file(step8 / "rank_00000.bin", fs::file_size(step8 / "rank_00000.bin") - 100);
  expect_fallback("truncated");
  flip_byte(step8 / "rank_00000.bin", fs::file_size(step8 / "rank_00000.bin") / 2);
  expect_fallback("checksum");
  fs::remove(step8 / "COMPLETE");
  expect_fallback("COMPLETE");
  {
    // A changed digit in the saved state keeps the manifest valid JSON: the checksum in COMPLETE catches it.
    std::string m = test::read_text((step8 / "manifest.json").string());
    const size_t at = m.find("\"position\": ") + 12;
    m[at] = m[at] == '1' ? '2' : '1';
    std::ofstream(step8 / "manifest.json", std::ios::binary | std::ios::trunc) << m;
  }
  expect_fallback("checksum mismatch with COMPLETE");
  flip_byte(step8 / "COMPLETE", 25);
  expect_fallback("COMPLETE");
  flip_byte(step8 / "manifest.json", 20);
  {
    std::vector<std::string> skipped;
    auto ck = ckpt::open_latest(root.string(), &skipped);
    ASSERT_TRUE(ck);
    EXPECT_EQ(ck->step(), 4);
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_NE(skipped[0].find("manifest.json"), std::string::npos) << skipped[0];
    fs::remove_all(step8);
    fs::copy(good8, step8, fs::copy_options::recursive);
  }

  // The CLI falls back too: a flipped byte in step 8, resume auto from step 4 to 8 ends bitwise as straight.
  flip_byte(step8 / "rank_00000.bin", 4096);
  ASSERT_EQ(run_zaya("", "train --config " + cfg_b + " --resume auto", (fx.dir / "b3.log").string()), 0)
      << test::read_text((fx.dir / "b3.log").string());
  const std::string log3 = test::read_text((fx.dir / "b3.log").string());
  EXPECT_NE(log3.find("skipping"), std::string::npos) << log3;
  EXPECT_NE(log3.find("checksum"), std::string::npos) << log3;
  EXPECT_NE(log3.find("step_00000004 (step 4)"), std::string::npos) << log3;
  expect_same(straight, result_of(b));

  // Every checkpoint broken: an error, not a fresh start.
  flip_byte(step4 / "rank_00000.bin", 64);
  flip_byte(step8 / "rank_00000.bin", 64);
  EXPECT_NE(run_zaya("", "train --config " + cfg_b + " --resume auto", (fx.dir / "b4.log").string()), 0);
  EXPECT_NE(test::read_text((fx.dir / "b4.log").string()).find("none of the 2 committed checkpoints"),
            std::string::npos)
      << test::read_text((fx.dir / "b4.log").string());
  // An explicit directory that does not verify is an error naming it.
  EXPECT_NE(
      run_zaya("", "train --config " + cfg_b + " --resume " + step4.string(), (fx.dir / "b5.log").string()),
      0);
  EXPECT_NE(test::read_text((fx.dir / "b5.log").string()).find("checksum"), std::string::npos);

  // Only uncommitted directories (a first save cut short): resume auto reports them and starts fresh. Such a
  // first start never got to write a summary: the complete run's summary.json would make --resume auto
  // report the run complete instead (RunDir.ResumeOfAFinishedRunChangesNothing).
  fs::remove_all(step8);
  fs::remove(step4 / "COMPLETE");
  fs::remove(b / "summary.json");
  ASSERT_EQ(run_zaya("", "train --config " + cfg_b + " --resume auto", (fx.dir / "b6.log").string()), 0)
      << test::read_text((fx.dir / "b6.log").string());
  EXPECT_NE(test::read_text((fx.dir / "b6.log").string()).find("no committed checkpoint"), std::string::npos);
  expect_same(straight, result_of(b));
}

namespace {

// A committed one-tensor checkpoint of `step` under root.
void tiny_checkpoint(const fs::path& root, int64_t step) {
  const std::string dir = ckpt::step_dir(root.string(), step);
  Tensor t = Tensor::empty(DType::F32, {3});
  t.f32()[0] = float(step);
  ckpt::write_rank_part(dir, 0, {{"x", t, {}, 0}});
  ckpt::commit(dir, step, 1, {{"note", "test"}});
}

}  // namespace

TEST(Checkpoint, RetentionKeepsLastKAndEveryMth) {
  const fs::path root = fs::temp_directory_path() / ("zaya_ckpt_ret_" + std::to_string(getpid()));
  fs::remove_all(root);
  for (int64_t s = 1; s <= 10; s++) tiny_checkpoint(root, s);
  fs::create_directories(ckpt::step_dir(root.string(), 5) + "x");       // not a step directory: left alone
  fs::remove(fs::path(ckpt::step_dir(root.string(), 5)) / "COMPLETE");  // an old incomplete one: removed
  fs::create_directories(ckpt::step_dir(root.string(), 11));            // newer, maybe being written: kept
  auto removed = ckpt::apply_retention(root.string(), 3, 4);
  std::vector<int64_t> left;
  for (const auto& c : ckpt::list_checkpoints(root.string())) left.push_back(c.step);
  EXPECT_EQ(left, (std::vector<int64_t>{4, 8, 9, 10, 11}));
  EXPECT_EQ(removed.size(), 6u);
  EXPECT_TRUE(fs::exists(ckpt::step_dir(root.string(), 5) + "x"));
  auto ck = ckpt::Checkpoint::open(ckpt::step_dir(root.string(), 10));
  EXPECT_EQ(ck.tensors_of(0).at(0).second.f32()[0], 10.0f);
  EXPECT_EQ(ck.state()["note"], "test");
  fs::remove_all(root);
}

TEST(Checkpoint, ShardsAssembleAndMalformedManifestsAreErrors) {
  const fs::path root = fs::temp_directory_path() / ("zaya_ckpt_shard_" + std::to_string(getpid()));
  fs::remove_all(root);
  const std::string dir = ckpt::step_dir(root.string(), 7);
  std::vector<float> whole(12);
  for (int i = 0; i < 12; i++) whole[size_t(i)] = float(i) * 0.5f;
  // Rank 0 owns elements [0, 5), rank 1 [5, 12) of a [3, 4] tensor.
  ckpt::write_rank_part(dir, 0, {{"w", Tensor::view(DType::F32, {5}, whole.data(), nullptr), {3, 4}, 0}});
  ckpt::write_rank_part(dir, 1, {{"w", Tensor::view(DType::F32, {7}, whole.data() + 5, nullptr), {3, 4}, 5}});
  ckpt::commit(dir, 7, 2, nlohmann::json::object());
  auto ck = ckpt::Checkpoint::open(dir);
  EXPECT_EQ(ck.world(), 2);
  std::vector<float> got(12, -1);
  ck.assemble("w", DType::F32, {3, 4}, got.data());
  EXPECT_EQ(got, whole);
  EXPECT_THROW(ck.assemble("w", DType::F32, {4, 3}, got.data()), Error);
  EXPECT_THROW(ck.assemble("missing", DType::F32, {3, 4}, got.data()), Error);

  auto expect_error = [&](const std::string& manifest, const std::string& part) {
    std::ofstream(fs::path(dir) / "manifest.json") << manifest;
    // With a marker that matches, so that the parser (not the checksum) must find the problem.
    std::ofstream(fs::path(dir) / "COMPLETE")
        << "step 7\nmanifest xxh3 " << ckpt::xxh3_hex(manifest.data(), manifest.size()) << "\n";
    try {
      ckpt::Checkpoint::open(dir);
      ADD_FAILURE() << "expected an error mentioning " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  const std::string good = test::read_text((fs::path(dir) / "manifest.json").string());
  expect_error("{", "manifest.json");
  expect_error("[]", "manifest");
  expect_error(R"({"format": "zaya-train-checkpoint-2"})", "field 'step' is missing");
  expect_error(R"({"format": "zaya-train-checkpoint-1", "step": 1})", "format zaya-train-checkpoint-2");
  auto m = nlohmann::json::parse(good);
  m["tensors"][0]["offset"] = 1u << 30;
  expect_error(m.dump(), "outside its file");
  m = nlohmann::json::parse(good);
  m["files"][0]["file"] = "../etc/passwd";
  expect_error(m.dump(), "bad data file name");
  // An empty name or "." names the checkpoint folder itself (the fuzzer found the empty one escaping as a
  // std::filesystem error from file_size on a directory).
  for (const char* name : {"", "."}) {
    m = nlohmann::json::parse(good);
    m["files"][0]["file"] = name;
    expect_error(m.dump(), "bad data file name");
  }
  m = nlohmann::json::parse(good);
  fs::create_directory(fs::path(dir) / "sub.bin");
  m["files"][0]["file"] = "sub.bin";
  expect_error(m.dump(), "not a regular file");
  m = nlohmann::json::parse(good);
  m["tensors"][1]["shape"] = {8};
  expect_error(m.dump(), "does not match");
  m = nlohmann::json::parse(good);
  m["tensors"][0]["dtype"] = "F99";
  expect_error(m.dump(), "unknown dtype");
  fs::remove_all(root);
}

// Two ranks (ZeRO-1: each rank saves its own optimizer shards and parameter slices): 8 steps straight vs
// 4 + a rank killed + resume to 8 at the same world size, bitwise; a single process refuses the 2-rank
// checkpoint.
TEST(Checkpoint, TwoRanksResumeBitExact) {
  Fixture fx;
  const fs::path a = fx.dir / "straight2", b = fx.dir / "killed2";
  ASSERT_EQ(run_zaya("", "train --config " + fx.config("straight2"), (fx.dir / "a.log").string(), kMpirun2),
            0)
      << test::read_text((fx.dir / "a.log").string());
  const RunResult straight = result_of(a, 2);
  const std::string cfg_b = fx.config("killed2");
  EXPECT_NE(run_zaya("ZAYA_DIST_FAULT=exit:1:5", "train --comm-timeout 20 --config " + cfg_b,
                     (fx.dir / "b1.log").string(), kMpirun2),
            0);
  EXPECT_TRUE(fs::exists(b / "checkpoints" / "step_00000004" / "COMPLETE"));
  EXPECT_TRUE(fs::exists(b / "checkpoints" / "step_00000004" / "rank_00001.bin"));
  ASSERT_EQ(
      run_zaya("", "train --config " + cfg_b + " --resume auto", (fx.dir / "b2.log").string(), kMpirun2), 0)
      << test::read_text((fx.dir / "b2.log").string());
  expect_same(straight, result_of(b, 2));
}

namespace {

std::vector<double> metrics_numbers(const fs::path& path, const char* field) {
  std::vector<double> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) out.push_back(nlohmann::json::parse(line)[field].get<double>());
  return out;
}

}  // namespace

// Resharding: a checkpoint written by 2 ranks (step 4) continues in 1 and in 4 processes; every later loss
// and gradient norm stays within 1e-5 (relative) of the 2-rank run's: the data stream is the same (batch
// sizes are global) and only the order of the gradient sums differs. And 1 -> 2.
TEST(Checkpoint, ReshardingContinuesTheTrajectory) {
  Fixture fx;
  const fs::path a = fx.dir / "two";
  ASSERT_EQ(run_zaya("", "train --config " + fx.config("two"), (fx.dir / "a.log").string(), kMpirun2), 0)
      << test::read_text((fx.dir / "a.log").string());
  const std::vector<double> ref_loss = metrics_numbers(a / "metrics.jsonl", "loss"),
                            ref_norm = metrics_numbers(a / "metrics.jsonl", "grad_norm");
  ASSERT_EQ(ref_loss.size(), 8u);
  const std::string kMpirun4 =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 mpirun --oversubscribe "
      "--bind-to none -x OMP_NUM_THREADS -np 4";
  auto continue_at = [&](const std::string& name, const fs::path& from, const std::string& launcher,
                         const std::vector<double>& want_loss, const std::vector<double>& want_norm) {
    SCOPED_TRACE(name);
    double max_loss = 0, max_norm = 0;
    const fs::path out = fx.dir / name;
    fs::create_directories(out / "checkpoints");
    fs::copy(from / "checkpoints" / "step_00000004", out / "checkpoints" / "step_00000004",
             fs::copy_options::recursive);
    const std::string log = (fx.dir / (name + ".log")).string();
    ASSERT_EQ(run_zaya("", "train --config " + fx.config(name) + " --resume auto", log, launcher), 0)
        << test::read_text(log);
    EXPECT_NE(test::read_text(log).find("resharding"), std::string::npos) << test::read_text(log);
    const std::vector<double> loss = metrics_numbers(out / "metrics.jsonl", "loss"),
                              norm = metrics_numbers(out / "metrics.jsonl", "grad_norm");
    ASSERT_EQ(loss.size(), 4u);  // steps 5..8 (the copied checkpoint came without the earlier metrics)
    // Another world size sums the gradient in another order: relative differences measured (Zen 5, default
    // and AVX512_CORE oneDNN ISA) up to 4.8e-9 in the loss and 3.1e-8 in the gradient norm; bars ~4x.
    for (size_t i = 4; i < 8; i++) {
      const double dl = test::rel_diff(loss[i - 4], want_loss[i]),
                   dn = test::rel_diff(norm[i - 4], want_norm[i]);
      EXPECT_LE(dl, 2e-8) << "step " << i + 1 << ": loss " << loss[i - 4] << " vs " << want_loss[i];
      EXPECT_LE(dn, 1.2e-7) << "step " << i + 1 << ": grad norm " << norm[i - 4] << " vs " << want_norm[i];
      max_loss = std::max(max_loss, dl);
      max_norm = std::max(max_norm, dn);
    }
    std::printf("%s: steps 5-8, max relative difference of losses %.2e, of gradient norms %.2e\n",
                name.c_str(), max_loss, max_norm);
  };
  continue_at("two_to_one", a, "", ref_loss, ref_norm);
  continue_at("two_to_four", a, kMpirun4, ref_loss, ref_norm);
  // 1 -> 2: a single-process run's checkpoint continues in two ranks.
  const fs::path one = fx.dir / "one";
  ASSERT_EQ(run_zaya("", "train --config " + fx.config("one"), (fx.dir / "one.log").string()), 0);
  continue_at("one_to_two", one, kMpirun2, metrics_numbers(one / "metrics.jsonl", "loss"),
              metrics_numbers(one / "metrics.jsonl", "grad_norm"));
}

// Preemption (train/preempt.h): `zaya train` with slowed steps gets SIGTERM once two steps are logged; it
// finishes the step it is in, writes a checkpoint at that step (not a multiple of checkpoint.every), exits 0
// without the final model; `--resume auto` then ends bitwise as the straight run.
namespace {

// Starts `zaya train --config cfg` (through `mpirun -np 2` when two_ranks) with 300 ms steps, sends `sig` to
// the process it started (zaya, or mpirun, which passes the signal on to its ranks) once two steps are
// logged, and checks the preemption contract: exit 0, a complete checkpoint at the step reached, no final
// model. Returns that step.
int64_t preempt(const Fixture& fx, const fs::path& out, const std::string& cfg, bool two_ranks, int sig) {
  const std::string log1 = (fx.dir / (out.filename().string() + ".preempt.log")).string();
  const pid_t pid = fork();
  if (pid == 0) {  // the child: its output to the log
    setenv("ZAYA_SLOW_STEP_MS", "300", 1);
    const int fd = open(log1.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    if (two_ranks) {
      setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
      setenv("OMP_NUM_THREADS", "1", 1);
      execlp("mpirun", "mpirun", "--oversubscribe", "--bind-to", "none", "-x", "OMP_NUM_THREADS", "-x",
             "ZAYA_SLOW_STEP_MS", "-np", "2", ZAYA_BINARY, "train", "--config", cfg.c_str(),
             static_cast<char*>(nullptr));
    } else {
      execl(ZAYA_BINARY, ZAYA_BINARY, "train", "--config", cfg.c_str(), static_cast<char*>(nullptr));
    }
    _exit(127);
  }
  EXPECT_GE(pid, 0);
  auto logged_steps = [&] { return metrics_field(out / "metrics.jsonl", "loss").size(); };
  const auto t0 = std::chrono::steady_clock::now();
  while (logged_steps() < 2 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_GE(logged_steps(), 2u) << test::read_text(log1);
  kill(pid, sig);
  int st = 0;
  EXPECT_EQ(waitpid(pid, &st, 0), pid);
  const std::string log = test::read_text(log1);
  if (two_ranks) {
    // Open MPI's mpirun exits 1 after it passed a SIGTERM on, whatever the ranks did; it reports a rank that
    // ended abnormally, and none may.
    EXPECT_TRUE(WIFEXITED(st)) << "status " << st << "\n" << log;
    EXPECT_EQ(log.find("exited on signal"), std::string::npos) << log;
    EXPECT_EQ(log.find("non-zero status"), std::string::npos) << log;
  } else {
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st << "\n" << log;
  }
  const int64_t stopped = int64_t(logged_steps());
  EXPECT_GE(stopped, 2);
  EXPECT_LT(stopped, 8) << "the run ended before the signal arrived\n" << log;
  EXPECT_NE(log.find(str_cat("received ", sig == SIGTERM ? "SIGTERM" : "SIGUSR1", " at step ", stopped,
                             ": checkpoint written, exiting")),
            std::string::npos)
      << log;
  const std::string dir = ckpt::step_dir((out / "checkpoints").string(), stopped);
  EXPECT_TRUE(fs::exists(fs::path(dir) / "COMPLETE")) << log;
  EXPECT_EQ(ckpt::Checkpoint::open(dir).step(), stopped);
  EXPECT_FALSE(fs::exists(out / "model")) << "a preempted run leaves the final model to the resumed run";
  return stopped;
}

}  // namespace

// Preemption (train/preempt.h): `zaya train` gets SIGTERM mid-run; it finishes the step it is in, writes a
// checkpoint at that step (not a multiple of checkpoint.every), exits 0 without the final model;
// `--resume auto` then ends bitwise as the straight run.
TEST(Checkpoint, SigtermSavesAndExitsCleanlyThenResumesBitExact) {
  Fixture fx;
  const fs::path a = fx.dir / "straight", b = fx.dir / "preempted";
  ASSERT_EQ(run_zaya("", "train --config " + fx.config("straight"), (fx.dir / "a.log").string()), 0)
      << test::read_text((fx.dir / "a.log").string());
  const RunResult straight = result_of(a);
  const std::string cfg_b = fx.config("preempted", true);
  const int64_t stopped = preempt(fx, b, cfg_b, false, SIGTERM);
  ASSERT_EQ(run_zaya("", "train --config " + cfg_b + " --resume auto", (fx.dir / "b2.log").string()), 0)
      << test::read_text((fx.dir / "b2.log").string());
  EXPECT_NE(test::read_text((fx.dir / "b2.log").string()).find("(step " + std::to_string(stopped) + ")"),
            std::string::npos)
      << test::read_text((fx.dir / "b2.log").string());
  expect_same(straight, result_of(b));
}

// The same under `mpirun -np 2`: SIGTERM to mpirun (what a scheduler sends) reaches both ranks, which agree
// on the step to stop at, save their shards and exit 0; two ranks resume bitwise.
TEST(Checkpoint, SigtermUnderMpirunSavesEveryRankThenResumesBitExact) {
  Fixture fx;
  const fs::path a = fx.dir / "straight2", b = fx.dir / "preempted2";
  ASSERT_EQ(run_zaya("", "train --config " + fx.config("straight2"), (fx.dir / "a.log").string(), kMpirun2),
            0)
      << test::read_text((fx.dir / "a.log").string());
  const RunResult straight = result_of(a, 2);
  const std::string cfg_b = fx.config("preempted2", true);
  const int64_t stopped = preempt(fx, b, cfg_b, true, SIGTERM);
  EXPECT_TRUE(fs::exists(fs::path(ckpt::step_dir((b / "checkpoints").string(), stopped)) / "rank_00001.bin"));
  ASSERT_EQ(
      run_zaya("", "train --config " + cfg_b + " --resume auto", (fx.dir / "b2.log").string(), kMpirun2), 0)
      << test::read_text((fx.dir / "b2.log").string());
  expect_same(straight, result_of(b, 2));
}

// Asynchronous saves change nothing but timing: the same losses and bytes as synchronous ones, and a process
// killed while saves are in flight (with 100 ms steps, at step 7) resumes from whichever checkpoint was
// committed and ends bitwise as the straight run.
TEST(Checkpoint, AsyncSavesAreBitExactAndSurviveAKill) {
  Fixture fx;
  const fs::path a = fx.dir / "sync", b = fx.dir / "async", k = fx.dir / "killed";
  ASSERT_EQ(run_zaya("", "train --config " + fx.config("sync"), (fx.dir / "a.log").string()), 0);
  ASSERT_EQ(run_zaya("", "train --config " + fx.config("async", true), (fx.dir / "b.log").string()), 0)
      << test::read_text((fx.dir / "b.log").string());
  const RunResult sync = result_of(a);
  expect_same(sync, result_of(b));
  const std::string log_b = test::read_text((fx.dir / "b.log").string());
  EXPECT_NE(log_b.find("committed"), std::string::npos) << log_b;
  EXPECT_NE(log_b.find("training stall"), std::string::npos) << log_b;
  const std::string cfg_k = fx.config("killed", true);
  EXPECT_EQ(run_zaya("ZAYA_SLOW_STEP_MS=100 ZAYA_DIST_FAULT=exit:0:7", "train --config " + cfg_k,
                     (fx.dir / "k1.log").string()),
            9);
  ASSERT_EQ(run_zaya("", "train --config " + cfg_k + " --resume auto", (fx.dir / "k2.log").string()), 0)
      << test::read_text((fx.dir / "k2.log").string());
  expect_same(sync, result_of(k));
}

// `zaya export`: the last step's training checkpoint, exported in fp32 with small shards, holds exactly the
// trainer's final model (every tensor bitwise, the same config.json); a directory that is not a checkpoint is
// an error naming it.
TEST(Checkpoint, ExportMatchesTheFinalModelBitwise) {
  Fixture fx;
  const fs::path run = fx.dir / "exported", hf = fx.dir / "hf";
  ASSERT_EQ(run_zaya("", "train --config " + fx.config("exported"), (fx.dir / "a.log").string()), 0)
      << test::read_text((fx.dir / "a.log").string());
  const std::string step8 = (run / "checkpoints" / "step_00000008").string();
  ASSERT_EQ(
      run_zaya("",
               "export --checkpoint " + step8 + " --out " + hf.string() + " --dtype fp32 --max-shard-mb 0.1",
               (fx.dir / "e.log").string()),
      0)
      << test::read_text((fx.dir / "e.log").string());
  EXPECT_TRUE(fs::exists(hf / "model.safetensors.index.json")) << "0.1 MB shards must force an index";
  int shards = 0;
  for (const auto& e : fs::directory_iterator(hf))
    if (e.path().extension() == ".safetensors") shards++;
  EXPECT_GT(shards, 1);
  EXPECT_EQ(bytes_of(hf / "config.json"), bytes_of(run / "model" / "config.json"));

  const ZayaConfig cfg = load_config((hf / "config.json").string());
  ZayaWeights got = load_weights(hf.string(), cfg, DType::F32);
  ZayaWeights want = load_weights((run / "model").string(), cfg, DType::F32);
  auto gp = named_params(cfg, got), wp = named_params(cfg, want);
  ASSERT_EQ(gp.size(), wp.size());
  for (size_t i = 0; i < gp.size(); i++) {
    ASSERT_EQ(gp[i].slot->nbytes(), wp[i].slot->nbytes()) << gp[i].name;
    EXPECT_EQ(std::memcmp(gp[i].slot->data, wp[i].slot->data, gp[i].slot->nbytes()), 0) << gp[i].name;
  }

  // `zaya forward` on the export gives the trainer's final model's logits, byte for byte.
  std::ofstream(fx.dir / "inputs.json") << R"({"input_ids": [[1, 5, 9, 2, 7, 3], [4, 4, 8, 1, 0, 6]]})";
  for (const auto& [model, out] : {std::pair<fs::path, std::string>{hf, "export"}, {run / "model", "final"}})
    ASSERT_EQ(run_zaya("",
                       "forward --model " + model.string() + " --input " + (fx.dir / "inputs.json").string() +
                           " --output " + (fx.dir / (out + ".safetensors")).string(),
                       (fx.dir / (out + ".log")).string()),
              0)
        << test::read_text((fx.dir / (out + ".log")).string());
  const std::string logits = bytes_of(fx.dir / "export.safetensors");
  EXPECT_GT(logits.size(), 2u * 6 * 4 * size_t(cfg.vocab_size));
  EXPECT_TRUE(logits == bytes_of(fx.dir / "final.safetensors")) << "zaya forward output differs";

  // Not a checkpoint: a clear error naming the directory and the missing completion marker.
  const std::string bad = (fx.dir / "corpus").string();
  EXPECT_NE(run_zaya("", "export --checkpoint " + bad + " --out " + (fx.dir / "hf2").string(),
                     (fx.dir / "e2.log").string()),
            0);
  const std::string log = test::read_text((fx.dir / "e2.log").string());
  EXPECT_NE(log.find(bad), std::string::npos) << log;
  EXPECT_NE(log.find("COMPLETE"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(fx.dir / "hf2"));
}

// Bad steps (train/bad_steps.h): NaN losses on the batches of data steps 6-7 (ZAYA_FAULT_NAN) with
// fault.max_bad_steps 3: both updates are skipped and training goes on. On data steps 6-8: the third bad step
// rolls back to the newest checkpoint (step 4), the data continues after the bad batches, and the run ends
// its 8 steps with finite losses; the rollback is logged, in events.jsonl and in the checkpoints' state.
TEST(Checkpoint, NanStepsAreSkippedThenRolledBack) {
  Fixture fx;
  const fs::path a = fx.dir / "straight", s = fx.dir / "skip", r = fx.dir / "rollback";
  ASSERT_EQ(run_zaya("", "train --config " + fx.config("straight"), (fx.dir / "a.log").string()), 0);
  const std::vector<std::string> straight = metrics_field(a / "metrics.jsonl", "loss");
  const std::string fault = R"(, "fault": {"max_bad_steps": 3})";

  ASSERT_EQ(run_zaya("ZAYA_FAULT_NAN=6-7", "train --config " + fx.config("skip", false, "", fault),
                     (fx.dir / "s.log").string()),
            0)
      << test::read_text((fx.dir / "s.log").string());
  const std::string log_s = test::read_text((fx.dir / "s.log").string());
  EXPECT_NE(log_s.find("step 6: non-finite loss (injected by ZAYA_FAULT_NAN)"), std::string::npos) << log_s;
  EXPECT_NE(log_s.find("update skipped (2 skipped so far, 2 in a row)"), std::string::npos) << log_s;
  EXPECT_EQ(log_s.find("rolled back"), std::string::npos) << log_s;
  EXPECT_EQ(test::read_json((s / "summary.json").string())["skipped_steps"], 2);
  const std::vector<std::string> skip = metrics_field(s / "metrics.jsonl", "loss");
  ASSERT_EQ(skip.size(), 8u);
  for (size_t i = 0; i < 5; i++) EXPECT_EQ(skip[i], straight[i]) << "steps before the bad ones are untouched";
  EXPECT_EQ(skip[5], "6:null");

  ASSERT_EQ(run_zaya("ZAYA_FAULT_NAN=6-8", "train --config " + fx.config("rollback", false, "", fault),
                     (fx.dir / "r.log").string()),
            0)
      << test::read_text((fx.dir / "r.log").string());
  const std::string log_r = test::read_text((fx.dir / "r.log").string());
  EXPECT_NE(log_r.find("step 8: 3 consecutive bad steps: rolled back to " +
                       ckpt::step_dir((r / "checkpoints").string(), 4) + " (step 4)"),
            std::string::npos)
      << log_r;
  EXPECT_EQ(metrics_numbers(r / "metrics.jsonl", "step"), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}))
      << "rows after the rollback point "
         "are replaced";
  const std::vector<std::string> rolled = metrics_field(r / "metrics.jsonl", "loss");
  for (size_t i = 0; i < 4; i++) EXPECT_EQ(rolled[i], straight[i]);
  for (size_t i = 4; i < 8; i++) {
    EXPECT_EQ(rolled[i].find("null"), std::string::npos) << rolled[i];
    EXPECT_NE(rolled[i], straight[i]) << "steps 5-8 now see the data after the bad batches";
  }
  const nlohmann::json ev = nlohmann::json::parse(
      test::read_text((r / "events.jsonl").string())
          .substr(test::read_text((r / "events.jsonl").string()).rfind("{\"checkpoint\"")));
  EXPECT_EQ(ev["event"], "rollback");
  EXPECT_EQ(ev["to_step"], 4);
  EXPECT_EQ(ev["skipped_data_steps"], 4);
  EXPECT_EQ(test::read_json((r / "summary.json").string())["skipped_steps"], 3);
  const nlohmann::json st = ckpt::Checkpoint::open(ckpt::step_dir((r / "checkpoints").string(), 8)).state();
  EXPECT_EQ(st["data_step"], 13) << "12 steps' batches drawn: the resumed run continues after them";
  EXPECT_EQ(st["rollbacks"], 1);

  // The loss-spike detector: the detector sees 10x the loss of data step 6 (ZAYA_FAULT_SPIKE); with
  // fault.spike_zscore 10 over a window of 4 (z is ~30) it is the only spike of the run, and its update is
  // skipped.
  const fs::path z = fx.dir / "spike";
  ASSERT_EQ(
      run_zaya("ZAYA_FAULT_SPIKE=6-6",
               "train --config " +
                   fx.config("spike", false, "",
                             R"(, "fault": {"max_bad_steps": 3, "spike_zscore": 10, "spike_window": 4})"),
               (fx.dir / "z.log").string()),
      0)
      << test::read_text((fx.dir / "z.log").string());
  const std::string log_z = test::read_text((fx.dir / "z.log").string());
  EXPECT_NE(log_z.find("step 6: loss spike (z = "), std::string::npos) << log_z;
  EXPECT_NE(log_z.find("update skipped (1 skipped so far, 1 in a row)"), std::string::npos) << log_z;
  EXPECT_EQ(test::read_json((z / "summary.json").string())["skipped_steps"], 1);
  const std::vector<std::string> spike = metrics_field(z / "metrics.jsonl", "loss");
  for (size_t i = 0; i < 5; i++) EXPECT_EQ(spike[i], straight[i]) << "no spike called before step 6";
}

// A save that fails (here: the per-process file-size limit, EFBIG, which needs no privileges; the real full
// file system is the next test) leaves no loadable checkpoint behind and, with checkpoint.on_error
// "continue", training goes on with a warning to the end; with "stop" the run ends at the failed save with
// exit status 1 and a message naming the newest good checkpoint.
TEST(Checkpoint, FailedSavesWarnOrStopCleanly) {
  Fixture fx;
  const fs::path c = fx.dir / "cont", s = fx.dir / "stop";
  // 1000 KiB: metrics and the final model fit, a 1.2 MB checkpoint data file does not.
  const std::string limit = "trap '' XFSZ; ulimit -f 1000; ";
  ASSERT_EQ(run_zaya(limit, "train --config " + fx.config("cont", true), (fx.dir / "c.log").string()), 0)
      << test::read_text((fx.dir / "c.log").string());
  const std::string log_c = test::read_text((fx.dir / "c.log").string());
  EXPECT_NE(log_c.find("WARNING: checkpoint at step 4 failed: "), std::string::npos) << log_c;
  EXPECT_NE(log_c.find("File too large"), std::string::npos) << log_c;
  EXPECT_NE(log_c.find("training continues"), std::string::npos) << log_c;
  EXPECT_TRUE(fs::exists(c / "model" / "model.safetensors"));
  EXPECT_TRUE(ckpt::list_checkpoints((c / "checkpoints").string()).empty()) << "failed saves are removed";
  ASSERT_EQ(run_zaya(limit, "train --config " + fx.config("stop", true, R"(, "on_error": "stop")"),
                     (fx.dir / "s.log").string()),
            1);
  const std::string log_s = test::read_text((fx.dir / "s.log").string());
  EXPECT_NE(log_s.find("stopped: the checkpoint save of step 4 failed (checkpoint.on_error = stop"),
            std::string::npos)
      << log_s;
  EXPECT_NE(log_s.find("no checkpoint of this run completed"), std::string::npos) << log_s;
  // Asynchronous: the failure is known at the first step boundary after the write ended.
  EXPECT_GE(metrics_numbers(s / "metrics.jsonl", "step").size(), 4u);
  EXPECT_LT(metrics_numbers(s / "metrics.jsonl", "step").size(), 8u);
}

// A real full file system: checkpoints go to a 1.8 MB tmpfs that holds step 4's checkpoint but not also step
// 8's. The failed save at step 8 leaves step 4 intact and verifiable, training ends normally, and
// `--resume auto` later picks step 4. Needs mount privileges (root in a container with CAP_SYS_ADMIN):
// skipped otherwise (a failure in CI, where the suite runs as root), the test above covers the error path.
TEST(Checkpoint, FullDiskKeepsThePreviousCheckpoint) {
  Fixture fx;
  const fs::path mnt = fx.dir / "small_fs";
  fs::create_directories(mnt);
  if (std::system(("mount -t tmpfs -o size=1800k tmpfs '" + mnt.string() + "' 2>/dev/null").c_str()) != 0)
    ZAYA_SKIP_UNLESS_CI("cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)");
  struct Unmount {
    std::string p;
    ~Unmount() { (void)std::system(("umount '" + p + "'").c_str()); }
  } unmount{mnt.string()};
  const std::string extra = R"(, "dir": ")" + (mnt / "ck").string() + R"(")";
  const std::string cfg = fx.config("full", true, extra);
  ASSERT_EQ(run_zaya("", "train --config " + cfg, (fx.dir / "f.log").string()), 0)
      << test::read_text((fx.dir / "f.log").string());
  const std::string log = test::read_text((fx.dir / "f.log").string());
  EXPECT_NE(log.find("WARNING: checkpoint at step 8 failed: "), std::string::npos) << log;
  EXPECT_NE(log.find("No space left on device"), std::string::npos) << log;
  EXPECT_NE(log.find("the newest good checkpoint is " + ckpt::step_dir((mnt / "ck").string(), 4)),
            std::string::npos)
      << log;
  auto listing = ckpt::list_checkpoints((mnt / "ck").string());
  ASSERT_EQ(listing.size(), 1u);
  EXPECT_EQ(ckpt::Checkpoint::open(listing[0].dir).step(), 4);
  // (Resumed with the run's own step count: another --steps would be another run, refused.)
  ASSERT_EQ(run_zaya("", "train --config " + cfg + " --resume auto", (fx.dir / "g.log").string()), 0)
      << test::read_text((fx.dir / "g.log").string());
  EXPECT_NE(test::read_text((fx.dir / "g.log").string()).find("(step 4)"), std::string::npos);
}

// ---- A run directory belongs to one run (train/run_start.h) ----

namespace {

// Every file under `dir` (relative path -> bytes): "byte-identical afterwards" compares two of these.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = bytes_of(e.path());
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A committed one-tensor checkpoint of `step` under `root` that records the identity of run `run_id` (as
// `zaya train` writes it into the state): another run's checkpoint, as far as retention and resume see.
void foreign_checkpoint(const fs::path& root, int64_t step, const std::string& run_id) {
  const std::string dir = ckpt::step_dir(root.string(), step);
  Tensor t = Tensor::empty(DType::F32, {3});
  for (int i = 0; i < 3; i++) t.f32()[i] = float(step);
  ckpt::write_rank_part(dir, 0, {{"x", t, {}, 0}});
  ckpt::commit(dir, step, 1,
               {{"identity", {{"run_id", run_id}, {"config_hash", "0123456789abcdef"}, {"config", {}}}}});
}

}  // namespace

// A fresh start into the directory of a finished run is refused, whatever its config, and the first run's
// files stay byte-identical; --overwrite replaces that run (and says so: none of its checkpoints survive to
// be resumed later); --out gives a run its own directory (with its checkpoints under it), from any working
// directory, where the plot script is found beside the binary.
TEST(RunDir, SecondRunIsRefusedOverwriteReplacesItOutMovesIt) {
  Fixture fx;
  const fs::path a = fx.dir / "first";
  const std::string cfg = fx.config("first");
  ASSERT_EQ(run_zaya("", "train --config " + cfg, (fx.dir / "a.log").string()), 0);
  const auto before = snapshot(a);
  ASSERT_TRUE(before.count("run.json") && before.count("checkpoints/run.json") &&
              before.count("metrics.jsonl"));
  const nlohmann::json run1 = test::read_json((a / "run.json").string());

  // The README's example run: the same TRAIN.json with fewer steps, into the same directory.
  EXPECT_EQ(run_zaya("", "train --config " + cfg + " --steps 5", (fx.dir / "b.log").string()), 1);
  const std::string log_b = test::read_text((fx.dir / "b.log").string());
  for (const std::string& part :
       std::vector<std::string>{a.string() + " holds another run (run " + run1["run_id"].get<std::string>(),
                                "steps: 8 (saved) vs 5 (this run)", "metrics.jsonl", "model/",
                                "2 checkpoints (steps 4-8)", "--out DIR", "--overwrite"})
    EXPECT_TRUE(contains(log_b, part)) << part << "\n" << log_b;
  // The same config again: refused too, pointing at --resume auto.
  EXPECT_EQ(run_zaya("", "train --config " + cfg, (fx.dir / "c.log").string()), 1);
  EXPECT_TRUE(contains(test::read_text((fx.dir / "c.log").string()), "continue it with --resume auto"));
  EXPECT_TRUE(snapshot(a) == before) << "a refused start changed the first run's files";

  // --overwrite: the old run's files go (logged), the new run is all that is left.
  ASSERT_EQ(run_zaya("", "train --config " + cfg + " --steps 5 --overwrite", (fx.dir / "d.log").string()), 0)
      << test::read_text((fx.dir / "d.log").string());
  EXPECT_TRUE(contains(test::read_text((fx.dir / "d.log").string()),
                       "--overwrite: removed the previous run's files: run.json, metrics.jsonl"));
  EXPECT_EQ(metrics_numbers(a / "metrics.jsonl", "step"), (std::vector<double>{1, 2, 3, 4, 5}));
  std::vector<int64_t> steps;
  for (const auto& l : ckpt::list_checkpoints((a / "checkpoints").string())) steps.push_back(l.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 5})) << "the old run's step 8 must not survive";
  const nlohmann::json run2 = test::read_json((a / "run.json").string());
  EXPECT_NE(run2["run_id"], run1["run_id"]);
  EXPECT_EQ(run2["steps"], 5);
  EXPECT_EQ(test::read_json((a / "checkpoints" / "run.json").string())["run_id"], run2["run_id"]);
  EXPECT_EQ(test::read_json((a / "summary.json").string())["complete"], true);
  EXPECT_NE(run_zaya("", "train --config " + cfg + " --overwrite --resume auto", (fx.dir / "e.log").string()),
            0);

  // --out, started from another working directory: the run and its checkpoints land there; the plot script
  // is looked up beside the binary, not in the working directory.
  const fs::path moved = fx.dir / "moved";
  ASSERT_EQ(
      run_zaya("cd / &&", "train --config " + cfg + " --out " + moved.string(), (fx.dir / "f.log").string()),
      0)
      << test::read_text((fx.dir / "f.log").string());
  EXPECT_TRUE(fs::exists(moved / "metrics.jsonl"));
  EXPECT_TRUE(fs::exists(moved / "checkpoints" / "step_00000008" / "COMPLETE"));
  EXPECT_EQ(test::read_json((moved / "run.json").string())["config_hash"], run1["config_hash"])
      << "the output directory is not part of the run's identity";
  const std::string log_f = test::read_text((fx.dir / "f.log").string());
  EXPECT_FALSE(contains(log_f, "is neither beside")) << log_f;
  // Found: either drawn (matplotlib installed, as after the main job) or named in the reason it was not.
  EXPECT_TRUE(contains(log_f, "plot written to " + (moved / "training.png").string()) ||
              contains(log_f, "plot_train.py"))
      << log_f;
}

// --resume auto on a finished run reports it complete, exits 0 and changes no byte: with checkpoints (the
// newest is the final step) and without (summary.json records all the steps); --resume of the final step
// directory too.
TEST(RunDir, ResumeOfAFinishedRunChangesNothing) {
  Fixture fx;
  const fs::path a = fx.dir / "done";
  const std::string cfg = fx.config("done");
  ASSERT_EQ(run_zaya("", "train --config " + cfg, (fx.dir / "a.log").string()), 0);
  const auto before = snapshot(a);
  for (const std::string& how : {std::string("auto"), (a / "checkpoints" / "step_00000008").string()}) {
    const std::string log = (fx.dir / "r.log").string();
    ASSERT_EQ(run_zaya("", "train --config " + cfg + " --resume " + how, log), 0) << test::read_text(log);
    EXPECT_TRUE(contains(test::read_text(log),
                         "the run is already complete: " + (a / "checkpoints" / "step_00000008").string() +
                             " is its final step (8 of 8); nothing to do"))
        << test::read_text(log);
    EXPECT_FALSE(contains(test::read_text(log), "final validation loss")) << test::read_text(log);
    EXPECT_TRUE(snapshot(a) == before) << "--resume " << how << " changed the finished run's files";
  }

  // No checkpoints at all: summary.json says the run is complete.
  const fs::path n = fx.dir / "nockpt";
  const std::string cfg_n = (fx.dir / "nockpt.json").string();
  std::ofstream(cfg_n) << test::tiny_train_json(fx.dir, n, 3, 4, 0, 5);
  ASSERT_EQ(run_zaya("", "train --config " + cfg_n, (fx.dir / "n1.log").string()), 0);
  EXPECT_FALSE(fs::exists(n / "checkpoints"));
  const auto before_n = snapshot(n);
  ASSERT_EQ(run_zaya("", "train --config " + cfg_n + " --resume auto", (fx.dir / "n2.log").string()), 0);
  EXPECT_TRUE(contains(test::read_text((fx.dir / "n2.log").string()), "summary.json records all 8 steps"))
      << test::read_text((fx.dir / "n2.log").string());
  EXPECT_TRUE(snapshot(n) == before_n);
}

// --resume refuses a checkpoint of another config and names the fields that differ, before anything is
// written; --resume auto refuses the same in a directory of another config's run.
TEST(RunDir, ResumeRefusesACheckpointOfAnotherConfig) {
  Fixture fx;
  const fs::path a = fx.dir / "orig";
  const std::string cfg = fx.config("orig");
  ASSERT_EQ(run_zaya("", "train --config " + cfg, (fx.dir / "a.log").string()), 0);
  const auto before = snapshot(a);
  const std::string step4 = (a / "checkpoints" / "step_00000004").string();

  auto j = nlohmann::json::parse(test::read_text(cfg));
  j["optim"]["lr"] = 0.02;
  j["out"] = (fx.dir / "other_lr").string();
  const std::string cfg_lr = (fx.dir / "other_lr.json").string();
  std::ofstream(cfg_lr) << j.dump();
  EXPECT_EQ(run_zaya("", "train --config " + cfg_lr + " --resume " + step4, (fx.dir / "b.log").string()), 1);
  const std::string log_b = test::read_text((fx.dir / "b.log").string());
  EXPECT_TRUE(contains(log_b, step4 + ": a checkpoint of another run")) << log_b;
  EXPECT_TRUE(contains(log_b, "optim.lr: 0.01 (saved) vs 0.02 (this run)")) << log_b;
  EXPECT_FALSE(fs::exists(fx.dir / "other_lr" / "metrics.jsonl"));

  EXPECT_EQ(run_zaya("", "train --config " + cfg + " --steps 6 --resume auto", (fx.dir / "c.log").string()),
            1);
  const std::string log_c = test::read_text((fx.dir / "c.log").string());
  EXPECT_TRUE(contains(log_c, "step_00000008: a checkpoint of another run")) << log_c;
  EXPECT_TRUE(contains(log_c, "steps: 8 (saved) vs 6 (this run)")) << log_c;
  EXPECT_TRUE(snapshot(a) == before);

  // Same config, other output directory (only "out" differs): the checkpoint continues there.
  const std::string cfg_copy = fx.config("copy");
  ASSERT_EQ(run_zaya("", "train --config " + cfg_copy + " --resume " + step4, (fx.dir / "d.log").string()), 0)
      << test::read_text((fx.dir / "d.log").string());
  EXPECT_TRUE(contains(test::read_text((fx.dir / "d.log").string()), "(step 4)"));
}

// Retention counts only this run's checkpoints: another run's newer-numbered ones in the same directory
// (steps 12 and 16 here) neither push this run's own out of keep_last nor get removed, and --resume auto
// does not load them. (The old behaviour: the checkpoint just committed at step 4 was removed as "older" than
// the other run's.)
TEST(RunDir, RetentionKeepsThisRunsCheckpointsBesideAnotherRunsNewerOnes) {
  Fixture fx;
  const fs::path b = fx.dir / "mine", ck = b / "checkpoints";
  const std::string cfg = (fx.dir / "mine.json").string();
  std::ofstream(cfg) << test::tiny_train_json(fx.dir, b, 3, 4, 2, 2, ", \"async\": false");
  EXPECT_EQ(run_zaya("ZAYA_DIST_FAULT=exit:0:3", "train --config " + cfg, (fx.dir / "a.log").string()), 9);
  ASSERT_TRUE(fs::exists(ck / "step_00000002" / "COMPLETE"));
  foreign_checkpoint(ck, 12, "00000000000000aa");
  foreign_checkpoint(ck, 16, "00000000000000aa");
  const auto foreign = snapshot(ck / "step_00000016");
  ASSERT_EQ(run_zaya("", "train --config " + cfg + " --resume auto", (fx.dir / "b.log").string()), 0)
      << test::read_text((fx.dir / "b.log").string());
  EXPECT_TRUE(contains(test::read_text((fx.dir / "b.log").string()), "step_00000002 (step 2)"))
      << test::read_text((fx.dir / "b.log").string());
  std::vector<int64_t> steps;
  for (const auto& l : ckpt::list_checkpoints(ck.string())) steps.push_back(l.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{6, 8, 12, 16}))
      << "keep_last 2 of this run's (6, 8) + the other run's";
  EXPECT_TRUE(snapshot(ck / "step_00000016") == foreign);
}

// A run stopped by max_minutes says where and whether a checkpoint holds it; summary.json records it as not
// complete, and --resume auto finishes the run.
TEST(RunDir, TimeLimitSaysWhereTheRunStopped) {
  Fixture fx;
  const fs::path t = fx.dir / "timed";
  const std::string cfg = fx.config("timed", false, "", R"(, "max_minutes": 0.001)");
  ASSERT_EQ(run_zaya("ZAYA_SLOW_STEP_MS=100", "train --config " + cfg, (fx.dir / "a.log").string()), 0);
  const std::string log = test::read_text((fx.dir / "a.log").string());
  const std::string said = "train: time limit of 0.001 min reached at step ";
  const size_t at = log.find(said);
  ASSERT_NE(at, std::string::npos) << log;
  const int64_t stopped = std::atol(log.c_str() + at + said.size());
  EXPECT_TRUE(contains(log, str_cat("reached at step ", stopped, " of 8; checkpoint written"))) << log;
  const nlohmann::json s = test::read_json((t / "summary.json").string());
  EXPECT_EQ(s["complete"], false);
  EXPECT_EQ(s["steps"], stopped);
  EXPECT_EQ(s["stopped"], "time limit of 0.001 min");
  ASSERT_EQ(
      run_zaya("", "train --config " + cfg + " --resume auto --max-minutes 0", (fx.dir / "b.log").string()),
      0);
  EXPECT_TRUE(contains(test::read_text((fx.dir / "b.log").string()), str_cat("(step ", stopped, ")")));
  EXPECT_EQ(test::read_json((t / "summary.json").string())["complete"], true);

  // Without checkpoints the message says so.
  const std::string cfg_n = (fx.dir / "timed_n.json").string();
  std::ofstream(cfg_n) << test::tiny_train_json(fx.dir, fx.dir / "timed_n", 3, 4, 0, 5, "",
                                                R"(, "max_minutes": 0.001)");
  ASSERT_EQ(run_zaya("ZAYA_SLOW_STEP_MS=100", "train --config " + cfg_n, (fx.dir / "c.log").string()), 0);
  EXPECT_TRUE(contains(test::read_text((fx.dir / "c.log").string()), "of 8; no checkpoint configured"))
      << test::read_text((fx.dir / "c.log").string());
}

// `zaya export` copies the run's tokenizer (TRAIN.json "tokenizer") so that `zaya generate --prompt` works on
// the export; a non-empty --out is refused (nothing changes) unless --overwrite.
TEST(RunDir, ExportCopiesTheTokenizerAndRefusesANonEmptyOut) {
  Fixture fx;
  const fs::path run = fx.dir / "tok", hf = fx.dir / "hf";
  const std::string tok = (fx.dir / "tokenizer.json").string();
  ASSERT_EQ(run_zaya("", "train --config " + fx.config("tok", false, "", R"(, "tokenizer": ")" + tok + "\""),
                     (fx.dir / "a.log").string()),
            0)
      << test::read_text((fx.dir / "a.log").string());
  const std::string step8 = (run / "checkpoints" / "step_00000008").string();
  ASSERT_EQ(
      run_zaya("", "export --checkpoint " + step8 + " --out " + hf.string(), (fx.dir / "e.log").string()), 0)
      << test::read_text((fx.dir / "e.log").string());
  EXPECT_EQ(bytes_of(hf / "tokenizer.json"), bytes_of(tok));
  ASSERT_EQ(
      run_zaya("", "generate --model " + hf.string() + " --prompt 'the cat' --max-new-tokens 4 --greedy",
               (fx.dir / "g.log").string()),
      0)
      << test::read_text((fx.dir / "g.log").string());

  const auto before = snapshot(hf);
  EXPECT_EQ(
      run_zaya("", "export --checkpoint " + step8 + " --out " + hf.string(), (fx.dir / "e2.log").string()),
      1);
  const std::string log = test::read_text((fx.dir / "e2.log").string());
  EXPECT_TRUE(contains(log, "--out " + hf.string() + ": the directory is not empty")) << log;
  EXPECT_TRUE(contains(log, "--overwrite")) << log;
  EXPECT_TRUE(snapshot(hf) == before);
  std::ofstream(hf / "tokenizer_config.json") << "{}";  // a file of an older export
  ASSERT_EQ(
      run_zaya("", "export --checkpoint " + step8 + " --out " + hf.string() + " --overwrite --dtype fp32",
               (fx.dir / "e3.log").string()),
      0)
      << test::read_text((fx.dir / "e3.log").string());
  EXPECT_FALSE(fs::exists(hf / "tokenizer_config.json"));
  EXPECT_EQ(bytes_of(hf / "tokenizer.json"), bytes_of(tok));
}

// `zaya launch` (src/launch/supervisor.h) on real processes:
//   1. a crash (one-shot exit fault at step 6) is restarted, the restart resumes from the last checkpoint,
//      and the final model and last checkpoint equal an uninterrupted run's bitwise;
//   2. a hang (one-shot hang fault at step 5, short --heartbeat-timeout) is detected, killed and restarted,
//   and also
//      ends bitwise equal;
//   3. a command that always fails stops after --max-restarts restarts with a report naming every attempt
//      (text and JSON) and a non-zero exit; the backoff doubles without progress and stays put with it;
//   4. SIGTERM to the supervisor is forwarded to the job (its exit status becomes the supervisor's) and not
//      restarted; a preempted `zaya train` saves and exits 0; bad usage is a clear error;
//   5. under mpirun -np 2, rank 1 dying is restarted and resumed;
//   6. the same set-up error twice in a row (a missing TRAIN.json) stops the restarts with the reason.
// One-shot faults: the command is a bash wrapper that sets ZAYA_DIST_FAULT only when a marker file does not
// exist yet (and creates it), so that the restart runs clean.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "test_util.h"
#include "tiny_training_data.h"

using namespace zaya;
namespace fs = std::filesystem;

namespace {

// The tiny data and one uninterrupted reference run, shared by every test of this binary.
class Launch : public ::testing::Test {
 protected:
  static fs::path dir;

  static void SetUpTestSuite() {
    dir = fs::temp_directory_path() / ("zaya_launch_test_" + std::to_string(getpid()));
    test::write_tiny_training_dir(dir, 3);
    const std::string log = (dir / "straight.log").string();
    ASSERT_EQ(run(ZAYA_BINARY " train --config " + config("straight"), log), 0) << test::read_text(log);
  }
  static void TearDownTestSuite() { fs::remove_all(dir); }

  // A TRAIN.json for run `name` (output in dir/name, checkpoints every 2 steps, 8 steps), written to
  // dir/name.json.
  static std::string config(const std::string& name) {
    const std::string text = test::tiny_train_json(dir, dir / name, 5, 2, 2, 3);
    const std::string path = (dir / (name + ".json")).string();
    std::ofstream(path) << text;
    return path;
  }

  static int run(const std::string& cmd, const std::string& log) { return test::run_shell(cmd, log); }

  // A bash command that runs `train` with `fault_env` the first time (marker file absent) and without it
  // after, single-quoted for the shell.
  static std::string one_shot(const std::string& marker, const std::string& fault_env,
                              const std::string& train) {
    return "bash -c 'if [ -e " + marker + " ]; then exec " + train + "; else touch " + marker + "; " +
           fault_env + " exec " + train + "; fi'";
  }

  static std::string bytes(const fs::path& p) { return test::read_text(p.string()); }

  // The final model and the last checkpoint's data files of run `name` equal those of the uninterrupted run
  // of the same world size: "straight" (one process) or `straight_run` (e.g. a straight mpirun -np 2 run).
  static void expect_bitwise_as_straight(const std::string& name, int world = 1,
                                         const std::string& straight_run = "straight") {
    const fs::path a = dir / straight_run, b = dir / name;
    const std::string model = bytes(b / "model" / "model.safetensors");
    EXPECT_FALSE(model.empty());
    EXPECT_TRUE(model == bytes(a / "model" / "model.safetensors")) << "final models differ";
    for (int r = 0; r < world; r++) {
      const std::string part = "rank_0000" + std::to_string(r) + ".bin";
      const std::string got = bytes(b / "checkpoints" / "step_00000008" / part);
      EXPECT_FALSE(got.empty()) << part;
      EXPECT_TRUE(got == bytes(a / "checkpoints" / "step_00000008" / part))
          << "final checkpoints differ: " << part;
    }
  }
};

fs::path Launch::dir;

}  // namespace

TEST_F(Launch, CrashIsRestartedAndResumesBitExact) {
  const std::string cfg = config("crash"), marker = (dir / "crash.marker").string();
  const std::string log = (dir / "crash.log").string(), report = (dir / "crash.report.json").string();
  const std::string train = std::string(ZAYA_BINARY) + " train --config " + cfg + " --resume auto";
  ASSERT_EQ(run(std::string(ZAYA_BINARY) + " launch --max-restarts 2 --backoff 0.2 --report " + report +
                    " -- " + one_shot(marker, "ZAYA_DIST_FAULT=exit:0:6", train),
                log),
            0)
      << test::read_text(log);
  const std::string out = test::read_text(log);
  // From step 4, or step 2 when step 4's save had not committed yet (saves may complete in the background).
  EXPECT_NE(out.find("resumed from " + (dir / "crash" / "checkpoints" / "step_0000000").string()),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("attempt 1 (started "), std::string::npos) << out;
  EXPECT_NE(out.find("exited with code 9"), std::string::npos) << out;
  // Step 5 reached; its phase may be "step" or, when step 4's background save committed after step 5,
  // "committing" / "saved".
  EXPECT_NE(out.find("last heartbeat: 5 "), std::string::npos) << out;
  const nlohmann::json r = test::read_json(report);
  EXPECT_EQ(r["outcome"], "succeeded");
  EXPECT_EQ(r["restarts"], 1);
  ASSERT_EQ(r["attempts"].size(), 2u);
  EXPECT_EQ(r["attempts"][0]["ended"], "exit");
  EXPECT_EQ(r["attempts"][0]["exit_code"], 9);
  EXPECT_EQ(r["attempts"][0]["max_step"], 5);
  EXPECT_EQ(r["attempts"][0]["progressed"], true);
  EXPECT_EQ(r["attempts"][1]["exit_code"], 0);
  EXPECT_EQ(r["attempts"][1]["max_step"], 8);
  expect_bitwise_as_straight("crash");
}

TEST_F(Launch, HangIsDetectedKilledAndRestarted) {
  const std::string cfg = config("hang"), marker = (dir / "hang.marker").string();
  const std::string log = (dir / "hang.log").string(), report = (dir / "hang.report.json").string();
  const std::string train = std::string(ZAYA_BINARY) + " train --config " + cfg + " --resume auto";
  ASSERT_EQ(run(std::string(ZAYA_BINARY) +
                    " launch --max-restarts 1 --heartbeat-timeout 3 --kill-grace 1 --backoff 0.1 --report " +
                    report + " -- " + one_shot(marker, "ZAYA_DIST_FAULT=hang:0:5", train),
                log),
            0)
      << test::read_text(log);
  const std::string out = test::read_text(log);
  EXPECT_NE(out.find("hangs (no heartbeat for"), std::string::npos) << out;
  const nlohmann::json r = test::read_json(report);
  ASSERT_EQ(r["attempts"].size(), 2u) << out;
  const nlohmann::json& a = r["attempts"][0];
  EXPECT_EQ(a["ended"], "hang");
  // The hang is at the start of step 5 (after checkpoint 2 committed: a run killed during its first save
  // has nothing to resume from).
  EXPECT_EQ(a["last_heartbeat"].get<std::string>().substr(0, 2), "4 ");
  // The trainer defers SIGTERM to the end of a step, which a hung step never reaches: SIGKILL it is.
  EXPECT_EQ(a["killed_with"], "SIGKILL");
  EXPECT_NE(a["description"].get<std::string>().find("hung (no heartbeat for"), std::string::npos);
  EXPECT_EQ(r["outcome"], "succeeded");
  expect_bitwise_as_straight("hang");
}

TEST_F(Launch, AlwaysFailingCommandStopsAfterMaxRestartsWithAReport) {
  const std::string log = (dir / "fail.log").string(), report = (dir / "fail.report.json").string();
  EXPECT_EQ(run(std::string(ZAYA_BINARY) + " launch --max-restarts 3 --backoff 0.05 --report " + report +
                    " -- sh -c 'exit 3'",
                log),
            1);
  const std::string out = test::read_text(log);
  EXPECT_NE(out.find("report: gave up after 4 attempt(s), 3 restart(s)"), std::string::npos) << out;
  for (int i = 1; i <= 4; i++)
    EXPECT_NE(out.find("attempt " + std::to_string(i) + " (started "), std::string::npos) << out;
  const nlohmann::json r = test::read_json(report);
  EXPECT_EQ(r["outcome"], "gave up");
  EXPECT_EQ(r["exit_code"], 1);
  ASSERT_EQ(r["attempts"].size(), 4u);
  for (const auto& a : r["attempts"]) {
    EXPECT_EQ(a["ended"], "exit");
    EXPECT_EQ(a["exit_code"], 3);
    EXPECT_NE(a["description"].get<std::string>().find("exited with code 3"), std::string::npos);
  }
  // No progress: the backoff doubles (0.05, 0.1, 0.2; none after the last attempt).
  EXPECT_DOUBLE_EQ(r["attempts"][0]["backoff_s"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(r["attempts"][1]["backoff_s"].get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(r["attempts"][2]["backoff_s"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(r["attempts"][3]["backoff_s"].get<double>(), 0.0);

  // A job that gets one step further every attempt (a fake heartbeat) keeps the first backoff; a death by
  // signal is named.
  const std::string counter = (dir / "fail.counter").string();
  const std::string report2 = (dir / "fail2.report.json").string();
  EXPECT_EQ(run(std::string(ZAYA_BINARY) + " launch --max-restarts 2 --backoff 0.05 --report " + report2 +
                    " -- sh -c 'n=$(cat " + counter + " 2>/dev/null || echo 0); n=$((n+1)); echo $n > " +
                    counter + "; echo \"$n step\" > \"$ZAYA_HEARTBEAT_FILE\"; kill -KILL $$'",
                (dir / "fail2.log").string()),
            1);
  const nlohmann::json r2 = test::read_json(report2);
  ASSERT_EQ(r2["attempts"].size(), 3u);
  EXPECT_DOUBLE_EQ(r2["attempts"][1]["backoff_s"].get<double>(), 0.05);
  EXPECT_EQ(r2["attempts"][1]["signal"], "SIGKILL");
  EXPECT_EQ(r2["attempts"][1]["last_heartbeat"], "2 step");
  EXPECT_EQ(r2["attempts"][1]["progressed"], true);
  EXPECT_NE(r2["attempts"][2]["description"].get<std::string>().find("killed by SIGKILL after"),
            std::string::npos);
}

TEST_F(Launch, StopSignalIsForwardedAndNotRestarted) {
  const std::string log = (dir / "stop.log").string(), report = (dir / "stop.report.json").string();
  const std::string started = (dir / "stop.started").string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    const std::string script = "trap 'exit 5' TERM; touch " + started + "; while :; do sleep 0.05; done";
    execl(ZAYA_BINARY, ZAYA_BINARY, "launch", "--max-restarts", "3", "--report", report.c_str(), "--", "sh",
          "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(started) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(started)) << test::read_text(log);
  kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  const std::string out = test::read_text(log);
  ASSERT_TRUE(WIFEXITED(st)) << out;
  EXPECT_EQ(WEXITSTATUS(st), 5) << "the supervisor exits with the job's status\n" << out;
  EXPECT_NE(out.find("received SIGTERM: forwarding it to the job"), std::string::npos) << out;
  const nlohmann::json r = test::read_json(report);
  EXPECT_EQ(r["outcome"], "stopped by SIGTERM");
  ASSERT_EQ(r["attempts"].size(), 1u);
  EXPECT_EQ(r["attempts"][0]["ended"], "stopped");
}

// The real trainer: SIGTERM to the supervisor reaches `zaya train` once, which finishes its step, writes a
// checkpoint and exits 0; the supervisor exits 0 without restarting.
TEST_F(Launch, PreemptionOfTheTrainerSavesAndExitsZero) {
  const std::string cfg = config("preempt"), log = (dir / "preempt.log").string();
  const std::string hb = (dir / "preempt.heartbeat").string();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("ZAYA_SLOW_STEP_MS", "200", 1);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(ZAYA_BINARY, ZAYA_BINARY, "launch", "--heartbeat-file", hb.c_str(), "--", ZAYA_BINARY, "train",
          "--config", cfg.c_str(), "--resume", "auto", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait for the second step's heartbeat.
  const auto t0 = std::chrono::steady_clock::now();
  auto step_of_heartbeat = [&] {
    const std::string t = test::read_text(hb);
    return t.empty() ? -1 : std::atoi(t.c_str());
  };
  while (step_of_heartbeat() < 2 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GE(step_of_heartbeat(), 2) << test::read_text(log);
  kill(pid, SIGTERM);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  const std::string out = test::read_text(log);
  ASSERT_TRUE(WIFEXITED(st)) << out;
  EXPECT_EQ(WEXITSTATUS(st), 0) << out;
  EXPECT_NE(out.find("checkpoint written, exiting"), std::string::npos) << out;
  EXPECT_NE(out.find("stopped by SIGTERM (forwarded), exited with code 0"), std::string::npos) << out;
  EXPECT_EQ(out.find("attempt 2"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "preempt" / "model"))
      << "a preempted run leaves the final model to the resumed run";
}

TEST_F(Launch, BadUsageIsAClearError) {
  const std::string log = (dir / "usage.log").string();
  EXPECT_EQ(run(std::string(ZAYA_BINARY) + " launch --max-restarts 2", log), 1);
  EXPECT_NE(test::read_text(log).find("no command to run: expected `-- <command...>`"), std::string::npos)
      << test::read_text(log);
  EXPECT_EQ(run(std::string(ZAYA_BINARY) + " launch --", log), 1);
  EXPECT_NE(test::read_text(log).find("no command to run"), std::string::npos) << test::read_text(log);
  EXPECT_NE(run(std::string(ZAYA_BINARY) + " launch --max-restarts -1 -- true", log), 0);
  EXPECT_NE(test::read_text(log).find("--max-restarts"), std::string::npos) << test::read_text(log);
  // A command that cannot be executed fails at once (no restarts of something that cannot start).
  EXPECT_EQ(run(std::string(ZAYA_BINARY) + " launch -- " + (dir / "no_such_program").string(), log), 1);
  EXPECT_NE(test::read_text(log).find("cannot run '" + (dir / "no_such_program").string() +
                                      "': No such file or directory"),
            std::string::npos)
      << test::read_text(log);
  EXPECT_NE(run(std::string(ZAYA_BINARY) + " launch --heartbeat-file /no/such/dir/hb -- true", log), 0);
  EXPECT_NE(test::read_text(log).find("/no/such/dir"), std::string::npos) << test::read_text(log);
}

// mpirun -np 2 (as tests/dist_test.cpp): rank 1 dies at step 6 the first time; mpirun ends the job,
// the supervisor restarts it, both ranks resume from the step-4 checkpoint and finish.
TEST_F(Launch, MpirunRankCrashIsRestarted) {
  const std::string cfg = config("mpi"), marker = (dir / "mpi.marker").string();
  const std::string log = (dir / "mpi.log").string(), report = (dir / "mpi.report.json").string();
  const std::string mpirun =
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 mpirun "
      "--oversubscribe "
      "--bind-to none -x OMP_NUM_THREADS -x ZAYA_DIST_FAULT -x ZAYA_HEARTBEAT_FILE -np 2 ";
  const std::string train =
      mpirun + ZAYA_BINARY + " train --comm-timeout 20 --config " + cfg + " --resume auto";
  ASSERT_EQ(run(std::string(ZAYA_BINARY) + " launch --max-restarts 2 --backoff 0.2 --kill-grace 2 --report " +
                    report + " -- " + one_shot(marker, "ZAYA_DIST_FAULT=exit:1:6", train),
                log),
            0)
      << test::read_text(log);
  const std::string out = test::read_text(log);
  EXPECT_NE(out.find("resumed from " + (dir / "mpi" / "checkpoints" / "step_0000000").string()),
            std::string::npos)
      << out;
  const nlohmann::json r = test::read_json(report);
  ASSERT_EQ(r["attempts"].size(), 2u) << out;
  EXPECT_NE(r["attempts"][0]["exit_code"], 0);
  // Rank 0's heartbeat came through mpirun: step 5, or 4 when mpirun ended rank 0 before its step-5 beat.
  EXPECT_GE(r["attempts"][0]["max_step"], 4) << out;
  EXPECT_EQ(r["attempts"][1]["exit_code"], 0);
  // The same job without a fault, under mpirun -np 2: the restarted run ends bitwise equal to it.
  const std::string straight =
      mpirun + ZAYA_BINARY + " train --comm-timeout 20 --config " + config("mpi_straight");
  ASSERT_EQ(run(straight, (dir / "mpi_straight.log").string()), 0)
      << test::read_text((dir / "mpi_straight.log").string());
  expect_bitwise_as_straight("mpi", 2, "mpi_straight");
}

// A failure that a restart cannot fix (a missing TRAIN.json) is tried twice, not max-restarts + 1 times:
// the same exit code and error line before the first step stops the supervisor with the reason. The job's
// stderr still reaches the supervisor's stderr. An error that changes between attempts is retried as usual.
TEST_F(Launch, SameSetupErrorTwiceStopsRestarting) {
  const std::string log = (dir / "setup.log").string(), report = (dir / "setup.report.json").string();
  const std::string missing = (dir / "no_such_config.json").string();
  EXPECT_EQ(run(std::string(ZAYA_BINARY) + " launch --max-restarts 5 --backoff 0.05 --report " + report +
                    " -- " + ZAYA_BINARY + " train --config " + missing + " --resume auto",
                log),
            1);
  const std::string out = test::read_text(log);
  EXPECT_NE(out.find("zaya train: error: " + missing), std::string::npos) << "the job's stderr is shown\n"
                                                                          << out;
  EXPECT_NE(out.find("giving up: attempts 1 and 2 failed before the job's first step with the same error "
                     "(exit code 1: zaya train: error: " +
                     missing),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("a restart cannot fix that"), std::string::npos) << out;
  const nlohmann::json r = test::read_json(report);
  EXPECT_EQ(r["outcome"], "gave up");
  EXPECT_EQ(r["exit_code"], 1);
  EXPECT_EQ(r["restarts"], 1);
  ASSERT_EQ(r["attempts"].size(), 2u) << out;
  EXPECT_EQ(r["attempts"][1]["stepped"], false);
  EXPECT_NE(r["attempts"][1]["error"].get<std::string>().find(missing), std::string::npos);
  EXPECT_NE(r["reason"].get<std::string>().find("same error"), std::string::npos);

  // The error line names the attempt: it differs every time, so every restart is used.
  const std::string counter = (dir / "setup.counter").string();
  EXPECT_EQ(run(std::string(ZAYA_BINARY) + " launch --max-restarts 2 --backoff 0.05 -- sh -c 'n=$(cat " +
                    counter + " 2>/dev/null || echo 0); n=$((n+1)); echo $n > " + counter +
                    "; echo \"error: attempt $n\" >&2; exit 4'",
                log),
            1);
  EXPECT_NE(test::read_text(log).find("report: gave up after 3 attempt(s), 2 restart(s)"), std::string::npos)
      << test::read_text(log);
}

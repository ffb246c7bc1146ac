#include "train/run_start.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "train/train_log.h"

namespace zaya::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// What a run writes into `out` (model/ is a directory); train/trainer.cpp and train/train_log.h.
constexpr const char* kOutFiles[] = {"run.json",   "metrics.jsonl", "summary.json", "events.jsonl",
                                     "sample.txt", "training.png",  "model"};

// A previous run's files in this run's directories.
struct RunFiles {
  RunJson out_json, ckpt_json;
  std::vector<std::string> out_files;  // names in `out`, directories with a trailing '/'
  std::vector<ckpt::CheckpointListing> checkpoints;
  bool ckpt_run_json_elsewhere = false;  // checkpoint.dir's run.json is not one of out_files

  bool empty() const { return out_files.empty() && checkpoints.empty() && !ckpt_json.present; }
};

RunFiles find_run_files(const TrainConfig& c) {
  RunFiles f;
  f.out_json = read_run_json(c.out_dir);
  f.ckpt_json = read_run_json(c.ckpt_dir);
  std::error_code ec;
  for (const char* name : kOutFiles) {
    const fs::path p = fs::path(c.out_dir) / name;
    if (fs::exists(p, ec)) f.out_files.push_back(fs::is_directory(p, ec) ? std::string(name) + "/" : name);
  }
  f.checkpoints = ckpt::list_checkpoints(c.ckpt_dir);
  f.ckpt_run_json_elsewhere = f.ckpt_json.present && !fs::equivalent(c.ckpt_dir, c.out_dir, ec);
  return f;
}

// "run.json, metrics.jsonl, model/ in runs/x; 2 checkpoints in runs/x/checkpoints (steps 500-520)".
std::string describe(const RunFiles& f, const TrainConfig& c) {
  std::string s;
  for (size_t i = 0; i < f.out_files.size(); i++) s += (i ? ", " : "") + f.out_files[i];
  if (!s.empty()) s += " in " + c.out_dir;
  if (!f.checkpoints.empty() || f.ckpt_run_json_elsewhere) {
    s += s.empty() ? "" : "; ";
    if (!f.checkpoints.empty())
      s += str_cat(f.checkpoints.size(), " checkpoint", f.checkpoints.size() == 1 ? "" : "s", " (steps ",
                   f.checkpoints.front().step, "-", f.checkpoints.back().step, ")");
    if (f.ckpt_run_json_elsewhere) s += f.checkpoints.empty() ? "run.json" : " and run.json";
    s += " in " + c.ckpt_dir;
  }
  return s;
}

// --overwrite: removes exactly the files describe() lists.
void remove_run_files(const RunFiles& f, const TrainConfig& c) {
  for (const std::string& name : f.out_files) fs::remove_all(fs::path(c.out_dir) / name);
  for (const auto& l : f.checkpoints) fs::remove_all(l.dir);
  if (f.ckpt_json.present) fs::remove(f.ckpt_json.path);
  say("train: --overwrite: removed the previous run's files: %s\n", describe(f, c).c_str());
}

// A fresh start into directories that hold another run: the error names that run, its files and the ways on.
[[noreturn]] void refuse_fresh_start(const RunFiles& f, const TrainConfig& c, const RunIdentity& ours) {
  const RunJson& owner = f.out_json.present ? f.out_json : f.ckpt_json;
  std::string who = "another run";
  if (owner.readable) {
    who = str_cat("another run (run ", owner.run_id, ", config hash ", owner.config_hash);
    if (owner.body.contains("train_config")) who += str_cat(", from ", owner.body["train_config"].dump());
    if (owner.config_hash == ours.config_hash)
      who += "; its config is this run's: continue it with --resume auto";
    else if (owner.body.contains("identity_config"))
      who +=
          "; its config differs: " + describe_config_difference(owner.body["identity_config"], ours.config);
    who += ")";
  }
  fail(str_cat(f.out_files.empty() ? c.ckpt_dir : c.out_dir, " holds ", who, ": ", describe(f, c),
               ". A new run does not write over another: give it a directory of its own with --out DIR, "
               "or remove those files first with --overwrite"));
}

// --resume auto: the newest committed checkpoint that verifies, among those of the run checkpoint.dir's
// run.json names (another run's are neither loaded nor reported); null when none is committed.
std::unique_ptr<ckpt::Checkpoint> latest_checkpoint(const TrainConfig& c) {
  const RunJson owner = read_run_json(c.ckpt_dir);
  ckpt::CheckpointFilter ours;
  if (owner.readable)
    ours = [id = owner.run_id](const std::string& dir) {
      const std::string r = checkpoint_run_id(dir);
      return r.empty() || r == id;  // unreadable ones are considered: a broken one must be reported
    };
  std::vector<std::string> skipped;
  std::unique_ptr<ckpt::Checkpoint> ck = ckpt::open_latest(c.ckpt_dir, &skipped, ours);
  for (const auto& why : skipped) say("train: resume: skipping %s\n", why.c_str());
  // Directories without COMPLETE were never committed (a save cut short): they do not stop a fresh start.
  // A committed one that fails to verify does: starting over would silently lose the run.
  int64_t committed = 0;
  for (const auto& l : ckpt::list_checkpoints(c.ckpt_dir)) committed += l.complete && (!ours || ours(l.dir));
  ZAYA_CHECK(ck || committed == 0, c.ckpt_dir, ": none of the ", committed,
             " committed checkpoints verifies; refusing to start over (remove them or pick one with "
             "--resume DIR)");
  if (!ck) say("train: resume auto: no committed checkpoint under %s, starting fresh\n", c.ckpt_dir.c_str());
  return ck;
}

// The checkpoint must be of this run's config; the run takes over its run id (empty for a checkpoint saved
// before run identities).
void adopt_checkpoint_identity(const ckpt::Checkpoint& ck, RunIdentity& id) {
  const std::optional<RunIdentity> saved = identity_of_state(ck.state());
  if (!saved) {
    say("train: resume: %s records no run identity (saved before run identities): only its batch, data "
        "seed, dtype and model size are checked\n",
        ck.dir().c_str());
    return;
  }
  ZAYA_CHECK(saved->config_hash == id.config_hash, ck.dir(), ": a checkpoint of another run (run ",
             saved->run_id, ", config hash ", saved->config_hash, "; this run's is ", id.config_hash,
             "): the TRAIN.json differs in ", describe_config_difference(saved->config, id.config),
             ". Resume it with the TRAIN.json and --steps it was saved with, or train this config from its "
             "first step in a directory of its own (--out DIR)");
  id.run_id = saved->run_id;
}

// summary.json of run `run_id` in `out` records that all c.steps steps were trained.
bool summary_says_complete(const TrainConfig& c, const std::string& run_id) {
  const std::string path = (fs::path(c.out_dir) / "summary.json").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  std::ifstream f(path);
  const json s = json::parse(f, nullptr, false);
  return s.is_object() && s.value("complete", false) && s.value("run_id", "") == run_id &&
         s.value("steps", int64_t(-1)) == c.steps;
}

// Rank 0: checks (and with --overwrite clears) the directories and returns the run's id; sets `complete`.
std::string claim_directories(const TrainConfig& c, const std::string& resume, bool overwrite,
                              const RunIdentity& id, const ckpt::Checkpoint* ck, bool* complete) {
  const RunFiles f = find_run_files(c);
  if (ck) {
    // A resume: every run.json around must name the checkpoint's run (or, for a checkpoint without an
    // identity, a run of this config).
    for (const RunJson* r : {&f.out_json, &f.ckpt_json}) {
      if (!r->present) continue;
      ZAYA_CHECK(r->readable, r->path,
                 ": not a readable run identity (malformed JSON or no run_id); restore or remove it");
      const bool same = id.run_id.empty() ? r->config_hash == id.config_hash : r->run_id == id.run_id;
      ZAYA_CHECK(same, fs::path(r->path).parent_path().string(), " belongs to run ", r->run_id, " (", r->path,
                 "), the checkpoint ", ck->dir(), " to ",
                 id.run_id.empty() ? "a run of another config" : "run ", id.run_id,
                 ": resume into that run's own directory, or give this run one with --out DIR");
    }
    std::string run_id = id.run_id;
    if (run_id.empty())
      run_id = f.out_json.readable    ? f.out_json.run_id
               : f.ckpt_json.readable ? f.ckpt_json.run_id
                                      : run_id_string(new_run_id_number());
    // The checkpoint decides: a run whose final checkpoint was lost (corrupted, a failed save) continues
    // from the one before, whatever summary.json says.
    *complete = ck->step() >= c.steps;
    if (*complete)
      say("train: the run is already complete: %s is its final step (%ld of %ld); nothing to do\n",
          ck->dir().c_str(), long(ck->step()), long(c.steps));
    return run_id;
  }
  if (f.empty()) return run_id_string(new_run_id_number());
  // --resume auto before any checkpoint committed: the same command line restarts the run its run.json names.
  const RunJson& owner = f.out_json.present ? f.out_json : f.ckpt_json;
  if (resume == "auto" && owner.readable && owner.config_hash == id.config_hash &&
      (!f.out_json.present || f.out_json.run_id == owner.run_id) &&
      (!f.ckpt_json.present || f.ckpt_json.run_id == owner.run_id)) {
    *complete = summary_says_complete(c, owner.run_id);
    if (*complete)
      say("train: the run is already complete: %s/summary.json records all %ld steps; nothing to do\n",
          c.out_dir.c_str(), long(c.steps));
    else
      say("train: resume auto: restarting run %s from its first step\n", owner.run_id.c_str());
    return owner.run_id;
  }
  if (!overwrite) refuse_fresh_start(f, c, id);
  remove_run_files(f, c);
  return run_id_string(new_run_id_number());
}

}  // namespace

RunStart plan_run_start(const TrainConfig& c, const std::string& resume, bool overwrite, dist::Comm& comm) {
  ZAYA_CHECK(!overwrite || resume.empty(),
             "--overwrite starts the run afresh (removing the previous run's files); it cannot be combined "
             "with --resume");
  RunStart s;
  s.identity = identity_of_config(c);
  if (resume == "auto")
    s.checkpoint = latest_checkpoint(c);
  else if (!resume.empty())
    s.checkpoint = std::make_unique<ckpt::Checkpoint>(ckpt::Checkpoint::open(resume));
  if (s.checkpoint) adopt_checkpoint_identity(*s.checkpoint, s.identity);
  // Rank 0 decides; the others learn the run id and whether there is anything to do.
  uint64_t run_id = 0;
  bool complete = false;
  if (comm.is_root()) {
    const std::string id = claim_directories(c, resume, overwrite, s.identity, s.checkpoint.get(), &complete);
    ZAYA_CHECK(parse_run_id(id, &run_id), "run id '", id,
               "' (from run.json or the checkpoint) is not 16 hex digits");
  }
  const std::vector<int64_t> ids = comm.allgather(int64_t(run_id), "run id");
  const std::vector<int64_t> done = comm.allgather(int64_t(complete), "run complete");
  s.identity.run_id = run_id_string(uint64_t(ids[0]));
  s.complete = done[0] != 0;
  return s;
}

}  // namespace zaya::train

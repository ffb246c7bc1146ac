#include "train/run_identity.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/error.h"

namespace zaya::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// TRAIN.json fields that do not change the trajectory: a run may change them and still be the same run.
constexpr const char* kNotIdentity[] = {"comment", "out",         "checkpoint", "eval",      "log",
                                        "sample",  "max_minutes", "save_dtype", "recompute", "tokenizer"};

json read_json_file(const std::string& path, bool* ok) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  *ok = !j.is_discarded();
  return j;
}

// Leaves of `j` as "a.b.c" -> value text.
void flatten(const json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    return;
  }
  out[prefix] = j.dump();
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

json RunIdentity::to_json() const {
  return {{"run_id", run_id}, {"config_hash", config_hash}, {"config", config}};
}

RunIdentity identity_of_config(const TrainConfig& c) {
  json j = json::parse(c.text, nullptr, false);
  ZAYA_CHECK(j.is_object(), c.source, ": not a JSON object");
  for (const char* key : kNotIdentity) j.erase(key);
  // The command line's --steps overrides the file (and the schedule's horizon with it).
  j["steps"] = c.steps;
  if (j.contains("optim") && j["optim"].is_object() && j["optim"].contains("schedule") &&
      j["optim"]["schedule"].is_object() && j["optim"]["schedule"].contains("total_steps"))
    j["optim"]["schedule"]["total_steps"] = c.optim.schedule.total_steps;
  RunIdentity id;
  id.config = j;
  const std::string text = j.dump();  // keys sorted: the same config gives the same text
  id.config_hash = ckpt::xxh3_hex(text.data(), text.size());
  return id;
}

uint64_t new_run_id_number() {
  std::random_device rd;
  const uint64_t t = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  return (uint64_t(rd()) << 32 ^ uint64_t(rd()) ^ t * 0x9e3779b97f4a7c15ull) | 1;  // never 0
}

std::string run_id_string(uint64_t id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)id);
  return buf;
}

bool parse_run_id(const std::string& id, uint64_t* out) {
  if (id.size() != 16 || id.find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  *out = std::stoull(id, nullptr, 16);
  return true;
}

std::optional<RunIdentity> identity_of_state(const json& state) {
  if (!state.is_object() || !state.contains("identity")) return std::nullopt;
  const json& j = state["identity"];
  if (!j.is_object() || !j.contains("run_id") || !j["run_id"].is_string() || !j.contains("config_hash") ||
      !j["config_hash"].is_string())
    return std::nullopt;
  RunIdentity id;
  id.run_id = j["run_id"].get<std::string>();
  id.config_hash = j["config_hash"].get<std::string>();
  id.config = j.value("config", json());
  return id;
}

std::string checkpoint_run_id(const std::string& step_dir) {
  bool ok = false;
  const json m = read_json_file((fs::path(step_dir) / "manifest.json").string(), &ok);
  if (!ok || !m.is_object() || !m.contains("state")) return "";
  const std::optional<RunIdentity> id = identity_of_state(m["state"]);
  return id ? id->run_id : "";
}

std::string describe_config_difference(const json& saved, const json& ours, size_t max_items) {
  std::map<std::string, std::string> a, b;
  flatten(saved, "", a);
  flatten(ours, "", b);
  std::vector<std::string> items;
  for (const auto& [key, value] : a) {
    auto it = b.find(key);
    if (it == b.end())
      items.push_back(str_cat(key, ": ", value, " (saved) vs not set (this run)"));
    else if (it->second != value)
      items.push_back(str_cat(key, ": ", value, " (saved) vs ", it->second, " (this run)"));
  }
  for (const auto& [key, value] : b)
    if (!a.count(key)) items.push_back(str_cat(key, ": not set (saved) vs ", value, " (this run)"));
  if (items.empty()) return "no field (the identity hashes differ)";
  std::string out;
  for (size_t i = 0; i < items.size() && i < max_items; i++) out += (i ? "; " : "") + items[i];
  if (items.size() > max_items) out += str_cat("; and ", items.size() - max_items, " more");
  return out;
}

RunJson read_run_json(const std::string& dir) {
  RunJson r;
  r.path = (fs::path(dir) / "run.json").string();
  std::error_code ec;
  r.present = fs::exists(r.path, ec);
  if (!r.present) return r;
  bool ok = false;
  r.body = read_json_file(r.path, &ok);
  if (ok && r.body.is_object() && r.body.contains("run_id") && r.body["run_id"].is_string()) {
    r.readable = true;
    r.run_id = r.body["run_id"].get<std::string>();
    r.config_hash = r.body.value("config_hash", "");
  }
  return r;
}

void write_run_json(const std::string& dir, const RunIdentity& id, const TrainConfig& c) {
  const RunJson old = read_run_json(dir);
  if (old.readable && old.run_id == id.run_id) return;  // the run's own file, as its first start wrote it
  json j = {{"format", "zaya-run-1"},        {"run_id", id.run_id},
            {"config_hash", id.config_hash}, {"model_seed", c.init_seed},
            {"data_seed", c.data_seed},      {"steps", c.steps},
            {"train_config", c.source},      {"out", c.out_dir},
            {"checkpoint_dir", c.ckpt_dir},  {"started", utc_now()},
            {"identity_config", id.config}};
  fs::create_directories(dir);
  const std::string path = (fs::path(dir) / "run.json").string();
  {
    std::ofstream f(path + ".tmp", std::ios::binary | std::ios::trunc);
    f << j.dump(2) << "\n";
    ZAYA_CHECK(f.good(), path, ".tmp: cannot write");
  }
  fs::rename(path + ".tmp", path);
}

}  // namespace zaya::train

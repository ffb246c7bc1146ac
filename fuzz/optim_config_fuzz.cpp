// Fuzzes the optimizer section of a training config (train/optim_config.h): any input must either parse
// or raise zaya::Error; nothing else may escape and nothing may crash.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/strict_json.h"
#include "train/optim_config.h"

namespace {
const char* kSeeds[] = {
    R"({"lr": 3e-4, "weight_decay": 0.1, "grad_clip": 1.0, "adamw": {"betas": [0.9, 0.95], "eps": 1e-8},
"muon": {"momentum": 0.95, "nesterov": true, "ns_steps": 5, "ns_coefficients": [3.4445, -4.775, 2.0315],
"rms_match": "moonlight", "rms_match_scale": 0.2}})",
    R"({"groups": {"embedding": {"optimizer": "adamw", "lr_scale": 2, "weight_decay": 0},
"expert": {"optimizer": "muon"}, "norm": {"lr_scale": 0.5}},
"schedule": {"kind": "wsd", "warmup_steps": 10, "total_steps": 100, "min_lr_fraction": 0.1,
"decay_fraction": 0.2, "decay_shape": "1-sqrt"}})",
    R"({"balancer": {"rule": "adam", "lr": 1e-3, "betas": [0.9, 0.99], "eps": 1e-8, "sign_rate": 1e-3,
"skip_target": null}, "schedule": {"kind": "cosine", "warmup_steps": 0, "total_steps": 5}})",
};
}  // namespace

extern "C" size_t LLVMFuzzerSeedCount() {
  return sizeof(kSeeds) / sizeof(kSeeds[0]);
}
extern "C" std::vector<uint8_t> LLVMFuzzerSeed(size_t i) {
  std::string s = kSeeds[i];
  return std::vector<uint8_t>(s.begin(), s.end());
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    nlohmann::json j = zaya::parse_json_strict(reinterpret_cast<const char*>(data), size, "fuzz.json");
    zaya::train::parse_optim_config(j, "fuzz.json: optim");
  } catch (const zaya::Error&) {
  }
  return 0;
}

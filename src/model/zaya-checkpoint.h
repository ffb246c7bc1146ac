// Writing ZAYA1 weights as a Hugging Face checkpoint directory: config.json + safetensors (sharded with an
// index above max_shard_bytes), every tensor under its native name, in `dtype` (F32 or BF16).
#pragma once

#include <string>

#include "model/zaya.h"

namespace zaya {

void save_hf_checkpoint(const std::string& dir, const ZayaConfig& cfg, const ZayaWeights& w, DType dtype,
                        uint64_t max_shard_bytes = 5'000'000'000ull);

}  // namespace zaya

#include "model/zaya-checkpoint.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/safetensors_writer.h"

namespace zaya {

void save_hf_checkpoint(const std::string& dir, const ZayaConfig& cfg_in, const ZayaWeights& w, DType dtype,
                        uint64_t max_shard_bytes) {
  ZAYA_CHECK(dtype == DType::F32 || dtype == DType::BF16, "checkpoints are written in F32 or BF16");
  ZayaConfig cfg = cfg_in;
  cfg.layout = CheckpointLayout::Native;
  ZayaWeights slots = w;  // named_params needs a mutable structure; the tensors are shared, not copied
  std::vector<NamedParam> params = named_params(cfg, slots);
  std::vector<TensorSpec> specs;
  std::map<std::string, const Tensor*> by_name;
  for (const NamedParam& p : params) {
    specs.push_back({p.name, dtype, p.shape});
    by_name[p.name] = p.slot;
  }
  std::filesystem::create_directories(dir);
  write_safetensors_sharded(dir, specs,
                            [&](const TensorSpec& s, void* dst) {
                              const Tensor& t = *by_name.at(s.name);
                              ZAYA_ASSERT(t.data && t.numel() == shape_numel(s.shape),
                                          "every parameter must be present to save");
                              if (t.dtype == dtype) {
                                std::memcpy(dst, t.data, t.nbytes());
                              } else {
                                Tensor c = t.to(dtype);
                                std::memcpy(dst, c.data, c.nbytes());
                              }
                            },
                            max_shard_bytes, {{"format", "pt"}});
  std::string tmp = dir + "/config.json.tmp";
  {
    std::ofstream f(tmp);
    f << config_to_json(cfg);
    ZAYA_CHECK(f.good(), tmp, ": write failed");
  }
  std::filesystem::rename(tmp, dir + "/config.json");
}

}  // namespace zaya

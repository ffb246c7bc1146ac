// Fuzzes the JSON inputs of the model commands: config.json (native and legacy) with its quantization_config
// (io/quant_checkpoint.h: that of a parsed config, and the input itself as one), and INPUTS.json.
// Any input must either parse or raise zaya::Error; nothing else may escape and nothing may crash.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/model_inputs.h"
#include "io/quant_checkpoint.h"
#include "model/zaya-config.h"

namespace {
const char* kSeeds[] = {
    R"({"model_type":"zaya","vocab_size":512,"hidden_size":128,"num_hidden_layers":2,"num_attention_heads":8,
"num_key_value_heads":2,"head_dim":8,"moe_intermediate_size":64,"num_experts":8,"num_experts_per_tok":1,
"router_hidden_size":32,"cca_time0":2,"cca_time1":2,"layer_types":["hybrid","hybrid_sliding"],"sliding_window":4,
"rope_parameters":{"hybrid":{"rope_type":"default","rope_theta":5e6,"partial_rotary_factor":0.5},
"hybrid_sliding":{"rope_type":"default","rope_theta":1e4}},"eos_token_id":[1,106]})",
    R"({"zaya_layers":["a",8,"a",8],"cca_num_q_heads":[8,0,8,0],"num_query_groups_list":[2,0,2,0],
"ffn_hidden_size_list":[0,128,0,128],"zaya_mlp_expansion":[0,32,0,32],"num_attention_heads":16,
"num_key_value_heads":2,"hidden_size":128,"vocab_size":512,"norm_epsilon":1e-5,"swa_layers":[0,0,3,0]})",
    R"({"input_ids":[[2,5,7],[2,9,1]],"targets":[[5,7,-100],[9,1,-100]],"attention_mask":[[1,1,1],[0,1,1]],
"generation":{"prompt_ids":[[2,5]],"max_new_tokens":4}})",
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
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const zaya::ZayaConfig cfg = zaya::parse_config(text, "fuzz.json");
    zaya::parse_quantization_config(cfg.quantization_config, "fuzz.json");
  } catch (const zaya::Error&) {
  }
  try {
    zaya::parse_quantization_config(text, "fuzz.json");
  } catch (const zaya::Error&) {
  }
  try {
    zaya::parse_model_inputs(text, "fuzz.json");
  } catch (const zaya::Error&) {
  }
  return 0;
}

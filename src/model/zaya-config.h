// ZayaConfig: every field of the native Hugging Face `config.json` (model_type "zaya", spec §3) plus the
// legacy ZAYA1-base / ZAYA1-8B-legacy layouts (spec §8.2), mapped to native meaning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

enum class LayerType : uint8_t { Hybrid, HybridSliding };

struct RopeParams {
  double theta = 5e6;
  double partial_rotary_factor = 0.5;
};

// How a checkpoint's weights are named (spec §8.3).
enum class CheckpointLayout : uint8_t { Native, Legacy8B, LegacyBase };

// Whose numbers a model reproduces (spec §8.4). Native: the Hugging Face implementation (a skip-routed
// token gets zero MoE output; the router norm uses rms_norm_eps). Legacy: Zyphra's original code for the
// legacy layouts (skip passthrough p_E·u; ZAYA1-base's router norm uses 1e-6, 8B-legacy's norm_epsilon).
// Auto: what the checkpoint was released with: Legacy for a legacy layout, or for a native config that
// records "zaya_semantics": "legacy" (as zaya export writes for a run trained that way); Native otherwise.
enum class Semantics : uint8_t { Auto, Native, Legacy };
const char* semantics_name(Semantics s);
// "auto" | "native" | "legacy"; anything else throws naming `what` (a flag or a JSON field) and the choices.
Semantics parse_semantics(const std::string& name, const std::string& what);

struct ZayaConfig {
  int64_t vocab_size = 262272;
  int64_t hidden_size = 2048;            // H
  int64_t num_hidden_layers = 40;        // L blocks (each CCA + MoE)
  int64_t num_attention_heads = 8;       // Hq (compressed count)
  int64_t num_key_value_heads = 2;       // Hk
  int64_t head_dim = 128;                // d
  int64_t moe_intermediate_size = 2048;  // I
  int64_t num_experts = 16;              // E (router has E+1 classes, last = skip)
  int64_t num_experts_per_tok = 1;       // k
  int64_t router_hidden_size = 256;      // R
  double rms_norm_eps = 1e-5;
  std::string hidden_act = "silu";
  int64_t cca_time0 = 2, cca_time1 = 2;  // t0, t1 conv kernels
  std::vector<LayerType> layer_types;    // [L]
  RopeParams rope_hybrid{5e6, 0.5};
  RopeParams rope_sliding{1e4, 0.5};
  int64_t sliding_window = 0;  // W; 0 = none
  bool attention_bias = false;
  bool lm_head_bias = false;
  bool tie_word_embeddings = true;
  int64_t pad_token_id = 0, bos_token_id = 2;
  std::vector<int64_t> eos_token_ids{106};
  int64_t max_position_embeddings = 131072;
  double initializer_range = 0.02;
  // config.json's "quantization_config" as JSON text ("" when absent); io/quant_checkpoint.h reads it.
  std::string quantization_config;

  // Semantics (spec §8.4): parse_config sets the checkpoint's own (`semantics`, Auto resolved) and the
  // fields below from it; apply_semantics switches them. Only these two fields differ between semantics.
  CheckpointLayout layout = CheckpointLayout::Native;
  Semantics own_semantics = Semantics::Native;  // the checkpoint's own (what Auto means); never Auto
  Semantics semantics = Semantics::Native;      // in effect; never Auto
  double legacy_router_norm_eps = -1;           // the router-norm eps of the legacy code (< 0: rms_norm_eps)
  bool skip_passthrough = false;                // legacy MoD: skip slot outputs p_E * u instead of 0
  double router_norm_eps = -1;                  // < 0: use rms_norm_eps

  // Derived geometry (spec §1).
  int64_t q_dim() const { return num_attention_heads * head_dim; }                  // A
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }                 // Kv
  int64_t conv_channels() const { return q_dim() + kv_dim(); }                      // C
  int64_t group_size() const { return num_attention_heads / num_key_value_heads; }  // G
  int64_t conv_state_len() const { return (cca_time0 - 1) + (cca_time1 - 1); }      // P
  const RopeParams& rope(int64_t layer) const {
    return layer_types[layer] == LayerType::HybridSliding ? rope_sliding : rope_hybrid;
  }
  int64_t rotary_dim(int64_t layer) const { return int64_t(head_dim * rope(layer).partial_rotary_factor); }
  double router_eps() const { return router_norm_eps >= 0 ? router_norm_eps : rms_norm_eps; }
  int64_t num_params() const;  // parameters (balancing-bias buffers excluded), spec §2.4

  // Checks the validators of spec §3; throws zaya::Error naming `source` and the field.
  void validate(const std::string& source) const;
};

// Switches `cfg` to semantics `s` (Auto: the checkpoint's own, cfg.own_semantics). Legacy on a
// native config that does not record legacy semantics throws, naming `src`: no legacy code ran it.
void apply_semantics(ZayaConfig& cfg, Semantics s, const std::string& src);

// Parses config.json (native or legacy); throws zaya::Error naming the file and the field.
ZayaConfig load_config(const std::string& path);
ZayaConfig parse_config(const std::string& json_text, const std::string& source);
// Writes the native config.json (as save_pretrained would).
std::string config_to_json(const ZayaConfig& c);

}  // namespace zaya

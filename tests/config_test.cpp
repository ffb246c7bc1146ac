// ZayaConfig parsing (native + legacy), INPUTS.json parsing and checkpoint/config mismatches: every bad input
// gets a zaya::Error that names the file and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/model_inputs.h"
#include "io/safetensors_writer.h"
#include "model/zaya-init.h"
#include "model/zaya.h"
#include "test_util.h"

using namespace zaya;

namespace {

std::string golden_config_text() {
  return test::read_text(test::golden_dir() + "/config.json");
}

// The golden config with one field replaced (or removed when `value` is empty).
std::string with_field(const std::string& field, const std::string& value) {
  auto j = nlohmann::json::parse(golden_config_text());
  if (value.empty())
    j.erase(field);
  else
    j[field] = nlohmann::json::parse(value);
  return j.dump();
}

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected a zaya::Error mentioning every one of: " << nlohmann::json(parts).dump();
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Config, GoldenNative) {
  ZayaConfig c = load_config(test::golden_dir() + "/config.json");
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.q_dim(), 64);
  EXPECT_EQ(c.kv_dim(), 16);
  EXPECT_EQ(c.conv_state_len(), 2);
  EXPECT_EQ(c.rotary_dim(0), 4);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{106});
  EXPECT_EQ(c.layout, CheckpointLayout::Native);
}

TEST(Config, Zaya1_8bParameterCount) {
  // Spec §2.4: 8,840,488,784 parameters (balancing biases excluded).
  ZayaConfig c = load_config(test::source_dir() + "/configs/zaya1-8b.json");
  EXPECT_EQ(c.num_params(), 8840488784);
  EXPECT_EQ(c.conv_channels(), 1280);
  EXPECT_EQ(c.group_size(), 4);
}

TEST(Config, RoundTripsThroughJson) {
  ZayaConfig a = load_config(test::data_dir() + "/ref_sliding_bias/config.json");
  ZayaConfig b = parse_config(config_to_json(a), "roundtrip");
  EXPECT_EQ(config_to_json(a), config_to_json(b));
  EXPECT_EQ(b.sliding_window, a.sliding_window);
  EXPECT_EQ(b.layer_types, a.layer_types);
}

TEST(Config, RopeDictWithoutFactorMeansFullRotary) {
  ZayaConfig c = load_config(test::data_dir() + "/ref_gqa_rot1/config.json");
  EXPECT_EQ(c.rotary_dim(0), c.head_dim);
}

TEST(Config, LegacyStyles) {
  ZayaConfig a = load_config(test::data_dir() + "/ref_legacy_8b/config.json");
  ZayaConfig b = load_config(test::data_dir() + "/ref_legacy_base/config.json");
  ZayaConfig g = load_config(test::golden_dir() + "/config.json");
  for (const ZayaConfig* c : {&a, &b}) {
    EXPECT_EQ(c->num_hidden_layers, g.num_hidden_layers);
    EXPECT_EQ(c->num_attention_heads, g.num_attention_heads);
    EXPECT_EQ(c->head_dim, g.head_dim);
    EXPECT_EQ(c->moe_intermediate_size, g.moe_intermediate_size);
    EXPECT_EQ(c->router_hidden_size, g.router_hidden_size);
    EXPECT_EQ(c->num_experts, g.num_experts);
  }
  EXPECT_EQ(a.layout, CheckpointLayout::Legacy8B);
  EXPECT_EQ(b.layout, CheckpointLayout::LegacyBase);
}

// Semantics (spec §8.4): each layout's own by default; a config written by zaya (init, export, training)
// records legacy semantics, so the model loads the way it was trained; a native config has no legacy code.
TEST(Config, SemanticsFollowTheCheckpointAndRoundTrip) {
  ZayaConfig a = load_config(test::data_dir() + "/ref_legacy_8b/config.json");
  ZayaConfig b = load_config(test::data_dir() + "/ref_legacy_base/config.json");
  ZayaConfig g = load_config(test::golden_dir() + "/config.json");
  EXPECT_EQ(a.semantics, Semantics::Legacy);
  EXPECT_TRUE(a.skip_passthrough);
  EXPECT_EQ(a.router_eps(), a.rms_norm_eps);  // 8B-legacy: norm_epsilon
  EXPECT_EQ(b.semantics, Semantics::Legacy);
  EXPECT_TRUE(b.skip_passthrough);
  EXPECT_EQ(b.router_eps(), 1e-6);  // ZAYA1-base: the unset key's fallback
  EXPECT_NE(b.rms_norm_eps, 1e-6);
  EXPECT_EQ(g.semantics, Semantics::Native);
  EXPECT_FALSE(g.skip_passthrough);
  EXPECT_EQ(g.router_eps(), g.rms_norm_eps);

  ZayaConfig b_native = b;
  apply_semantics(b_native, Semantics::Native, "b");
  EXPECT_FALSE(b_native.skip_passthrough);
  EXPECT_EQ(b_native.router_eps(), b.rms_norm_eps);
  apply_semantics(b_native, Semantics::Auto, "b");  // Auto = the checkpoint's own, even after an override
  EXPECT_EQ(b_native.semantics, Semantics::Legacy);

  // Written in the native layout, the legacy semantics travel in the config.
  ZayaConfig rt = parse_config(config_to_json(b), "rt.json");
  EXPECT_EQ(rt.layout, CheckpointLayout::Native);
  EXPECT_EQ(rt.semantics, Semantics::Legacy);
  EXPECT_TRUE(rt.skip_passthrough);
  EXPECT_EQ(rt.router_eps(), 1e-6);
  apply_semantics(b, Semantics::Native, "b");
  ZayaConfig rt_native = parse_config(config_to_json(b), "rt.json");
  EXPECT_EQ(rt_native.semantics, Semantics::Native);
  EXPECT_EQ(config_to_json(b).find("zaya_semantics"), std::string::npos);

  expect_error([&] { apply_semantics(g, Semantics::Legacy, "golden/config.json"); },
               {"golden/config.json", "legacy semantics were requested"});
  expect_error([] { parse_semantics("old", "--semantics"); }, {"--semantics", "old", "native", "legacy"});
  expect_error([] { parse_config(with_field("zaya_semantics", "\"old\""), "cfg.json"); },
               {"cfg.json", "zaya_semantics", "old"});
}

TEST(Config, BadFieldsAreNamed) {
  auto parse = [](const std::string& text) { return [text] { parse_config(text, "cfg.json"); }; };
  expect_error(parse("{"), {"cfg.json", "JSON"});
  expect_error(parse("[]"), {"cfg.json", "object"});
  expect_error(parse(with_field("model_type", "\"llama\"")), {"cfg.json", "model_type", "llama"});
  expect_error(parse(with_field("hidden_size", "")), {"cfg.json", "hidden_size"});
  expect_error(parse(with_field("hidden_size", "\"big\"")), {"cfg.json", "hidden_size", "integer"});
  expect_error(parse(with_field("num_key_value_heads", "3")), {"cfg.json", "num_key_value_heads"});
  expect_error(parse(with_field("num_experts_per_tok", "2")), {"cfg.json", "num_experts_per_tok"});
  expect_error(parse(with_field("layer_types", "[\"hybrid\"]")), {"cfg.json", "layer_types"});
  expect_error(parse(with_field("layer_types", "[\"hybrid\",\"dense\",\"hybrid\",\"hybrid\"]")),
               {"cfg.json", "layer_types[1]", "dense"});
  expect_error(parse(with_field("layer_types", "[\"hybrid\",\"hybrid_sliding\",\"hybrid\",\"hybrid\"]")),
               {"cfg.json", "sliding_window"});
  {
    auto j = nlohmann::json::parse(golden_config_text());
    j["cca_time0"] = 1;
    j["cca_time1"] = 1;
    expect_error(parse(j.dump()), {"cfg.json", "cca_time"});
  }
  expect_error(parse("{\"model_type\": \"zaya\", \"model_type\": \"zaya\"}"), {"cfg.json"});  // repeated key
  expect_error(parse(with_field("hidden_act", "\"gelu\"")), {"cfg.json", "hidden_act"});
  expect_error(
      parse(with_field("rope_parameters", "{\"hybrid\": {\"rope_type\": \"yarn\", \"rope_theta\": 1}}")),
      {"cfg.json", "rope_type", "yarn"});
  expect_error(parse(with_field("head_dim", "6")), {"cfg.json", "rotary dim"});
  expect_error(parse(with_field("eos_token_id", "\"x\"")), {"cfg.json", "eos_token_id"});
  // Found by model_json_fuzz: a rope_type that is not a string threw nlohmann's type_error;
  expect_error(parse(with_field("rope_parameters", "{\"hybrid\": {\"rope_type\": 4, \"rope_theta\": 1}}")),
               {"cfg.json", "rope_type", "string"});
  // a size so large that num_key_value_heads * head_dim overflowed int64 (UBSan), and a partial_rotary_factor
  // out of range converted to an integer before it was checked;
  expect_error(parse(with_field("head_dim", "9223372036854775807")), {"cfg.json", "head_dim", "at most"});
  expect_error(parse(with_field("rope_parameters",
                                "{\"hybrid\": {\"rope_theta\": 1, \"partial_rotary_factor\": 1e300}}")),
               {"cfg.json", "partial_rotary_factor"});
  // the layer count sized a vector before validation (std::length_error for -1,
  // bad_alloc for a huge one), and a legacy config's num_attention_heads 0 divided by zero.
  expect_error(parse(with_field("num_hidden_layers", "-1")), {"cfg.json", "num_hidden_layers"});
  expect_error(parse(with_field("num_hidden_layers", "4611686018427387904")),
               {"cfg.json", "num_hidden_layers"});
  {
    auto j = nlohmann::json::parse(test::read_text(test::data_dir() + "/ref_legacy_8b/config.json"));
    j["num_attention_heads"] = 0;
    j.erase("head_dim");
    expect_error([&] { parse_config(j.dump(), "legacy.json"); }, {"legacy.json", "num_attention_heads"});
    j["num_attention_heads"] = 8;
    j["num_hidden_layers"] = 4611686018427387904;
    expect_error([&] { parse_config(j.dump(), "legacy.json"); }, {"legacy.json", "num_hidden_layers"});
    j["num_hidden_layers"] = 8;
    j["swa_layers"] = {0, 0, INT64_MAX, 0, 0, 0, 0, 0};  // the window w + 1 overflowed
    expect_error([&] { parse_config(j.dump(), "legacy.json"); }, {"legacy.json", "swa_layers[2]"});
  }
  expect_error([] { load_config("/nonexistent/config.json"); }, {"/nonexistent/config.json"});
}

TEST(Config, LegacyRefusesUnsupportedSwitches) {
  auto j = nlohmann::json::parse(test::read_text(test::data_dir() + "/ref_legacy_8b/config.json"));
  j["zaya_use_eda"] = false;
  expect_error([&] { parse_config(j.dump(), "legacy.json"); }, {"legacy.json", "zaya_use_eda"});
}

TEST(Inputs, GoldenAndErrors) {
  ModelInputs in = load_model_inputs(test::golden_dir() + "/inputs.json");
  EXPECT_EQ(in.B, 2);
  EXPECT_EQ(in.S, 32);
  EXPECT_EQ(in.targets[31], -100);
  EXPECT_EQ(in.gen_S, 12);
  EXPECT_EQ(in.max_new_tokens, 16);
  auto parse = [](const std::string& t) { return [t] { parse_model_inputs(t, "in.json"); }; };
  expect_error(parse("nope"), {"in.json", "JSON"});
  expect_error(parse("{}"), {"in.json", "input_ids"});
  expect_error(parse("{\"input_ids\": [[1,2],[3]]}"), {"in.json", "input_ids", "different lengths"});
  expect_error(parse("{\"input_ids\": [[1,2.5]]}"), {"in.json", "input_ids[0][1]"});
  expect_error(parse("{\"input_ids\": [[1,2]], \"targets\": [[1]]}"), {"in.json", "targets"});
  expect_error(parse("{\"input_ids\": [[1,2]], \"attention_mask\": [[1,2]]}"), {"in.json", "attention_mask"});
  expect_error(parse("{\"input_ids\": [[1,99999999999]]}"), {"in.json", "32-bit"});
}

// A checkpoint that does not match its config: one error listing missing, unexpected and mis-shaped tensors.
TEST(Checkpoint, MismatchesAreListedTogether) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "zaya_config_test_ckpt";
  fs::remove_all(dir);
  fs::create_directories(dir);
  ZayaConfig cfg = load_config(test::golden_dir() + "/config.json");
  ZayaWeights w = init_weights(cfg, DType::F32, 1);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& p : named_params(cfg, w)) {
    if (p.name == "model.norm.weight") continue;  // missing
    Tensor t = *p.slot;
    if (p.name == "model.layers.1.self_attn.qk_norm.temp") t = Tensor::empty(DType::F32, {3});  // mis-shaped
    tensors.emplace_back(p.name, t);
  }
  tensors.emplace_back("model.layers.0.self_attn.o_proj.bias", Tensor::empty(DType::F32, {cfg.hidden_size}));
  write_safetensors((dir / "model.safetensors").string(), tensors);
  std::ofstream(dir / "config.json") << config_to_json(cfg);
  expect_error([&] { ZayaModel::load(dir.string()); },
               {dir.string(), "missing", "model.norm.weight", "unexpected", "o_proj.bias", "attention_bias",
                "wrong shape", "qk_norm.temp"});
  fs::remove_all(dir);
}

TEST(Checkpoint, OutOfVocabularyTokenIsAnError) {
  ZayaModel m = ZayaModel::load(test::golden_dir());
  ZayaCache cache(m.cfg, 1);
  ForwardResult r;
  ForwardScratch sc;
  int32_t ids[2] = {2, 100000};
  expect_error([&] { zaya_forward(m, cache, ids, nullptr, 1, 2, {}, r, sc); }, {"100000", "vocabulary"});
}

// zaya init writes the reference initialisation (spec §9.2) that the loader reads back.
TEST(Init, ReferenceInitialisation) {
  ZayaConfig cfg = load_config(test::golden_dir() + "/config.json");
  ZayaWeights w = init_weights(cfg, DType::F32, 7);
  const float* emb = w.embed.f32();
  for (int64_t i = 0; i < cfg.hidden_size; i++) EXPECT_EQ(emb[cfg.pad_token_id * cfg.hidden_size + i], 0.f);
  double sum = 0, sq = 0;
  int64_t n = w.embed.numel();
  for (int64_t i = 0; i < n; i++) {
    sum += emb[i];
    sq += double(emb[i]) * emb[i];
  }
  EXPECT_NEAR(sum / n, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(sq / n), 0.02, 1e-3);
  const auto& l = w.layers[1];
  EXPECT_EQ(l.temp.f32()[0], 0.f);
  EXPECT_EQ(l.router_eda_scale.f32()[0], 1.f);
  EXPECT_EQ(l.post_attn_scale.residual_scale.f32()[0], 1.f);
  EXPECT_EQ(l.post_attn_scale.residual_bias.f32()[0], 0.f);
  EXPECT_EQ(l.balancing_biases.f32()[0], 0.f);
  EXPECT_EQ(l.balancing_biases.f32()[cfg.num_experts], -1.f);
  EXPECT_EQ(l.conv0_b.f32()[0], 0.f);
  EXPECT_NE(l.conv0_w.f32()[0], 0.f);
  // Same seed, same weights; another seed, others.
  EXPECT_EQ(std::memcmp(init_weights(cfg, DType::F32, 7).embed.data, w.embed.data, w.embed.nbytes()), 0);
  EXPECT_NE(std::memcmp(init_weights(cfg, DType::F32, 8).embed.data, w.embed.data, w.embed.nbytes()), 0);
  EXPECT_TRUE(skip_never_chosen(cfg, w)[0]);
}

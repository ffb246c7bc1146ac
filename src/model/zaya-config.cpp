#include "model/zaya-config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/strict_json.h"

namespace zaya {

using json = nlohmann::json;

namespace {

// Upper bound on the number of (native) layers a config may ask for; ZAYA1-8B has 40. Checked while parsing,
// before the count sizes layer_types: a negative or absurd count would otherwise throw std::length_error or
// std::bad_alloc instead of an error that names the field.
constexpr int64_t kMaxLayers = 1 << 16;
// Upper bound on every other size (vocabulary, widths, heads, experts, windows): 2^24 (ZAYA1-8B's largest is
// its 262,272-token vocabulary). validate() checks it before any product of two sizes (kv_dim(), ...), which
// then fits in int64 with room; an absurd size would overflow them (signed overflow: undefined behaviour).
constexpr int64_t kMaxSize = int64_t(1) << 24;

// Field readers: a present field of the wrong type is an error naming the field.
struct Reader {
  const json& j;
  const std::string& src;

  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }

  int64_t i64(const char* k, int64_t def) const {
    if (!has(k)) return def;
    ZAYA_CHECK(j[k].is_number_integer(), src, ": field '", k, "' must be an integer, got ", j[k].dump());
    return j[k].get<int64_t>();
  }
  int64_t i64_required(const char* k) const {
    ZAYA_CHECK(has(k), src, ": missing required field '", k, "'");
    return i64(k, 0);
  }
  double f64(const char* k, double def) const {
    if (!has(k)) return def;
    ZAYA_CHECK(j[k].is_number(), src, ": field '", k, "' must be a number, got ", j[k].dump());
    return j[k].get<double>();
  }
  bool boolean(const char* k, bool def) const {
    if (!has(k)) return def;
    ZAYA_CHECK(j[k].is_boolean(), src, ": field '", k, "' must be true or false, got ", j[k].dump());
    return j[k].get<bool>();
  }
  std::string str(const char* k, const std::string& def) const {
    if (!has(k)) return def;
    ZAYA_CHECK(j[k].is_string(), src, ": field '", k, "' must be a string, got ", j[k].dump());
    return j[k].get<std::string>();
  }
  // A legacy field that is either a scalar or a per-half-layer list: returns the values at `idx` positions
  // that are non-zero, checking they agree.
  int64_t list_or_scalar(const char* k, int64_t def, int parity) const {
    if (!has(k)) return def;
    if (j[k].is_number_integer()) return j[k].get<int64_t>();
    ZAYA_CHECK(j[k].is_array(), src, ": field '", k, "' must be an integer or a list of integers");
    int64_t v = -1;
    for (size_t i = parity; i < j[k].size(); i += 2) {
      ZAYA_CHECK(j[k][i].is_number_integer(), src, ": field '", k, "[", i, "]' must be an integer");
      int64_t x = j[k][i].get<int64_t>();
      ZAYA_CHECK(v < 0 || v == x, src, ": field '", k, "' has differing values ", v, " and ", x,
                 " across layers; zaya.cpp expects one value per half-layer kind");
      v = x;
    }
    ZAYA_CHECK(v >= 0, src, ": field '", k, "' has no entries");
    return v;
  }
};

std::vector<int64_t> parse_eos(const Reader& r) {
  if (!r.has("eos_token_id")) return {106};
  const json& e = r.j["eos_token_id"];
  std::vector<int64_t> out;
  if (e.is_number_integer()) return {e.get<int64_t>()};
  ZAYA_CHECK(e.is_array(), r.src, ": field 'eos_token_id' must be an integer or a list of integers");
  for (const auto& x : e) {
    ZAYA_CHECK(x.is_number_integer(), r.src, ": field 'eos_token_id' must hold integers");
    out.push_back(x.get<int64_t>());
  }
  return out;
}

RopeParams parse_rope_entry(const json& e, const std::string& src, const std::string& key) {
  ZAYA_CHECK(e.is_object(), src, ": field 'rope_parameters.", key, "' must be an object");
  RopeParams p;
  // Type-checked first: json::value() would throw nlohmann's type_error (not a zaya::Error) on a number.
  ZAYA_CHECK(!e.contains("rope_type") || e["rope_type"].is_string(), src, ": field 'rope_parameters.", key,
             ".rope_type' must be a string");
  std::string type = e.value("rope_type", std::string("default"));
  ZAYA_CHECK(type == "default", src, ": field 'rope_parameters.", key, ".rope_type' is '", type,
             "'; only \"default\" RoPE is supported");
  ZAYA_CHECK(e.contains("rope_theta") && e["rope_theta"].is_number(), src, ": field 'rope_parameters.", key,
             ".rope_theta' must be a number");
  p.theta = e["rope_theta"].get<double>();
  // The reference: a per-type dict without partial_rotary_factor means f = 1.0 (spec §3).
  p.partial_rotary_factor = 1.0;
  if (e.contains("partial_rotary_factor")) {
    ZAYA_CHECK(e["partial_rotary_factor"].is_number(), src, ": field 'rope_parameters.", key,
               ".partial_rotary_factor' must be a number");
    p.partial_rotary_factor = e["partial_rotary_factor"].get<double>();
  }
  return p;
}

void parse_native(const Reader& r, ZayaConfig& c) {
  c.vocab_size = r.i64_required("vocab_size");
  c.hidden_size = r.i64_required("hidden_size");
  c.num_hidden_layers = r.i64_required("num_hidden_layers");
  ZAYA_CHECK(c.num_hidden_layers > 0 && c.num_hidden_layers <= kMaxLayers, r.src,
             ": field 'num_hidden_layers' must be in [1, ", kMaxLayers, "], got ", c.num_hidden_layers);
  c.num_attention_heads = r.i64_required("num_attention_heads");
  c.num_key_value_heads = r.i64("num_key_value_heads", c.num_attention_heads);
  c.head_dim = r.i64("head_dim", 0);
  if (c.head_dim == 0) {
    ZAYA_CHECK(c.num_attention_heads > 0, r.src, ": field 'num_attention_heads' must be positive");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.moe_intermediate_size = r.i64_required("moe_intermediate_size");
  c.num_experts = r.i64_required("num_experts");
  c.num_experts_per_tok = r.i64("num_experts_per_tok", 1);
  c.router_hidden_size = r.i64("router_hidden_size", 256);
  c.rms_norm_eps = r.f64("rms_norm_eps", 1e-5);
  c.hidden_act = r.str("hidden_act", "silu");
  c.cca_time0 = r.i64("cca_time0", 2);
  c.cca_time1 = r.i64("cca_time1", 2);
  c.sliding_window = r.i64("sliding_window", 0);
  c.attention_bias = r.boolean("attention_bias", false);
  c.lm_head_bias = r.boolean("lm_head_bias", false);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
  c.max_position_embeddings = r.i64("max_position_embeddings", 131072);
  c.initializer_range = r.f64("initializer_range", 0.02);

  c.layer_types.assign(c.num_hidden_layers, LayerType::Hybrid);
  if (r.has("layer_types")) {
    const json& lt = r.j["layer_types"];
    ZAYA_CHECK(lt.is_array(), r.src, ": field 'layer_types' must be a list");
    ZAYA_CHECK(int64_t(lt.size()) == c.num_hidden_layers, r.src, ": field 'layer_types' has ", lt.size(),
               " entries but num_hidden_layers is ", c.num_hidden_layers);
    for (size_t i = 0; i < lt.size(); i++) {
      std::string t = lt[i].is_string() ? lt[i].get<std::string>() : lt[i].dump();
      if (t == "hybrid")
        c.layer_types[i] = LayerType::Hybrid;
      else if (t == "hybrid_sliding")
        c.layer_types[i] = LayerType::HybridSliding;
      else
        fail(str_cat(r.src, ": field 'layer_types[", i, "]' is ", t,
                     "; expected \"hybrid\" or \"hybrid_sliding\""));
    }
  }
  if (r.has("rope_parameters")) {
    const json& rp = r.j["rope_parameters"];
    ZAYA_CHECK(rp.is_object(), r.src, ": field 'rope_parameters' must be an object keyed by layer type");
    // A stray top-level rope_type / partial_rotary_factor (as in the ZAYA1-8B hub file) is ignored (spec
    // §2.2).
    if (rp.contains("hybrid")) c.rope_hybrid = parse_rope_entry(rp["hybrid"], r.src, "hybrid");
    if (rp.contains("hybrid_sliding"))
      c.rope_sliding = parse_rope_entry(rp["hybrid_sliding"], r.src, "hybrid_sliding");
  }
}

// Legacy configs (spec §8.2-8.3): ZAYA1-base list style (`zaya_layers`) and ZAYA1-8B-legacy scalar style.
void parse_legacy(const Reader& r, ZayaConfig& c) {
  bool list_style = r.has("zaya_layers");
  c.layout = list_style ? CheckpointLayout::LegacyBase : CheckpointLayout::Legacy8B;
  for (const char* flag : {"zaya_use_mod", "zaya_use_eda", "scale_residual_merge"}) {
    ZAYA_CHECK(r.boolean(flag, true), r.src, ": legacy field '", flag,
               "' is false; zaya.cpp (like the native model) requires it to be true");
  }
  int64_t half_layers;
  if (list_style) {
    const json& zl = r.j["zaya_layers"];
    ZAYA_CHECK(zl.is_array() && zl.size() % 2 == 0 && !zl.empty(), r.src,
               ": field 'zaya_layers' must be a non-empty list of ['a', N] pairs");
    half_layers = int64_t(zl.size());
    for (size_t i = 0; i < zl.size(); i++) {
      bool is_attn = zl[i].is_string() && zl[i].get<std::string>() == "a";
      ZAYA_CHECK((i % 2 == 0) == is_attn && (is_attn || zl[i].is_number_integer()), r.src,
                 ": field 'zaya_layers[", i, "]' must be 'a' on even and an expert count on odd half-layers");
      if (!is_attn) c.num_experts = zl[i].get<int64_t>();
    }
  } else {
    half_layers = r.i64_required("num_hidden_layers");
    ZAYA_CHECK(half_layers % 2 == 0 && half_layers > 0 && half_layers <= 2 * kMaxLayers, r.src,
               ": field 'num_hidden_layers' (legacy half-layers) is ", half_layers,
               "; expected a positive even number up to ", 2 * kMaxLayers);
    c.num_experts = r.i64_required("num_experts");
  }
  c.num_hidden_layers = half_layers / 2;
  c.vocab_size = r.i64_required("vocab_size");
  c.hidden_size = r.i64_required("hidden_size");
  int64_t n_heads_field = r.i64_required("num_attention_heads");
  // It divides hidden_size below (the default head_dim): 0 would be a division by zero.
  ZAYA_CHECK(n_heads_field > 0, r.src, ": field 'num_attention_heads' must be positive, got ", n_heads_field);
  c.num_attention_heads =
      list_style ? r.list_or_scalar("cca_num_q_heads", n_heads_field / 2, 0) : n_heads_field;
  c.num_key_value_heads = r.has("num_query_groups_list")
                              ? r.list_or_scalar("num_query_groups_list", 2, 0)
                              : r.i64("num_query_groups", r.i64("num_key_value_heads", 2));
  int64_t kvh = r.i64("num_key_value_heads", c.num_key_value_heads);
  ZAYA_CHECK(kvh == c.num_key_value_heads, r.src, ": 'num_key_value_heads' (", kvh,
             ") must equal the legacy query-group count (", c.num_key_value_heads, ")");
  c.head_dim = r.i64("head_dim", r.i64("kv_channels", c.hidden_size / n_heads_field));
  int64_t ffn = r.has("ffn_hidden_size_list") ? r.list_or_scalar("ffn_hidden_size_list", 0, 1)
                                              : r.i64_required("ffn_hidden_size");
  ZAYA_CHECK(ffn % 2 == 0, r.src, ": field 'ffn_hidden_size' must be even (fused gate+up = 2I)");
  c.moe_intermediate_size = ffn / 2;
  c.router_hidden_size = r.list_or_scalar("zaya_mlp_expansion", 256, 1);
  c.num_experts_per_tok = r.i64("moe_router_topk", 1);
  c.rms_norm_eps = r.f64("norm_epsilon", 1e-5);
  c.cca_time0 = r.i64("cca_time0", 2);
  c.cca_time1 = r.i64("cca_time1", 2);
  c.attention_bias = r.boolean("attention_bias", false);
  c.lm_head_bias = r.boolean("lm_head_bias", false);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", true);
  c.max_position_embeddings = r.i64("max_position_embeddings", list_style ? 32768 : 131072);
  ZAYA_CHECK(!r.boolean("clamp_temp", false), r.src, ": legacy field 'clamp_temp' is true; not supported");
  double f = r.f64("partial_rotary_factor", 0.5);
  c.rope_hybrid = {r.f64("rope_theta", list_style ? 1e6 : 5e6), f};
  c.rope_sliding = {r.f64("swa_rotary_base", 1e4), f};
  c.layer_types.assign(c.num_hidden_layers, LayerType::Hybrid);
  c.sliding_window = 0;
  if (r.has("swa_layers")) {
    const json& swa = r.j["swa_layers"];
    ZAYA_CHECK(swa.is_array() && int64_t(swa.size()) == half_layers, r.src,
               ": field 'swa_layers' must list one window per half-layer (", half_layers, ")");
    for (int64_t i = 0; i < c.num_hidden_layers; i++) {
      ZAYA_CHECK(swa[2 * i].is_number_integer(), r.src, ": field 'swa_layers[", 2 * i,
                 "]' must be an integer");
      int64_t w = swa[2 * i].get<int64_t>();  // previous tokens; native W = w + 1 (spec §8.4 item 5)
      ZAYA_CHECK(w < kMaxSize, r.src, ": field 'swa_layers[", 2 * i, "]' is ", w, "; at most ", kMaxSize - 1);
      if (w > 0) {
        c.layer_types[i] = LayerType::HybridSliding;
        c.sliding_window = std::max(c.sliding_window, w + 1);
      }
    }
  }
}

}  // namespace

ZayaConfig parse_config(const std::string& text, const std::string& src) {
  json j = parse_json_strict(text.data(), text.size(), src);
  ZAYA_CHECK(j.is_object(), src, ": expected a JSON object");
  Reader r{j, src};
  ZayaConfig c;
  std::string model_type = r.str("model_type", "");
  bool legacy = r.has("zaya_layers") || r.has("ffn_hidden_size") || r.has("norm_epsilon") ||
                r.has("zaya_mlp_expansion");
  ZAYA_CHECK(model_type == "zaya" || (model_type.empty() && legacy), src, ": field 'model_type' is '",
             model_type, "'; expected \"zaya\"");
  if (legacy)
    parse_legacy(r, c);
  else
    parse_native(r, c);
  if (r.has("quantization_config")) c.quantization_config = j["quantization_config"].dump();
  // The semantics the checkpoint was released (or trained, for a zaya export) with: spec §8.4.
  if (legacy) {
    c.own_semantics = Semantics::Legacy;
    // Item 2: the ZAYA1-base code reads an unset key and falls back to 1e-6; 8B-legacy uses norm_epsilon.
    c.legacy_router_norm_eps = c.layout == CheckpointLayout::LegacyBase ? 1e-6 : c.rms_norm_eps;
  } else {
    const std::string recorded = r.str("zaya_semantics", "native");
    ZAYA_CHECK(recorded == "native" || recorded == "legacy", src, ": field 'zaya_semantics' is '", recorded,
               "'; expected \"native\" or \"legacy\"");
    c.own_semantics = recorded == "legacy" ? Semantics::Legacy : Semantics::Native;
    if (c.own_semantics == Semantics::Legacy) {
      c.legacy_router_norm_eps = r.f64("zaya_router_norm_eps", c.rms_norm_eps);
      ZAYA_CHECK(c.legacy_router_norm_eps > 0, src, ": field 'zaya_router_norm_eps' must be positive");
    }
  }
  apply_semantics(c, Semantics::Auto, src);
  c.pad_token_id = r.i64("pad_token_id", 0);
  c.bos_token_id = r.i64("bos_token_id", 2);
  c.eos_token_ids = parse_eos(r);
  c.validate(src);
  return c;
}

const char* semantics_name(Semantics s) {
  switch (s) {
    case Semantics::Auto:
      return "auto";
    case Semantics::Native:
      return "native";
    case Semantics::Legacy:
      return "legacy";
  }
  return "?";
}

Semantics parse_semantics(const std::string& name, const std::string& what) {
  if (name == "auto") return Semantics::Auto;
  if (name == "native") return Semantics::Native;
  if (name == "legacy") return Semantics::Legacy;
  fail(str_cat(what, " is '", name, "'; expected auto (the checkpoint's own), native or legacy"));
}

void apply_semantics(ZayaConfig& cfg, Semantics s, const std::string& src) {
  if (s == Semantics::Auto) s = cfg.own_semantics;
  const bool released_legacy = cfg.layout != CheckpointLayout::Native || cfg.legacy_router_norm_eps > 0;
  ZAYA_CHECK(
      s != Semantics::Legacy || released_legacy, src,
      ": legacy semantics were requested but the config is a native ZAYA config (no legacy code ran it)");
  cfg.semantics = s;
  cfg.skip_passthrough = s == Semantics::Legacy;
  cfg.router_norm_eps = s == Semantics::Legacy ? cfg.legacy_router_norm_eps : -1;
}

ZayaConfig load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZAYA_CHECK(in.good(), path, ": cannot open the model config");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path);
}

void ZayaConfig::validate(const std::string& src) const {
  auto positive = [&](int64_t v, const char* name) {
    ZAYA_CHECK(v > 0, src, ": field '", name, "' must be positive, got ", v);
    ZAYA_CHECK(v <= kMaxSize, src, ": field '", name, "' is ", v, "; at most ", kMaxSize, " is supported");
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(moe_intermediate_size, "moe_intermediate_size");
  positive(num_experts, "num_experts");
  positive(router_hidden_size, "router_hidden_size");
  positive(cca_time0, "cca_time0");
  positive(cca_time1, "cca_time1");
  ZAYA_CHECK(num_experts_per_tok == 1, src, ": field 'num_experts_per_tok' is ", num_experts_per_tok,
             "; ZAYA1 routes each token to exactly 1 class (the reference validator rejects k != 1)");
  ZAYA_CHECK(num_attention_heads % num_key_value_heads == 0, src, ": num_attention_heads (",
             num_attention_heads, ") must be a multiple of num_key_value_heads (", num_key_value_heads, ")");
  ZAYA_CHECK(kv_dim() % 2 == 0, src, ": num_key_value_heads * head_dim (", kv_dim(),
             ") must be even: values are split into current and delayed halves");
  ZAYA_CHECK(conv_state_len() >= 1, src, ": cca_time0 + cca_time1 must be at least 3 (P = t0-1 + t1-1 >= 1)");
  ZAYA_CHECK(hidden_act == "silu", src, ": field 'hidden_act' is '", hidden_act,
             "'; only \"silu\" is supported");
  ZAYA_CHECK(rms_norm_eps > 0, src, ": field 'rms_norm_eps' must be positive");
  bool any_sliding = false;
  for (auto t : layer_types) any_sliding |= t == LayerType::HybridSliding;
  ZAYA_CHECK(sliding_window <= kMaxSize, src, ": field 'sliding_window' is ", sliding_window, "; at most ",
             kMaxSize, " is supported");
  ZAYA_CHECK(!any_sliding || sliding_window > 0, src,
             ": 'sliding_window' must be a positive integer when layer_types contains \"hybrid_sliding\"");
  for (const RopeParams* p : {&rope_hybrid, &rope_sliding}) {
    // The factor is checked before the conversion to an integer (out of range, e.g. 1e300, it is UB).
    const bool in_range = p->partial_rotary_factor >= 0 && p->partial_rotary_factor <= 1;
    double rd = head_dim * p->partial_rotary_factor;
    int64_t r = in_range ? int64_t(rd) : 1;
    ZAYA_CHECK(in_range && r % 2 == 0, src, ": partial_rotary_factor ", p->partial_rotary_factor,
               " gives rotary dim ", rd, "; it must be an even integer <= head_dim ", head_dim);
    ZAYA_CHECK(p->theta > 0, src, ": rope_theta must be positive");
  }
  ZAYA_CHECK(pad_token_id >= -1 && pad_token_id < vocab_size, src, ": pad_token_id out of range");
}

int64_t ZayaConfig::num_params() const {
  const int64_t H = hidden_size, A = q_dim(), Kv = kv_dim(), C = conv_channels(), R = router_hidden_size;
  const int64_t E = num_experts, I = moe_intermediate_size, d = head_dim;
  int64_t n = vocab_size * H + 3 * H;  // embedding, input scale/bias, final norm
  if (!tie_word_embeddings) n += vocab_size * H;
  if (lm_head_bias) n += vocab_size;
  int64_t cca =
      A * H + Kv * H + Kv * H + C * cca_time0 + C + C * d * cca_time1 + C + num_key_value_heads + H * A;
  if (attention_bias) cca += A + Kv + Kv + H;
  int64_t router = R * H + R + R + 2 * (R * R + R) + (E + 1) * R;  // down, norm, fc1, fc2, out
  int64_t experts = E * 3 * I * H;
  int64_t norms_scales = 2 * H + 8 * H;
  n += num_hidden_layers * (cca + router + experts + norms_scales) +
       (num_hidden_layers - 1) * R;  // EDA scales
  return n;
}

std::string config_to_json(const ZayaConfig& c) {
  json j;
  j["architectures"] = {"ZayaForCausalLM"};
  j["model_type"] = "zaya";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["num_experts"] = c.num_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["router_hidden_size"] = c.router_hidden_size;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["hidden_act"] = c.hidden_act;
  j["cca_time0"] = c.cca_time0;
  j["cca_time1"] = c.cca_time1;
  json lt = json::array();
  for (auto t : c.layer_types) lt.push_back(t == LayerType::Hybrid ? "hybrid" : "hybrid_sliding");
  j["layer_types"] = lt;
  j["rope_parameters"] = {{"hybrid",
                           {{"rope_type", "default"},
                            {"rope_theta", c.rope_hybrid.theta},
                            {"partial_rotary_factor", c.rope_hybrid.partial_rotary_factor}}},
                          {"hybrid_sliding",
                           {{"rope_type", "default"},
                            {"rope_theta", c.rope_sliding.theta},
                            {"partial_rotary_factor", c.rope_sliding.partial_rotary_factor}}}};
  j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
  j["attention_bias"] = c.attention_bias;
  j["lm_head_bias"] = c.lm_head_bias;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["pad_token_id"] = c.pad_token_id;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["initializer_range"] = c.initializer_range;
  j["attention_dropout"] = 0.0;
  j["use_cache"] = true;
  if (!c.quantization_config.empty()) j["quantization_config"] = json::parse(c.quantization_config);
  if (c.semantics == Semantics::Legacy) {
    // A model trained or exported with legacy semantics says so; zaya loads it that way by default (the
    // Hugging Face code ignores these keys and computes native semantics).
    j["zaya_semantics"] = "legacy";
    j["zaya_router_norm_eps"] = c.router_eps();
  }
  return j.dump(2) + "\n";
}

}  // namespace zaya

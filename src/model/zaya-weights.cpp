#include "model/zaya-weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/quant.h"
#include "io/checkpoint_files.h"
#include "io/quant_checkpoint.h"
#include "kernels/cca.h"
#include "kernels/quant_gemm.h"

namespace zaya {

std::vector<NamedParam> named_params(const ZayaConfig& c, ZayaWeights& w) {
  const int64_t H = c.hidden_size, A = c.q_dim(), Kv = c.kv_dim(), C = c.conv_channels(), d = c.head_dim;
  const int64_t R = c.router_hidden_size, E = c.num_experts, I = c.moe_intermediate_size, V = c.vocab_size;
  std::vector<NamedParam> p;
  auto mat = [&](std::string n, Shape s, Tensor* t) {
    p.push_back({std::move(n), std::move(s), t, true, false});
  };
  auto vec = [&](std::string n, Shape s, Tensor* t) {
    p.push_back({std::move(n), std::move(s), t, false, false});
  };
  mat("model.embed_tokens.weight", {V, H}, &w.embed);
  vec("model.input_hidden_states_scale", {H}, &w.input_scale);
  vec("model.input_hidden_states_bias", {H}, &w.input_bias);
  w.layers.resize(c.num_hidden_layers);
  for (int64_t i = 0; i < c.num_hidden_layers; i++) {
    ZayaLayerWeights& l = w.layers[i];
    std::string pre = str_cat("model.layers.", i, ".");
    std::string qkv = pre + "self_attn.qkv_proj.";
    vec(pre + "input_layernorm.weight", {H}, &l.input_norm);
    mat(qkv + "q_proj.weight", {A, H}, &l.q_proj);
    if (c.attention_bias) vec(qkv + "q_proj.bias", {A}, &l.q_bias);
    mat(qkv + "k_proj.weight", {Kv, H}, &l.k_proj);
    if (c.attention_bias) vec(qkv + "k_proj.bias", {Kv}, &l.k_bias);
    mat(qkv + "v_proj_current.weight", {Kv / 2, H}, &l.v_cur);
    if (c.attention_bias) vec(qkv + "v_proj_current.bias", {Kv / 2}, &l.v_cur_bias);
    mat(qkv + "v_proj_delayed.weight", {Kv / 2, H}, &l.v_del);
    if (c.attention_bias) vec(qkv + "v_proj_delayed.bias", {Kv / 2}, &l.v_del_bias);
    vec(qkv + "conv_qk_depthwise.weight", {C, 1, c.cca_time0}, &l.conv0_w);
    vec(qkv + "conv_qk_depthwise.bias", {C}, &l.conv0_b);
    vec(qkv + "conv_qk_grouped.weight", {C, d, c.cca_time1}, &l.conv1_w);
    vec(qkv + "conv_qk_grouped.bias", {C}, &l.conv1_b);
    vec(pre + "self_attn.qk_norm.temp", {c.num_key_value_heads}, &l.temp);
    mat(pre + "self_attn.o_proj.weight", {H, A}, &l.o_proj);
    if (c.attention_bias) vec(pre + "self_attn.o_proj.bias", {H}, &l.o_bias);
    auto res = [&](const std::string& n, ResidualScaleWeights& r) {
      vec(pre + n + ".hidden_states_scale", {H}, &r.hidden_scale);
      vec(pre + n + ".hidden_states_bias", {H}, &r.hidden_bias);
      vec(pre + n + ".residual_scale", {H}, &r.residual_scale);
      vec(pre + n + ".residual_bias", {H}, &r.residual_bias);
    };
    res("post_attention_residual_scale", l.post_attn_scale);
    vec(pre + "post_attention_layernorm.weight", {H}, &l.post_norm);
    std::string gate = pre + "mlp.gate.";
    mat(gate + "down_proj.weight", {R, H}, &l.router_down);
    vec(gate + "down_proj.bias", {R}, &l.router_down_bias);
    if (i > 0) vec(gate + "router_states_scale", {R}, &l.router_eda_scale);
    vec(gate + "router_mlp.norm.weight", {R}, &l.router_norm);
    mat(gate + "router_mlp.fc1.weight", {R, R}, &l.router_fc1);
    vec(gate + "router_mlp.fc1.bias", {R}, &l.router_fc1_bias);
    mat(gate + "router_mlp.fc2.weight", {R, R}, &l.router_fc2);
    vec(gate + "router_mlp.fc2.bias", {R}, &l.router_fc2_bias);
    mat(gate + "router_mlp.out_proj.weight", {E + 1, R}, &l.router_out);
    p.push_back({gate + "balancing_biases", {E + 1}, &l.balancing_biases, false, true});
    mat(pre + "mlp.experts.gate_up_proj", {E, 2 * I, H}, &l.experts_gate_up);
    mat(pre + "mlp.experts.down_proj", {E, H, I}, &l.experts_down);
    res("post_mlp_residual_scale", l.post_mlp_scale);
  }
  vec("model.norm.weight", {H}, &w.final_norm);
  if (!c.tie_word_embeddings) mat("lm_head.weight", {V, H}, &w.lm_head);
  if (c.lm_head_bias) vec("lm_head.bias", {V}, &w.lm_head_bias);
  return p;
}

bool legacy_to_native_name(const std::string& n, int64_t L, std::string* out, int* expert) {
  *expert = -1;
  static const std::regex layer_re(R"(^model\.layers\.(\d+)\.(.*)$)");
  if (n == "model.embed_tokens.weight" || n == "lm_head.weight" || n == "lm_head.bias") {
    *out = n;
    return true;
  }
  if (n == "model.final_norm.weight") {
    *out = "model.norm.weight";
    return true;
  }
  static const std::regex final_res(R"(^model\.res_scale\.(.*)$)");
  std::smatch m;
  if (std::regex_match(n, m, final_res)) {
    *out = str_cat("model.layers.", L - 1, ".post_mlp_residual_scale.", m[1].str());
    return true;
  }
  if (!std::regex_match(n, m, layer_re)) return false;
  int64_t hl = std::stoll(m[1].str());
  std::string rest = m[2].str();
  if (hl >= 2 * L) return false;
  int64_t i = hl / 2;
  std::string pre = str_cat("model.layers.", i, ".");
  if (rest.rfind("res_scale.", 0) == 0) {
    std::string field = rest.substr(10);
    if (hl == 0) {
      if (field == "hidden_states_scale")
        *out = "model.input_hidden_states_scale";
      else if (field == "hidden_states_bias")
        *out = "model.input_hidden_states_bias";
      else
        return false;
      return true;
    }
    // Half-layer ℓ's res_scale merges the output of half-layer ℓ-1.
    if (hl % 2 == 1)
      *out = pre + "post_attention_residual_scale." + field;
    else
      *out = str_cat("model.layers.", i - 1, ".post_mlp_residual_scale.", field);
    return true;
  }
  if (hl % 2 == 0) {  // attention half-layer
    static const std::pair<const char*, const char*> attn[] = {
        {"input_norm.weight", "input_layernorm.weight"},
        {"self_attn.qkv.linear_q.", "self_attn.qkv_proj.q_proj."},
        {"self_attn.qkv.linear_k.", "self_attn.qkv_proj.k_proj."},
        {"self_attn.qkv.val_proj1.", "self_attn.qkv_proj.v_proj_current."},
        {"self_attn.qkv.val_proj2.", "self_attn.qkv_proj.v_proj_delayed."},
        {"self_attn.qkv.conv_qk.0.", "self_attn.qkv_proj.conv_qk_depthwise."},
        {"self_attn.qkv.conv_qk.1.", "self_attn.qkv_proj.conv_qk_grouped."},
        {"self_attn.qkv.temp", "self_attn.qk_norm.temp"},
        {"self_attn.o_proj.", "self_attn.o_proj."}};
    for (const auto& [from, to] : attn) {
      size_t len = std::strlen(from);
      if (rest.compare(0, len, from) == 0) {
        *out = pre + to + rest.substr(len);
        return true;
      }
    }
    return false;
  }
  // MoE half-layer ("zaya_block" in releases, "smoe_block" in Megatron-internal names).
  if (rest == "input_norm.weight") {
    *out = pre + "post_attention_layernorm.weight";
    return true;
  }
  static const std::regex block_re(R"(^(zaya_block|smoe_block)\.(.*)$)");
  std::smatch b;
  if (!std::regex_match(rest, b, block_re)) return false;
  std::string r = b[2].str();
  static const std::regex expert_re(R"(^experts\.local_experts\.(\d+)\.linear_fc([12])\.weight$)");
  std::smatch e;
  if (std::regex_match(r, e, expert_re)) {
    *expert = std::stoi(e[1].str());
    *out = pre + (e[2].str() == "1" ? "mlp.experts.gate_up_proj" : "mlp.experts.down_proj");
    return true;
  }
  static const std::pair<const char*, const char*> router[] = {
      {"router.down_proj.", "mlp.gate.down_proj."},
      {"router.router_states_scale", "mlp.gate.router_states_scale"},
      {"router.rmsnorm_eda.weight", "mlp.gate.router_mlp.norm.weight"},
      {"router.router_mlp.0.", "mlp.gate.router_mlp.fc1."},
      {"router.router_mlp.2.", "mlp.gate.router_mlp.fc2."},
      {"router.router_mlp.4.weight", "mlp.gate.router_mlp.out_proj.weight"},
      {"router.balancing_biases", "mlp.gate.balancing_biases"}};
  for (const auto& [from, to] : router) {
    size_t len = std::strlen(from);
    if (r.compare(0, len, from) == 0) {
      *out = pre + to + r.substr(len);
      return true;
    }
  }
  return false;
}

namespace {

// A tensor in `want` dtype: the mapped view itself when possible (same dtype, element-aligned), else a copy.
Tensor as_dtype(const Tensor& src, DType want) {
  bool aligned = reinterpret_cast<uintptr_t>(src.data) % dtype_size(src.dtype) == 0;
  if (src.dtype == want && aligned) return src;
  Tensor tmp = src;
  if (!aligned) tmp = src.clone();  // clone copies into aligned memory
  return tmp.to(want);
}

bool same_values(const Tensor& a, const Tensor& b) {
  Tensor fa = a.to(DType::F32), fb = b.to(DType::F32);
  return fa.numel() == fb.numel() && std::memcmp(fa.data, fb.data, fa.nbytes()) == 0;
}

}  // namespace

ZayaWeights load_weights(const std::string& dir, const ZayaConfig& cfg, DType compute, bool in_memory) {
  CheckpointFiles files = CheckpointFiles::open(dir);
  ZayaWeights w;
  w.compute = compute;
  std::vector<NamedParam> params = named_params(cfg, w);
  const bool legacy = cfg.layout != CheckpointLayout::Native;

  // Index the stored tensors under native names (legacy experts are gathered per expert).
  struct Source {
    std::string stored;
    std::vector<std::string> experts;  // legacy: stored name per expert
  };
  std::map<std::string, Source> by_native;
  std::vector<std::string> unexpected;
  for (const std::string& name : files.names()) {
    std::string native = name;
    int expert = -1;
    if (legacy && !legacy_to_native_name(name, cfg.num_hidden_layers, &native, &expert)) {
      unexpected.push_back(name + " (no native counterpart)");
      continue;
    }
    Source& s = by_native[native];
    if (expert >= 0) {
      if (expert >= cfg.num_experts) {
        unexpected.push_back(name + str_cat(" (expert ", expert, " >= num_experts ", cfg.num_experts, ")"));
        continue;
      }
      s.experts.resize(cfg.num_experts);
      s.experts[expert] = name;
    } else {
      s.stored = name;
    }
  }

  const WeightQuant quant = parse_quantization_config(cfg.quantization_config, dir + "/config.json");
  ZAYA_CHECK(quant.format == DType::F32 || !legacy, dir,
             ": a quantized checkpoint must use the native tensor layout (spec §8.3)");
  std::vector<std::string> missing, misshaped;
  std::set<std::string> used;
  std::set<const void*> mapped;  // data of the matrices used in place from the checkpoint's mapping
  int64_t quantized = 0;
  for (NamedParam& p : params) {
    QuantParts parts;
    if (quant.format != DType::F32 && p.is_matrix && find_quant_parts(files, p.name, quant.format, &parts)) {
      *p.slot = load_quantized(files, parts, quant.format, p.shape);
      mapped.insert(p.slot->data);
      used.insert(parts.data);
      used.insert(parts.scales);
      quantized++;
      continue;
    }
    auto it = by_native.find(p.name);
    if (it == by_native.end()) {
      missing.push_back(p.name);
      continue;
    }
    used.insert(p.name);
    const Source& s = it->second;
    DType want = p.is_matrix ? compute : DType::F32;
    if (!s.experts.empty()) {
      // Legacy experts: stack E tensors of shape shape[1:] into one [E, ...] tensor.
      Shape per(p.shape.begin() + 1, p.shape.end());
      Tensor stacked = Tensor::empty(want, p.shape);
      size_t stride = size_t(shape_numel(per)) * dtype_size(want);
      bool ok = true;
      for (int64_t e = 0; e < cfg.num_experts; e++) {
        if (s.experts[e].empty()) {
          missing.push_back(str_cat(p.name, " (legacy expert ", e, ")"));
          ok = false;
          continue;
        }
        Tensor t = files.tensor(s.experts[e]);
        if (t.shape != per) {
          misshaped.push_back(str_cat(s.experts[e], ": ", shape_str(t.shape), ", expected ", shape_str(per)));
          ok = false;
          continue;
        }
        Tensor c = as_dtype(t, want);
        std::memcpy(static_cast<char*>(stacked.data) + e * stride, c.data, stride);
      }
      if (ok) *p.slot = stacked;
      continue;
    }
    Tensor t = files.tensor(s.stored);
    if (t.shape != p.shape) {
      misshaped.push_back(str_cat(s.stored, ": ", shape_str(t.shape), ", expected ", shape_str(p.shape)));
      continue;
    }
    ZAYA_CHECK(t.dtype == DType::F32 || t.dtype == DType::BF16 || t.dtype == DType::F16, dir, ": ", s.stored,
               " is stored as ", dtype_name(t.dtype), " without a weight_scale",
               quant.format == DType::F32 ? " and config.json has no quantization_config" : "",
               "; expected F32, BF16 or F16");
    *p.slot = as_dtype(t, want);
    if (p.is_matrix && p.slot->data == t.data) mapped.insert(t.data);
  }
  for (const auto& [native, s] : by_native) {
    if (used.count(native)) continue;
    if (native == "lm_head.weight" && cfg.tie_word_embeddings) continue;  // checked below
    unexpected.push_back(s.stored.empty() ? native : s.stored);
  }
  if (!missing.empty() || !unexpected.empty() || !misshaped.empty()) {
    std::string msg = str_cat(dir, ": checkpoint does not match its config.json");
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      msg += str_cat("\n  ", v.size(), " ", what, ":");
      for (size_t i = 0; i < v.size() && i < 20; i++) msg += "\n    " + v[i];
      if (v.size() > 20) msg += str_cat("\n    … and ", v.size() - 20, " more");
    };
    list("missing tensors", missing);
    list("unexpected tensors", unexpected);
    list("tensors with the wrong shape", misshaped);
    if (!cfg.attention_bias && !unexpected.empty() && unexpected[0].find(".bias") != std::string::npos)
      msg += "\n  (projection biases require \"attention_bias\": true)";
    for (const std::string& u : unexpected) {
      if (quant.format == DType::F32 && u.find("weight_scale") != std::string::npos) {
        msg += "\n  (quantized weights need config.json's quantization_config)";
        break;
      }
    }
    fail(msg);
  }
  if (cfg.tie_word_embeddings) {
    if (by_native.count("lm_head.weight")) {
      Tensor head = files.tensor(by_native["lm_head.weight"].stored);
      ZAYA_CHECK(head.shape == w.embed.shape &&
                     same_values(head, files.tensor(by_native["model.embed_tokens.weight"].stored)),
                 dir,
                 ": tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight");
    }
    w.lm_head = w.embed;
  }
  ZAYA_CHECK(quant.format == DType::F32 || quantized > 0, dir, ": config.json declares ", quant.format_name,
             " weights but no tensor has a weight_scale");
  fuse_qkv(cfg, w);
  pack_decode_weights(w, /*release_source=*/true);
  if (in_memory) {
    // The matrices still read from the mapping (float ones used in place, FP8 ones: packed ones read their
    // pack) move to huge-page buffers of their own; q/k/v already moved into the fused matrix.
    // A tied BF16 embedding whose head has a pack stays mapped too: decode's head reads the pack, and the
    // embedding lookups and prefill's head GEMM can read the file's pages (a copy would hold ZAYA1-8B's
    // 1.07 GB twice).
    const bool embed_stays = cfg.tie_word_embeddings && w.lm_head.decode_pack && w.embed.dtype == DType::BF16;
    for (NamedParam& p : params)
      if (p.is_matrix && !p.slot->decode_pack && mapped.count(p.slot->data) &&
          !(embed_stays && p.slot == &w.embed))
        move_mapped_to_huge_pages(*p.slot);
    if (cfg.tie_word_embeddings) {
      // The head reads the moved embedding; its decode pack (made above from the tied copy) stays: without
      // it a quantized head ran on the fp32 streaming kernel, 137 of a 360 ms ZAYA1-8B Q8_0 step at batch 16.
      std::shared_ptr<const void> pack = w.lm_head.decode_pack;
      w.lm_head = w.embed;
      w.lm_head.decode_pack = std::move(pack);
    }
  }
  return w;
}

void move_mapped_to_huge_pages(Tensor& t) {
  const size_t n = t.nbytes();
  std::shared_ptr<void> buf = huge_alloc_shared(n, /*commit=*/false);
  // Copied in 64 MiB pieces, each piece's mapped pages handed back once copied (whole pages only; a
  // neighbour sharing a page edge keeps it), so the resident memory grows by one piece at most, not by the
  // tensor (the tied embedding of ZAYA1-8B is 1.07 GB). On a read-only file mapping MADV_DONTNEED only
  // unmaps: the page cache keeps the file for the next load.
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const size_t piece = size_t(64) << 20;
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (size_t off = 0; off < n; off += piece) {
    const size_t len = std::min(piece, n - off);
    std::memcpy(static_cast<uint8_t*>(buf.get()) + off, src + off, len);
    const uintptr_t begin = (uintptr_t(src) + off + page - 1) / page * page;
    const uintptr_t end = (uintptr_t(src) + off + len) / page * page;
    if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
  t.data = buf.get();
  t.owner = std::move(buf);
}

void pack_decode_weights(ZayaWeights& w, bool release_source) {
  // BF16 and FP8 matrices where their packed kernels serve decode.
  auto wanted = [](const Tensor& t) {
    if (t.dtype == DType::BF16) return bf16_decode_pack_wanted(/*experts=*/t.ndim() == 3);
    if (t.dtype == DType::F8_E4M3) return fp8_decode_pack_wanted();
    return true;
  };
  for (ZayaLayerWeights& l : w.layers) {
    for (Tensor* t : {&l.qkv, &l.o_proj, &l.router_down, &l.router_fc1, &l.router_fc2, &l.router_out,
                      &l.experts_gate_up, &l.experts_down})
      if (wanted(*t)) pack_for_decode(*t, release_source);
  }
  if (wanted(w.lm_head)) pack_for_decode(w.lm_head, release_source);
  // The convolution's weights for the output-lanes kernel (bf16 where exact).
  for (ZayaLayerWeights& l : w.layers) {
    const Tensor& c1 = l.conv1_w;
    if (!c1.defined() || l.conv1_pack) continue;
    auto pack = std::make_shared<CcaConvPack>(cca_conv_pack(c1.f32(), c1.shape[0], c1.shape[1], c1.shape[2]));
    if (!pack->empty()) l.conv1_pack = std::move(pack);
  }
}

void fuse_qkv(const ZayaConfig& c, ZayaWeights& w) {
  const int64_t H = c.hidden_size, A = c.q_dim(), Kv = c.kv_dim(), N = A + 2 * Kv;
  for (ZayaLayerWeights& l : w.layers) {
    // The four parts in one format: their quantized format when all four share it, else the compute dtype
    // (a quantized part among float ones is dequantized).
    DType fmt = l.q_proj.dtype;
    for (const Tensor* t : {&l.k_proj, &l.v_cur, &l.v_del})
      if (t->dtype != fmt) fmt = w.compute;
    if (!is_quantized(fmt)) fmt = w.compute;
    Tensor fused = Tensor::empty(fmt, {N, H});
    if (fused.nbytes() >= kHugePageBytes) {  // decode streams it every token: on huge pages
      std::shared_ptr<void> buf = huge_alloc_shared(fused.nbytes());
      fused = Tensor::view(fmt, {N, H}, buf.get(), buf);
    }
    Tensor fused_scales;
    if (is_quantized(fmt))
      fused_scales = Tensor::empty(quant_scales_dtype(fmt), quant_scales_shape(fmt, {N, H}));
    Tensor bias = Tensor::empty(DType::F32, {N});
    const size_t row_bytes = dtype_row_bytes(fmt, H);
    int64_t row = 0;
    for (auto [mat, vec] : {std::pair{&l.q_proj, &l.q_bias},
                            {&l.k_proj, &l.k_bias},
                            {&l.v_cur, &l.v_cur_bias},
                            {&l.v_del, &l.v_del_bias}}) {
      ZAYA_ASSERT(mat->dim(1) == H, "projection must take the hidden size as input");
      if (mat->dtype != fmt) *mat = mat->to(fmt);
      const int64_t rows = mat->dim(0);
      char* dst = static_cast<char*>(fused.data) + row * row_bytes;
      std::memcpy(dst, mat->data, rows * row_bytes);
      Tensor part = Tensor::view(fmt, {rows, H}, dst, fused.owner);
      if (is_quantized(fmt)) {
        const size_t sb = size_t(fused_scales.shape.back()) * dtype_size(fused_scales.dtype);
        char* sdst = static_cast<char*>(fused_scales.data) + row * sb;
        std::memcpy(sdst, mat->scales->data, rows * sb);
        part.scales = std::make_shared<const Tensor>(
            Tensor::view(fused_scales.dtype, {rows, fused_scales.shape.back()}, sdst, fused_scales.owner));
      }
      *mat = part;
      if (vec->data) {
        float* bdst = bias.f32() + row;
        std::memcpy(bdst, vec->data, rows * sizeof(float));
        *vec = Tensor::view(DType::F32, {rows}, bdst, bias.owner);
      }
      row += rows;
    }
    if (is_quantized(fmt)) fused.scales = std::make_shared<const Tensor>(fused_scales);
    l.qkv = fused;
    l.qkv_bias = bias;
  }
}

std::vector<bool> skip_never_chosen(const ZayaConfig& cfg, const ZayaWeights& w) {
  std::vector<bool> r;
  const int64_t E = cfg.num_experts;
  for (const auto& l : w.layers) {
    const float* b = l.balancing_biases.f32();
    float mx = b[0];
    for (int64_t e = 1; e < E; e++) mx = std::max(mx, b[e]);
    r.push_back(mx >= b[E] + 1.0f);
  }
  return r;
}

}  // namespace zaya

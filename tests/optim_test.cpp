// Optimizers (AdamW, Muon) against the PyTorch reference (tools/reference/optim_ref.py), the ZAYA1
// parameter split, schedules, clipping, the balancing controller and the optimizer config parser.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/zaya-config.h"
#include "model/zaya-weights.h"
#include "test_util.h"
#include "train/adamw.h"
#include "train/balancer.h"
#include "train/clip.h"
#include "train/muon.h"
#include "train/optim_config.h"
#include "train/optimizer.h"
#include "train/param_groups.h"
#include "train/schedule.h"

namespace zaya::train {
namespace {

std::string optim_dir() {
  return test::data_dir() + "/optim";
}

std::vector<float> values(const SafetensorsFile& f, const std::string& name) {
  Tensor t = f.tensor(name);
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

// max |a − b| / max |b|: a norm-wise relative error, meaningful for entries near 0 as well; +inf when
// any entry is NaN or inf or the sizes differ (test::diff).
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return test::diff(a, b).max_rel;
}

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); i++) d[i] = a[i] - b[i];
  return d;
}

// ---------------------------------------------------------------------------------------------------------
// AdamW vs torch.optim.AdamW (lr 1e-2, betas (0.9, 0.95), eps 1e-8, weight decay 0.1, as in optim_ref.py).
// Tolerance 3e-7 norm-wise relative on the parameters (measured 7.5e-8), 1e-6 on the moments (measured
// 2.9e-7): each element goes through a handful of fp32 operations in the same order as torch (only the fused
// multiply-adds may round differently), i.e. a few ulps (6e-8 each).

TEST(AdamW, MatchesTorchOneAndThreeSteps) {
  SafetensorsFile f = SafetensorsFile::open(optim_dir() + "/adamw.safetensors");
  AdamWConfig cfg;
  cfg.beta1 = 0.9f;
  cfg.beta2 = 0.95f;
  cfg.eps = 1e-8f;
  for (std::string c : {"mat", "vec"}) {
    SCOPED_TRACE(c);
    std::vector<float> p = values(f, c + ".p0");
    std::vector<float> m(p.size(), 0.0f), v(p.size(), 0.0f);
    for (int k = 1; k <= 3; k++) {
      std::vector<float> g = values(f, c + ".g" + std::to_string(k));
      adamw_update(p.data(), g.data(), m.data(), v.data(), int64_t(p.size()), 1e-2f, 0.1f, cfg, k);
      if (k == 1 || k == 3) {
        double err = rel_err(p, values(f, c + ".p" + std::to_string(k)));
        std::printf("  adamw %s step %d: rel err %.2e\n", c.c_str(), k, err);
        EXPECT_LT(err, 3e-7) << "step " << k;  // measured 7.5e-8 (a few ulps)
      }
    }
    const double em = rel_err(m, values(f, c + ".exp_avg")), ev = rel_err(v, values(f, c + ".exp_avg_sq"));
    std::printf("  adamw %s: exp_avg rel err %.2e, exp_avg_sq rel err %.2e\n", c.c_str(), em, ev);
    EXPECT_LT(em, 1e-6);  // measured 2.9e-7 (the moments are near 0 for some entries: relative to max |m|)
    EXPECT_LT(ev, 1e-6);  // measured 2.8e-7
  }
}

// ---------------------------------------------------------------------------------------------------------
// Muon vs the reference (lr 2e-2, weight decay 0.1, momentum 0.95, 5 quintic Newton–Schulz steps, Moonlight
// RMS match 0.2·sqrt(max dim)). Tolerance 1e-5 norm-wise relative on the update p − p0 (measured 3.7e-6),
// 1e-6 on the parameters (measured 2.2e-7), 5e-7 on the momentum (1.3e-7): Newton–Schulz chains 15 fp32 GEMMs
// whose summation order (oneDNN / OpenBLAS blocking vs torch's) differs, and the quintic iteration amplifies
// rounding of singular values near its fixed points by up to ~2x per step.

// One run of the four reference cases with Newton–Schulz on `ns_dtype` operands; bounds on the update's and
// the parameters' relative error at steps 1 and 3, and on the momentum.
void check_muon_against_reference(DType ns_dtype, double update_bound, double param_bound, double mom_bound) {
  SafetensorsFile f = SafetensorsFile::open(optim_dir() + "/muon.safetensors");
  MuonConfig cfg;  // the defaults are the reference's hyper-parameters
  cfg.ns_dtype = ns_dtype;
  std::vector<float> scratch;
  for (std::string c : {"wide", "tall", "expert", "plain"}) {
    SCOPED_TRACE(c);
    MuonConfig mc = cfg;
    mc.nesterov = c != "plain";
    Tensor t0 = f.tensor(c + ".p0");
    const int64_t rows = t0.dim(-2), cols = t0.dim(-1), batch = t0.numel() / (rows * cols);
    std::vector<float> p0 = values(f, c + ".p0"), p = p0, buf(p.size(), 0.0f);
    for (int k = 1; k <= 3; k++) {
      std::vector<float> g = values(f, c + ".g" + std::to_string(k));
      muon_update(p.data(), g.data(), buf.data(), batch, rows, cols, 2e-2f, 0.1f, mc, scratch);
      if (k == 1 || k == 3) {
        std::vector<float> ref = values(f, c + ".p" + std::to_string(k));
        double err = rel_err(minus(p, p0), minus(ref, p0));
        std::printf("  muon %s %s step %d: update rel err %.2e\n", dtype_name(ns_dtype), c.c_str(), k, err);
        EXPECT_LT(err, update_bound) << "step " << k;
        const double ep = rel_err(p, ref);
        std::printf("  muon %s %s step %d: parameter rel err %.2e\n", dtype_name(ns_dtype), c.c_str(), k, ep);
        EXPECT_LT(ep, param_bound) << "step " << k;
      }
    }
    const double eb = rel_err(buf, values(f, c + ".momentum"));
    std::printf("  muon %s %s: momentum rel err %.2e\n", dtype_name(ns_dtype), c.c_str(), eb);
    EXPECT_LT(eb, mom_bound);
  }
}

TEST(Muon, MatchesReferenceOneAndThreeSteps) {
  // fp32 operands: update 1e-5 (measured 0.8-3.7e-6), parameters 1e-6 (0.5-2.2e-7), momentum 5e-7
  // (0.4-1.3e-7).
  check_muon_against_reference(DType::F32, 1e-5, 1e-6, 5e-7);
}

// bf16 operands (the default, as the Muon reference runs it): every product's inputs rounded to 8 bits of
// mantissa, and the quintic iteration, tuned to push singular values into [0.7, 1.2] fast rather than to
// converge, moves them within that band by a few times the rounding: the update differs from the fp64
// reference's by 2.6-9.1e-2 norm-wise (measured, the "expert" case largest), the parameters by 1.1-3.3e-3,
// the momentum (no Newton–Schulz in it) by ~1e-7 as in fp32. Bounds: 0.25, 1e-2, 5e-7. A wrong coefficient or
// a dropped term gives an update error of order 1.
TEST(Muon, Bf16NewtonSchulzMatchesReferenceWithinBf16Error) {
  check_muon_against_reference(DType::BF16, 0.25, 1e-2, 5e-7);
}

TEST(Muon, NewtonSchulzNearlyOrthogonalises) {
  // The quintic iteration is tuned for speed, not convergence: singular values land in about [0.7, 1.2].
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (DType ns_dtype : {DType::F32, DType::BF16})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{16, 48}, {48, 16}, {32, 32}}) {
      SCOPED_TRACE(dtype_name(ns_dtype));
      std::vector<float> x(size_t(rows * cols));
      for (float& v : x) v = normal(rng);
      std::vector<float> scratch;
      MuonConfig cfg;
      cfg.ns_dtype = ns_dtype;
      newton_schulz(x.data(), rows, cols, cfg, scratch);
      // The Gram matrix on the short side should be close to identity.
      const int64_t m = std::min(rows, cols);
      for (int64_t i = 0; i < m; i++) {
        double diag = 0;
        for (int64_t k = 0; k < std::max(rows, cols); k++) {
          float v = rows <= cols ? x[i * cols + k] : x[k * cols + i];
          diag += double(v) * v;
        }
        EXPECT_GT(diag, 0.4) << rows << "x" << cols;
        EXPECT_LT(diag, 1.5) << rows << "x" << cols;
      }
    }
}

TEST(Muon, RmsMatchRules) {
  MuonConfig cfg;
  EXPECT_NEAR(muon_update_scale(64, 256, cfg), 0.2f * 16.0f, 1e-5);  // Moonlight: 0.2·sqrt(max)
  cfg.rms_match_scale = 0.4f;
  EXPECT_NEAR(muon_update_scale(256, 64, cfg), 0.4f * 16.0f, 1e-5);
  cfg.rms_match = RmsMatch::KellerJordan;  // sqrt(max(1, rows/cols))
  EXPECT_NEAR(muon_update_scale(256, 64, cfg), 2.0f, 1e-6);
  EXPECT_NEAR(muon_update_scale(64, 256, cfg), 1.0f, 1e-6);
  cfg.rms_match = RmsMatch::None;
  EXPECT_EQ(muon_update_scale(256, 64, cfg), 1.0f);
  // Moonlight's rule makes the update RMS ≈ rms_match_scale: the orthogonalised matrix has RMS
  // ≈ 1/sqrt(max dim) (singular values ≈ 1 on the short side).
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(64 * 256), scratch;
  for (float& v : x) v = normal(rng);
  newton_schulz(x.data(), 64, 256, MuonConfig{}, scratch);
  double sum_sq = 0;
  for (float v : x) sum_sq += double(v) * v;
  const double update_rms = 0.2 * 16.0 * std::sqrt(sum_sq / double(x.size()));
  EXPECT_GT(update_rms, 0.14);
  EXPECT_LT(update_rms, 0.22);
}

TEST(Muon, ZeroMomentumUsesTheGradient) {
  MuonConfig cfg;
  cfg.momentum = 0;  // the ZAYA1 RL setting
  std::vector<float> w(12, 0.5f), g(12), scratch;
  for (int i = 0; i < 12; i++) g[i] = float(i % 5) - 2.0f;
  std::vector<float> expected = g;
  newton_schulz(expected.data(), 3, 4, cfg, scratch);
  muon_update(w.data(), g.data(), nullptr, 1, 3, 4, 0.1f, 0.0f, cfg, scratch);
  const float s = muon_update_scale(3, 4, cfg);
  EXPECT_NEAR(s, 0.2f * 2.0f, 1e-6);
  for (int i = 0; i < 12; i++) EXPECT_NEAR(w[i], 0.5f - 0.1f * s * expected[i], 1e-6);
}

// ---------------------------------------------------------------------------------------------------------
// The ZAYA1 split over the golden config's parameters.

std::vector<ParamRef> golden_param_refs(ZayaConfig cfg, ZayaWeights& w, bool with_buffers = false) {
  std::vector<ParamRef> refs;
  for (const NamedParam& p : named_params(cfg, w))
    if (with_buffers || !p.is_buffer) refs.push_back({p.name, p.shape, nullptr, nullptr});
  return refs;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The group each name must get, written out independently of param_groups.cpp's pattern order.
GroupId expected_group(const std::string& n) {
  if (n == "model.embed_tokens.weight" || n == "lm_head.weight") return GroupId::Embedding;
  for (const char* m :
       {"q_proj.weight", "k_proj.weight", "v_proj_current.weight", "v_proj_delayed.weight", "o_proj.weight",
        "gate.down_proj.weight", "fc1.weight", "fc2.weight", "out_proj.weight"})
    if (ends_with(n, m)) return GroupId::Matrix;
  if (ends_with(n, "experts.gate_up_proj") || ends_with(n, "experts.down_proj")) return GroupId::Expert;
  if (ends_with(n, "conv_qk_depthwise.weight") || ends_with(n, "conv_qk_grouped.weight"))
    return GroupId::Conv;
  if (ends_with(n, "qk_norm.temp")) return GroupId::Temperature;
  if (ends_with(n, "input_layernorm.weight") || ends_with(n, "post_attention_layernorm.weight") ||
      ends_with(n, "router_mlp.norm.weight") || n == "model.norm.weight")
    return GroupId::Norm;
  if (ends_with(n, ".bias") || ends_with(n, "hidden_states_bias") || ends_with(n, "residual_bias"))
    return GroupId::Bias;
  if (ends_with(n, "hidden_states_scale") || ends_with(n, "residual_scale") ||
      ends_with(n, "router_states_scale"))
    return GroupId::Scale;
  ADD_FAILURE() << "test does not know " << n;
  return GroupId::Matrix;
}

TEST(ParamGroups, GoldenConfigSplit) {
  ZayaConfig base = load_config(test::golden_dir() + "/config.json");
  for (int variant = 0; variant < 2; variant++) {
    ZayaConfig cfg = base;
    if (variant == 1) {  // every optional tensor present: attention biases, untied lm_head with bias
      cfg.attention_bias = true;
      cfg.tie_word_embeddings = false;
      cfg.lm_head_bias = true;
    }
    ZayaWeights w;
    std::vector<ParamRef> refs = golden_param_refs(cfg, w);
    OptimConfig oc;
    std::vector<ParamGroup> groups = zaya_param_groups(refs, oc);
    std::vector<int> seen(refs.size(), 0);
    int64_t muon_params = 0, muon_numel = 0;
    for (const ParamGroup& g : groups) {
      for (size_t i : g.params) {
        seen[i]++;
        EXPECT_EQ(g.id, expected_group(refs[i].name)) << refs[i].name;
        bool muon = g.id == GroupId::Matrix || g.id == GroupId::Expert;
        EXPECT_EQ(g.kind, muon ? OptimKind::Muon : OptimKind::AdamW) << refs[i].name;
        bool multi_dim = refs[i].shape.size() >= 2;
        EXPECT_EQ(g.weight_decay, multi_dim ? oc.weight_decay : 0.0f) << refs[i].name;
        if (muon) muon_params++, muon_numel += shape_numel(refs[i].shape);
      }
    }
    for (size_t i = 0; i < refs.size(); i++) EXPECT_EQ(seen[i], 1) << refs[i].name;
    // Per layer: q, k, v_cur, v_del, o, router down/fc1/fc2/out_proj, experts gate_up and down.
    EXPECT_EQ(muon_params, 11 * cfg.num_hidden_layers);
    EXPECT_GT(muon_numel, 0);
  }
}

TEST(ParamGroups, BufferAndUnknownNamesAreErrors) {
  ZayaConfig cfg = load_config(test::golden_dir() + "/config.json");
  ZayaWeights w;
  std::vector<ParamRef> refs = golden_param_refs(cfg, w, /*with_buffers=*/true);
  try {
    zaya_param_groups(refs, OptimConfig{});
    FAIL() << "balancing_biases accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("balancing_biases"), std::string::npos) << e.what();
  }
  EXPECT_THROW(zaya_param_group("model.mystery", {3}), Error);
  // Muon configured for a group of vectors: an error naming the group and the parameter.
  OptimConfig oc;
  oc.groups[int(GroupId::Norm)].kind = OptimKind::Muon;
  try {
    zaya_param_groups(golden_param_refs(cfg, w), oc);
    FAIL() << "Muon on 1-D tensors accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'norm'"), std::string::npos) << e.what();
  }
}

// The training step's fused path (train_step.cpp): the clip factor passed to Optimizer::step and the bf16
// compute copies written by it must give bitwise what clipping the gradients first, stepping, then rounding
// the updated weights to bf16 gives. Muon with Nesterov momentum, plain momentum and none, AdamW for the
// rest.
TEST(Optimizer, FusedClipScaleAndBf16CopyEqualScalingThenStepThenRounding) {
  ZayaConfig cfg = load_config(test::golden_dir() + "/config.json");
  for (int variant = 0; variant < 3; variant++) {
    SCOPED_TRACE(variant == 0 ? "nesterov" : variant == 1 ? "momentum" : "no momentum");
    OptimConfig oc;
    oc.muon.nesterov = variant == 0;
    oc.muon.momentum = variant == 2 ? 0.0f : 0.95f;
    ZayaWeights wa, wb;
    std::vector<ParamRef> ra = golden_param_refs(cfg, wa), rb = golden_param_refs(cfg, wb);
    const size_t np = ra.size();
    std::vector<std::vector<float>> va(np), ga(np), vb(np), gb(np);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    for (size_t i = 0; i < np; i++) {
      const size_t n = size_t(shape_numel(ra[i].shape));
      va[i].resize(n);
      for (float& v : va[i]) v = normal(rng);
      vb[i] = va[i];
      ga[i].resize(n);
      gb[i].resize(n);
      ra[i].value = va[i].data(), ra[i].grad = ga[i].data();
      rb[i].value = vb[i].data(), rb[i].grad = gb[i].data();
    }
    Optimizer oa(ra, oc), ob(rb, oc);
    for (int step = 1; step <= 2; step++) {
      for (size_t i = 0; i < np; i++) {
        for (float& g : ga[i]) g = normal(rng);
        gb[i] = ga[i];
      }
      const ClipResult ca = clip_grad_norm(ra, 0.5f);
      const ClipResult cb = grad_norm_clip(rb, 0.5f);
      ASSERT_LT(ca.scale, 0.5f);  // clipping is on: the factor must reach the update
      ASSERT_EQ(ca.scale, cb.scale);
      ASSERT_EQ(ca.norm, cb.norm);
      for (size_t i = 0; i < np; i++)  // grad_norm_clip leaves the gradients as they are
        for (size_t k = 0; k < ga[i].size(); k++) ASSERT_EQ(ga[i][k], gb[i][k] * ca.scale) << ra[i].name;
      oa.step(ra, 1e-2f);
      ob.step(rb, 1e-2f, cb.scale);
      for (size_t i = 0; i < np; i++) {
        ASSERT_EQ(0, std::memcmp(va[i].data(), vb[i].data(), va[i].size() * sizeof(float)))
            << ra[i].name << " step " << step;
      }
    }
  }
}

// An optimizer over the golden config's parameters with real buffers: state size, a step, and a state
// round trip that makes the next step identical.
TEST(Optimizer, GoldenModelStepAndStateRoundTrip) {
  ZayaConfig cfg = load_config(test::golden_dir() + "/config.json");
  ZayaWeights w;
  std::vector<ParamRef> refs = golden_param_refs(cfg, w);
  std::vector<std::vector<float>> value(refs.size()), grad(refs.size());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  int64_t adamw_numel = 0, muon_numel = 0;
  for (size_t i = 0; i < refs.size(); i++) {
    value[i].resize(size_t(shape_numel(refs[i].shape)));
    grad[i].resize(value[i].size());
    for (float& v : value[i]) v = normal(rng);
    for (float& v : grad[i]) v = normal(rng);
    refs[i].value = value[i].data();
    refs[i].grad = grad[i].data();
    GroupId g = zaya_param_group(refs[i].name, refs[i].shape);
    (g == GroupId::Matrix || g == GroupId::Expert ? muon_numel : adamw_numel) += shape_numel(refs[i].shape);
  }
  OptimConfig oc;
  Optimizer opt(refs, oc);
  EXPECT_EQ(opt.state_bytes(), size_t(8 * adamw_numel + 4 * muon_numel + 8));
  std::vector<std::vector<float>> before = value;
  opt.step(refs, 1e-3f);
  EXPECT_EQ(opt.steps_taken(), 1);
  for (size_t i = 0; i < refs.size(); i++) {
    bool changed = false;
    for (size_t k = 0; k < value[i].size(); k++) changed |= value[i][k] != before[i][k];
    EXPECT_TRUE(changed) << refs[i].name;
    for (float v : value[i]) ASSERT_TRUE(std::isfinite(v)) << refs[i].name;
  }

  // Save (deep copies), take a second step, restore into a fresh optimizer from the saved values and
  // repeat the second step: identical results.
  std::vector<std::pair<std::string, Tensor>> saved;
  for (auto& [name, t] : opt.state_tensors()) saved.push_back({name, t.clone()});
  EXPECT_EQ(saved.front().first, "optim.step");
  std::vector<std::vector<float>> after_one = value;
  opt.step(refs, 1e-3f);
  std::vector<std::vector<float>> after_two = value;

  value = after_one;
  for (size_t i = 0; i < refs.size(); i++) refs[i].value = value[i].data();
  Optimizer restored(refs, oc);
  restored.load_state(saved, "test checkpoint");
  EXPECT_EQ(restored.steps_taken(), 1);
  restored.step(refs, 1e-3f);
  for (size_t i = 0; i < refs.size(); i++) EXPECT_EQ(value[i], after_two[i]) << refs[i].name;

  // A saved state missing a tensor or with a wrong shape is an error naming both.
  std::vector<std::pair<std::string, Tensor>> broken = saved;
  std::string dropped = broken.back().first;
  broken.pop_back();
  broken[1].second = Tensor::empty(DType::F32, {3});
  try {
    restored.load_state(broken, "ckpt.safetensors");
    FAIL() << "broken state accepted";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("ckpt.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing: " + dropped), std::string::npos) << msg;
    EXPECT_NE(msg.find(broken[1].first + ": F32 [3]"), std::string::npos) << msg;
  }
  // A parameter list that does not match the construction is an error.
  std::vector<ParamRef> fewer(refs.begin(), refs.end() - 1);
  EXPECT_THROW(restored.step(fewer, 1e-3f), Error);
}

TEST(Optimizer, GroupLrScaleAndWeightDecayApply) {
  // One vector in the "scale" group with lr_scale 0.5 and an explicit weight decay: AdamW's first step
  // moves each element by lr·lr_scale (|m̂/sqrt(v̂)| = 1) after decaying it.
  OptimConfig oc;
  oc.groups[int(GroupId::Scale)].lr_scale = 0.5f;
  oc.groups[int(GroupId::Scale)].weight_decay = 0.2f;
  std::vector<float> value = {1.0f, 2.0f}, grad = {0.3f, -0.7f};
  std::vector<ParamRef> refs = {{"model.input_hidden_states_scale", {2}, value.data(), grad.data()}};
  Optimizer opt(refs, oc);
  opt.step(refs, 0.1f);
  EXPECT_NEAR(value[0], 1.0f * (1 - 0.05f * 0.2f) - 0.05f, 1e-6);
  EXPECT_NEAR(value[1], 2.0f * (1 - 0.05f * 0.2f) + 0.05f, 1e-6);
}

// ---------------------------------------------------------------------------------------------------------
// Schedules.

TEST(Schedule, KeySteps) {
  ScheduleConfig s;
  s.warmup_steps = 10;
  s.total_steps = 110;
  s.min_lr_fraction = 0.1f;
  const double lr = 1.0;  // min_lr_fraction is fp32 (0.1f): compare to 1e-7
  s.kind = ScheduleKind::Constant;
  EXPECT_DOUBLE_EQ(lr_at(s, lr, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(s, lr, 9), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(s, lr, 10), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(s, lr, 100000), 1.0);

  s.kind = ScheduleKind::Cosine;
  EXPECT_DOUBLE_EQ(lr_at(s, lr, 4), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(s, lr, 10), 1.0);
  EXPECT_NEAR(lr_at(s, lr, 60), 0.55, 1e-7);  // half way: min + (1 − min)/2
  EXPECT_NEAR(lr_at(s, lr, 109), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.99)), 1e-7);
  EXPECT_NEAR(lr_at(s, lr, 110), 0.1, 1e-7);
  EXPECT_NEAR(lr_at(s, lr, 5000), 0.1, 1e-7);
  for (int64_t t = 11; t < 110; t++) EXPECT_LT(lr_at(s, lr, t), lr_at(s, lr, t - 1)) << t;

  s.kind = ScheduleKind::Wsd;
  s.total_steps = 100;
  s.decay_fraction = 0.2f;  // decay over steps 80..99
  EXPECT_DOUBLE_EQ(lr_at(s, lr, 50), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(s, lr, 79), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(s, lr, 80), 1.0);
  EXPECT_NEAR(lr_at(s, lr, 90), 0.1 + 0.9 * 0.5, 1e-7);
  EXPECT_NEAR(lr_at(s, lr, 100), 0.1, 1e-7);
  s.decay_shape = DecayShape::OneMinusSqrt;
  EXPECT_NEAR(lr_at(s, lr, 85), 0.1 + 0.9 * (1 - std::sqrt(0.25)), 1e-7);
  EXPECT_NEAR(lr_at(s, lr, 100), 0.1, 1e-7);
  // A decay phase longer than the time after warmup starts right after warmup.
  s.decay_fraction = 1.0f;
  EXPECT_DOUBLE_EQ(lr_at(s, lr, 10), 1.0);
  EXPECT_LT(lr_at(s, lr, 11), 1.0);
}

// ---------------------------------------------------------------------------------------------------------
// Clipping.

TEST(Clip, GlobalNormScaleAndNonFinite) {
  std::vector<float> a = {3.0f, 0.0f}, b = {4.0f};
  std::vector<ParamRef> refs = {{"a", {2}, nullptr, a.data()}, {"b", {1}, nullptr, b.data()}};
  ClipResult r = clip_grad_norm(refs, 10.0f);  // norm 5 <= 10: untouched
  EXPECT_DOUBLE_EQ(r.norm, 5.0);
  EXPECT_TRUE(r.finite);
  EXPECT_EQ(r.scale, 1.0f);
  EXPECT_EQ(a[0], 3.0f);
  r = clip_grad_norm(refs, 1.0f);
  EXPECT_DOUBLE_EQ(r.norm, 5.0);
  EXPECT_NEAR(a[0], 0.6f, 1e-6);
  EXPECT_NEAR(b[0], 0.8f, 1e-6);
  r = clip_grad_norm(refs, 0.0f);  // disabled: norm reported, nothing scaled
  EXPECT_NEAR(r.norm, 1.0, 1e-6);
  EXPECT_NEAR(a[0], 0.6f, 1e-6);

  b[0] = NAN;
  r = clip_grad_norm(refs, 0.5f);
  EXPECT_FALSE(r.finite);
  EXPECT_TRUE(std::isnan(r.norm));
  EXPECT_NEAR(a[0], 0.6f, 1e-6);  // left as they are
  b[0] = INFINITY;
  r = clip_grad_norm(refs, 0.5f);
  EXPECT_FALSE(r.finite);
  EXPECT_TRUE(std::isinf(r.norm));
}

// ---------------------------------------------------------------------------------------------------------
// The balancing controller in a toy simulation: T tokens with fixed router logits (expert e favoured by a
// skew that falls with e, plus per-token noise) choose top-1 of logits + biases over E experts + skip.

struct ToyRouter {
  int64_t E, T;
  std::vector<float> logits;  // [T, E+1]
  // scale multiplies every score: a freshly initialised router's scores differ between tokens by ~1e-4.
  ToyRouter(int64_t experts, int64_t tokens, float skew, uint32_t seed, float scale = 1.0f)
      : E(experts), T(tokens) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    logits.resize(size_t(T * (E + 1)));
    for (int64_t t = 0; t < T; t++) {
      for (int64_t e = 0; e < E; e++)
        logits[t * (E + 1) + e] = scale * (skew * float(E - 1 - e) / float(E - 1) + normal(rng));
      logits[t * (E + 1) + E] = scale * (normal(rng) - 0.5f);  // some tokens skip
    }
  }
  // counts [E+1] of the argmax class of logits + bias.
  std::vector<int64_t> route(const std::vector<float>& bias) const {
    std::vector<int64_t> counts(size_t(E + 1), 0);
    for (int64_t t = 0; t < T; t++) {
      int64_t best = 0;
      for (int64_t c = 1; c <= E; c++)
        if (logits[t * (E + 1) + c] + bias[c] > logits[t * (E + 1) + best] + bias[best]) best = c;
      counts[best]++;
    }
    return counts;
  }
};

// Runs the controller on a 2-layer toy (layer 1 skewed the other way round: E − 1 − e) and returns the
// final entropies; the biases are left in `bias`.
std::vector<double> simulate(const BalancerConfig& cfg, int steps, std::vector<std::vector<float>>& bias,
                             std::vector<double>* initial = nullptr, float scale = 1.0f,
                             std::vector<double>* min_entropy_last_50 = nullptr) {
  const int64_t E = 8, T = 4096;
  ToyRouter layer0(E, T, 3.0f, 11, scale), layer1(E, T, 3.0f, 12, scale);
  std::reverse(layer1.logits.begin(), layer1.logits.end());  // reverses expert order and token order alike
  for (int64_t t = 0; t < T; t++)
    std::rotate(&layer1.logits[t * (E + 1)], &layer1.logits[t * (E + 1) + 1],
                &layer1.logits[t * (E + 1) + E + 1]);  // skip back to index E
  bias.assign(2, std::vector<float>(size_t(E + 1), 0.0f));
  for (auto& b : bias) b[E] = -1.0f;  // HF init
  BalanceController ctl(2, E, cfg);
  std::vector<int64_t> counts(size_t(2 * (E + 1)));
  auto count_all = [&] {
    std::vector<int64_t> c0 = layer0.route(bias[0]), c1 = layer1.route(bias[1]);
    std::copy(c0.begin(), c0.end(), counts.begin());
    std::copy(c1.begin(), c1.end(), counts.begin() + (E + 1));
  };
  count_all();
  if (initial) *initial = router_load_entropy(counts.data(), 2, E);
  int first_balanced = -1;
  for (int s = 0; s < steps; s++) {
    ctl.update(counts.data(), {bias[0].data(), bias[1].data()});
    count_all();
    std::vector<double> h = router_load_entropy(counts.data(), 2, E);
    if (first_balanced < 0 && std::min(h[0], h[1]) >= 0.95 * std::log(double(E))) first_balanced = s + 1;
    if (min_entropy_last_50 && s >= steps - 50) {
      min_entropy_last_50->resize(2, 1e9);
      for (int l = 0; l < 2; l++) (*min_entropy_last_50)[l] = std::min((*min_entropy_last_50)[l], h[l]);
    }
  }
  std::printf("  balancer: entropy >= 0.95 ln E in both layers after %d steps\n", first_balanced);
  EXPECT_EQ(ctl.steps_taken(), steps);
  return router_load_entropy(counts.data(), 2, E);
}

TEST(Balancer, AdamRuleBalancesSkewedLoad) {
  BalancerConfig cfg;
  cfg.lr = 0.02f;
  std::vector<std::vector<float>> bias;
  std::vector<double> initial;
  std::vector<double> h = simulate(cfg, 300, bias, &initial);
  const double target = 0.95 * std::log(8.0);
  for (int l = 0; l < 2; l++) {
    EXPECT_LT(initial[l], 0.8 * std::log(8.0)) << "the toy must start skewed";
    EXPECT_GE(h[l], target) << "layer " << l;
    EXPECT_EQ(bias[l][8], -1.0f) << "skip entry fixed by default";
  }
  // Over-used experts got lower biases: layer 0 favours expert 0, layer 1 expert 7.
  EXPECT_LT(bias[0][0], bias[0][7]);
  EXPECT_GT(bias[1][0], bias[1][7]);
}

TEST(Balancer, SignRuleBalancesSkewedLoad) {
  BalancerConfig cfg;
  cfg.rule = BalanceRule::Sign;
  cfg.sign_rate = 0.01f;
  std::vector<std::vector<float>> bias;
  std::vector<double> h = simulate(cfg, 400, bias);
  for (int l = 0; l < 2; l++) {
    EXPECT_GE(h[l], 0.95 * std::log(8.0)) << "layer " << l;
    EXPECT_EQ(bias[l][8], -1.0f);
  }
}

TEST(Balancer, RpropRuleBalancesSkewedLoad) {
  BalancerConfig cfg;
  cfg.rule = BalanceRule::Rprop;
  std::vector<std::vector<float>> bias;
  std::vector<double> initial, last;
  std::vector<double> h = simulate(cfg, 300, bias, &initial, 1.0f, &last);
  for (int l = 0; l < 2; l++) {
    EXPECT_LT(initial[l], 0.8 * std::log(8.0));
    EXPECT_GE(last[l], 0.95 * std::log(8.0)) << "layer " << l << " over the last 50 steps";
    EXPECT_EQ(bias[l][8], -1.0f);
  }
}

// Scores 1e-4 apart (a fresh router): a fixed Adam step of 0.01 moves every token at once and the load
// flips from step to step (never balanced over the last 50 steps); rprop shrinks its step to the margins.
TEST(Balancer, RpropSettlesWhereFixedStepsOscillate) {
  const float scale = 1e-4f;
  std::vector<std::vector<float>> bias;
  std::vector<double> adam_last, rprop_last;
  BalancerConfig adam;
  adam.lr = 0.01f;
  simulate(adam, 300, bias, nullptr, scale, &adam_last);
  BalancerConfig rprop;
  rprop.rule = BalanceRule::Rprop;
  simulate(rprop, 300, bias, nullptr, scale, &rprop_last);
  const double target = 0.95 * std::log(8.0);
  std::printf("  min entropy / ln 8 over the last 50 steps: adam %.3f %.3f, rprop %.3f %.3f\n",
              adam_last[0] / std::log(8.0), adam_last[1] / std::log(8.0), rprop_last[0] / std::log(8.0),
              rprop_last[1] / std::log(8.0));
  EXPECT_LT(std::min(adam_last[0], adam_last[1]), target);
  for (int l = 0; l < 2; l++) EXPECT_GE(rprop_last[l], target) << "layer " << l;
}

TEST(Balancer, SkipTargetMovesTheSkipBias) {
  BalancerConfig cfg;
  cfg.lr = 0.02f;
  cfg.skip_target = 0.5f;  // far more skipping than the toy's logits give: the skip bias must rise
  std::vector<std::vector<float>> bias;
  simulate(cfg, 200, bias);
  EXPECT_GT(bias[0][8], -1.0f + 0.5f);
}

TEST(Balancer, ErrorExcludesSkipAndEmptyLayersAreLeftAlone) {
  BalancerConfig cfg;
  cfg.rule = BalanceRule::Sign;
  cfg.sign_rate = 1.0f;
  BalanceController ctl(2, 2, cfg);
  // Layer 0: experts 30/30 (balanced among experts) and 940 skipped: no expert is over- or under-used.
  // Layer 1: everything skipped: no update at all.
  std::vector<int64_t> counts = {30, 30, 940, 0, 0, 500};
  std::vector<float> b0 = {0.0f, 0.0f, -1.0f}, b1 = {0.5f, 0.25f, -1.0f};
  ctl.update(counts.data(), {b0.data(), b1.data()});
  EXPECT_EQ(b0, (std::vector<float>{0.0f, 0.0f, -1.0f}));
  EXPECT_EQ(b1, (std::vector<float>{0.5f, 0.25f, -1.0f}));
  counts = {-1, 0, 0, 0, 0, 0};
  EXPECT_THROW(ctl.update(counts.data(), {b0.data(), b1.data()}), Error);
  EXPECT_THROW(ctl.update(counts.data(), {b0.data()}), Error);
}

TEST(Balancer, StateRoundTrip) {
  BalancerConfig cfg;
  BalanceController a(1, 2, cfg), b(1, 2, cfg);
  std::vector<int64_t> counts = {10, 2, 1};
  std::vector<float> bias_a = {0, 0, -1}, bias_b;
  a.update(counts.data(), {bias_a.data()});
  std::vector<std::pair<std::string, Tensor>> saved;
  for (auto& [n, t] : a.state_tensors()) saved.push_back({n, t.clone()});
  b.load_state(saved, "ckpt");
  EXPECT_EQ(b.steps_taken(), 1);
  bias_b = bias_a;
  a.update(counts.data(), {bias_a.data()});
  b.update(counts.data(), {bias_b.data()});
  EXPECT_EQ(bias_a, bias_b);
  saved.pop_back();
  EXPECT_THROW(b.load_state(saved, "ckpt"), Error);
}

TEST(Balancer, Entropy) {
  std::vector<int64_t> counts = {5,  5, 5, 5, 99,  // uniform over 4 experts (skip ignored): ln 4
                                 20, 0, 0, 0, 0,   // one expert: 0
                                 0,  0, 0, 0, 7};  // nothing routed: 0
  std::vector<double> h = router_load_entropy(counts.data(), 3, 4);
  EXPECT_NEAR(h[0], std::log(4.0), 1e-12);
  EXPECT_EQ(h[1], 0.0);
  EXPECT_EQ(h[2], 0.0);
}

// ---------------------------------------------------------------------------------------------------------
// Config parsing.

TEST(OptimConfigJson, DefaultsAndFullObject) {
  OptimConfig d = parse_optim_config(nlohmann::json::object(), "cfg");
  EXPECT_EQ(d.groups[int(GroupId::Matrix)].kind, OptimKind::Muon);
  EXPECT_EQ(d.groups[int(GroupId::Expert)].kind, OptimKind::Muon);
  EXPECT_EQ(d.groups[int(GroupId::Embedding)].kind, OptimKind::AdamW);
  EXPECT_EQ(d.group_weight_decay(GroupId::Embedding), d.weight_decay);
  EXPECT_EQ(d.group_weight_decay(GroupId::Norm), 0.0f);
  EXPECT_FALSE(d.balancer.skip_target.has_value());
  EXPECT_EQ(d.muon.ns_dtype, DType::BF16);

  auto j = nlohmann::json::parse(R"({
    "lr": 0.001, "weight_decay": 0.05, "grad_clip": 0.5,
    "adamw": {"betas": [0.8, 0.9], "eps": 1e-6},
    "muon": {"momentum": 0.9, "nesterov": false, "ns_steps": 6, "ns_coefficients": [3, -4, 2],
             "ns_dtype": "fp32", "rms_match": "keller_jordan", "rms_match_scale": 0.3},
    "groups": {"embedding": {"optimizer": "adamw", "lr_scale": 2, "weight_decay": 0},
               "norm": {"lr_scale": 0.5}, "expert": {"optimizer": "adamw"}},
    "schedule": {"kind": "wsd", "warmup_steps": 10, "total_steps": 100, "min_lr_fraction": 0,
                 "decay_fraction": 0.3, "decay_shape": "1-sqrt"},
    "balancer": {"rule": "sign", "lr": 0.01, "betas": [0.5, 0.6], "eps": 1e-5, "sign_rate": 0.002,
                 "skip_target": 0.25}})");
  OptimConfig c = parse_optim_config(j, "cfg");
  EXPECT_FLOAT_EQ(c.lr, 0.001f);
  EXPECT_FLOAT_EQ(c.grad_clip, 0.5f);
  EXPECT_FLOAT_EQ(c.adamw.beta1, 0.8f);
  EXPECT_FLOAT_EQ(c.adamw.eps, 1e-6f);
  EXPECT_FALSE(c.muon.nesterov);
  EXPECT_EQ(c.muon.ns_steps, 6);
  EXPECT_FLOAT_EQ(c.muon.ns_coefficients[1], -4.0f);
  EXPECT_EQ(c.muon.rms_match, RmsMatch::KellerJordan);
  EXPECT_EQ(c.muon.ns_dtype, DType::F32);
  EXPECT_FLOAT_EQ(c.groups[int(GroupId::Embedding)].lr_scale, 2.0f);
  EXPECT_EQ(c.group_weight_decay(GroupId::Embedding), 0.0f);
  EXPECT_EQ(c.group_weight_decay(GroupId::Matrix), 0.05f);
  EXPECT_FLOAT_EQ(c.groups[int(GroupId::Norm)].lr_scale, 0.5f);
  EXPECT_EQ(c.groups[int(GroupId::Expert)].kind, OptimKind::AdamW);
  EXPECT_EQ(c.schedule.kind, ScheduleKind::Wsd);
  EXPECT_EQ(c.schedule.decay_shape, DecayShape::OneMinusSqrt);
  EXPECT_EQ(c.balancer.rule, BalanceRule::Sign);
  EXPECT_FLOAT_EQ(*c.balancer.skip_target, 0.25f);
}

TEST(OptimConfigJson, BadFieldsNameTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([1])", "cfg: expected an object"},
      {R"({"lr": "big"})", "field 'lr': expected a number, got a string"},
      {R"({"lr": -1})", "field 'lr': expected a number in"},
      {R"({"learning_rate": 1})", "field 'learning_rate' is not a known field"},
      {R"({"weight_decy": 1})", "field 'weight_decy' is not a known field (did you mean 'weight_decay'?)"},
      {R"({"adamw": {"betas": [0.9]}})", "field 'adamw.betas': expected an array of two numbers"},
      {R"({"adamw": {"betas": [0.9, 1.0]}})", "field 'adamw.betas': entry 1"},
      {R"({"adamw": {"eps": 0}})", "field 'adamw.eps'"},
      {R"({"adamw": 3})", "field 'adamw': expected an object"},
      {R"({"muon": {"ns_steps": "5"}})", "field 'muon.ns_steps': expected an integer, got a string"},
      {R"({"muon": {"ns_steps": 0}})", "field 'muon.ns_steps': expected an integer in [1, 100]"},
      {R"({"muon": {"nesterov": 1}})", "field 'muon.nesterov': expected true or false"},
      {R"({"muon": {"rms_match": "adam"}})", "field 'muon.rms_match': expected one of"},
      {R"({"muon": {"ns_dtype": "fp16"}})", "field 'muon.ns_dtype': expected one of"},
      {R"({"muon": {"ns_dtype": 16}})", "field 'muon.ns_dtype'"},
      {R"({"muon": {"ns_coefficients": [1, 2]}})", "field 'muon.ns_coefficients'"},
      {R"({"groups": {"norms": {}}})", "field 'groups.norms' is not a known field"},
      {R"({"groups": {"norm": {"optimizer": "sgd"}}})", "field 'groups.norm.optimizer': expected one of"},
      {R"({"groups": {"bias": {"weight_decay": null}}})",
       "field 'groups.bias.weight_decay': expected a number"},
      {R"({"schedule": {"kind": "cosine", "warmup_steps": 10, "total_steps": 5}})",
       "field 'schedule.total_steps': expected more than warmup_steps"},
      {R"({"schedule": {"warmup_steps": 1.5}})", "field 'schedule.warmup_steps': expected an integer"},
      {R"({"balancer": {"rule": "loss"}})", "field 'balancer.rule': expected one of"},
      {R"({"balancer": {"skip_target": 2}})", "field 'balancer.skip_target': expected null"},
      {R"({"balancer": {"lr": 1, "extra": 2}})", "field 'balancer.extra' is not a known field"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      parse_optim_config(nlohmann::json::parse(text), "cfg");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << text << "\n  -> " << e.what();
    }
  }
}

}  // namespace
}  // namespace zaya::train

#include "model/zaya-backward.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/profile.h"
#include "core/quant.h"
#include "core/threads.h"
#include "kernels/attention.h"
#include "kernels/cca.h"
#include "kernels/delayed_values.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/linear_backward.h"
#include "kernels/loss.h"
#include "kernels/moe.h"
#include "kernels/norm.h"

namespace zaya {

ZayaGrads ZayaGrads::zeros(const ZayaConfig& cfg) {
  ZayaGrads g;
  g.w.compute = DType::F32;
  for (NamedParam& p : named_params(cfg, g.w)) *p.slot = Tensor::empty(DType::F32, p.shape);
  fuse_qkv(cfg, g.w);  // q/k/v_cur/v_del gradients become views of one fused [A + 2·Kv, H] gradient
  if (cfg.tie_word_embeddings) g.w.lm_head = g.w.embed;
  return g;
}

namespace {
// Zeroes a gradient tensor; big ones in 1 MiB pieces over the threads (a mid.json model's 1.8 GB of gradients
// is a memory-bound pass that one core cannot saturate).
void clear_tensor(Tensor& t) {
  if (!t.data) return;
  auto* p = static_cast<char*>(t.data);
  const int64_t n = int64_t(t.nbytes()), piece = int64_t(1) << 20;
#pragma omp parallel for schedule(static) if (n > 4 * piece)
  for (int64_t i = 0; i < n; i += piece) std::memset(p + i, 0, size_t(std::min(piece, n - i)));
}

void clear_expert_grads(ZayaWeights& w) {
  for (ZayaLayerWeights& l : w.layers) {
    clear_tensor(l.experts_gate_up);
    clear_tensor(l.experts_down);
  }
}

void clear_grads(ZayaWeights& w, bool experts) {
  auto clear = clear_tensor;
  if (experts) clear_expert_grads(w);
  clear(w.embed);
  clear(w.input_scale);
  clear(w.input_bias);
  clear(w.final_norm);
  clear(w.lm_head);
  clear(w.lm_head_bias);
  for (ZayaLayerWeights& l : w.layers) {
    for (Tensor* t : {&l.input_norm,       &l.qkv,
                      &l.qkv_bias,         &l.conv0_w,
                      &l.conv0_b,          &l.conv1_w,
                      &l.conv1_b,          &l.temp,
                      &l.o_proj,           &l.o_bias,
                      &l.post_norm,        &l.router_down,
                      &l.router_down_bias, &l.router_eda_scale,
                      &l.router_norm,      &l.router_fc1,
                      &l.router_fc1_bias,  &l.router_fc2,
                      &l.router_fc2_bias,  &l.router_out,
                      &l.balancing_biases})
      clear(*t);
    for (ResidualScaleWeights* r : {&l.post_attn_scale, &l.post_mlp_scale}) {
      clear(r->hidden_scale);
      clear(r->hidden_bias);
      clear(r->residual_scale);
      clear(r->residual_bias);
    }
  }
}
}  // namespace

void ZayaGrads::zero() {
  clear_grads(w, /*experts=*/true);
  experts_stale = false;
}

void ZayaGrads::zero_except_experts() {
  clear_grads(w, /*experts=*/false);
  experts_stale = true;
}

void ZayaGrads::settle_experts() {
  if (!experts_stale) return;
  clear_expert_grads(w);
  experts_stale = false;
}

std::vector<NamedParam> ZayaGrads::named(const ZayaConfig& cfg) {
  std::vector<NamedParam> all = named_params(cfg, w), out;
  for (NamedParam& p : all) {
    if (!p.is_buffer) out.push_back(p);
  }
  return out;
}

namespace {

const float* opt_f32(const Tensor& t) {
  return t.data ? t.f32() : nullptr;
}
float* opt_f32_mut(Tensor& t) {
  return t.data ? t.f32() : nullptr;
}

void residual_backward(float* d_o, float* d_r, ResidualScaleWeights& g, const ResidualScaleWeights& w,
                       const float* dout, const float* o, const float* r, int64_t T, int64_t H) {
  residual_scale_backward(d_o, d_r, g.hidden_bias.f32(), g.hidden_scale.f32(), g.residual_bias.f32(),
                          g.residual_scale.f32(), dout, o, r, w.hidden_bias.f32(), w.hidden_scale.f32(),
                          w.residual_bias.f32(), w.residual_scale.f32(), T, H, /*accumulate_dr=*/false);
}

}  // namespace

int64_t count_targets(const int32_t* targets, int64_t n) {
  int64_t count = 0;
  for (int64_t t = 0; t < n; t++) count += targets[t] != -100;
  return count;
}

double zaya_backward(const ZayaModel& model, const Activations& acts, const int32_t* targets,
                     ZayaGrads& grads, int64_t count_total, ForwardScratch* scratch,
                     const std::function<void(int64_t layer)>& block_done) {
  ZAYA_PROFILE_SCOPE("zaya_backward");
  const ZayaConfig& c = model.cfg;
  const ZayaWeights& w = model.w;
  ZayaWeights& g = grads.w;
  const int64_t B = acts.B, S = acts.S, T = B * S, H = c.hidden_size, L = c.num_hidden_layers,
                V = c.vocab_size;
  const int64_t A = c.q_dim(), Kv = c.kv_dim(), C = c.conv_channels(), P = c.conv_state_len();
  const int64_t Hq = c.num_attention_heads, Hk = c.num_key_value_heads, d = c.head_dim;
  const int64_t R = c.router_hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
  const int64_t NQ = C + Kv, n_mid = S + c.cca_time1 - 1;
  const CcaDims dm{Hq, Hk, d, c.cca_time0, c.cca_time1};
  ZAYA_CHECK(int64_t(acts.layers.size()) == L && T > 0 && int64_t(acts.z.size()) == T * H,
             "zaya_backward needs the activations of a recording forward of this model");
  ZAYA_CHECK(int64_t(g.layers.size()) == L && g.embed.dtype == DType::F32,
             "zaya_backward needs gradients made by ZayaGrads::zeros for this config");
  ZAYA_CHECK(!is_quantized(w.embed.dtype) && !is_quantized(w.lm_head.dtype) &&
                 !is_quantized(w.layers[0].experts_gate_up.dtype) && !is_quantized(w.layers[0].qkv.dtype),
             "training needs float weights: this model's weights are quantized (",
             dtype_name(w.layers[0].experts_gate_up.dtype),
             "); train from the float checkpoint the quantized one was made from");

  const int64_t counted = count_targets(targets, T);
  ZAYA_CHECK(count_total == 0 || count_total >= counted, "zaya_backward: count_total ", count_total,
             " is below this micro-batch's ", counted, " counted targets");
  if (counted == 0) {  // nothing counted: the loss is defined as 0, with no gradient
    grads.settle_experts();
    return 0.0;
  }
  const int64_t N = count_total > 0 ? count_total : counted;  // the loss normaliser

  ForwardScratch local_scratch;
  ForwardScratch& rsc = scratch ? *scratch : local_scratch;
  ForwardScratch::Backward& bs = rsc.backward;
  // The same contents as fresh zero-filled vectors, without the page faults once capacity is there.
  auto zeroed = [](std::vector<float>& v, int64_t n) -> std::vector<float>& {
    v.assign(size_t(n), 0.f);
    return v;
  };

  // ---- LM head and cross-entropy (spec §6.1), one chunk of rows at a time ----
  std::vector<float>& dz = zeroed(bs.dz, T * H);
  std::vector<float>& dx = zeroed(bs.dx, T * H);
  // ≤256 MB of fp32 logits per chunk (a mid.json micro-batch of 4 x 512 in one): ḡW_lm, a [V, H]
  // accumulation per chunk, is then read and written once a micro-batch rather than 4 times (64 MB chunks:
  // lm_head_ce_backward 2-10% slower, zaya bench train on Zen 5). The GEMM below writes every element a
  // chunk reads, so the buffer only grows, never cleared.
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(T, (int64_t(1) << 26) / V));
  std::vector<float>& logits = bs.logits;
  if (int64_t(logits.size()) < chunk * V) logits.resize(size_t(chunk * V));
  std::vector<uint16_t>& z16 = bs.z16;
  std::vector<uint16_t>& dlogits16 = bs.dlogits16;
  const float* head_bias = opt_f32(w.lm_head_bias);
  double loss_sum = 0;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    ZAYA_PROFILE_SCOPE("lm_head_ce_backward");
    const int64_t rows = std::min(chunk, T - t0);
    const float* z = acts.z.data() + t0 * H;
    {
      ZAYA_PROFILE_SCOPE("lm_head_ce_backward.logits");
      gemm(rows, V, H, 1.f, mat(z, H), mat(w.lm_head, H, /*trans=*/true), 0.f, logits.data(), V);
    }
    if (head_bias) {
      for (int64_t r = 0; r < rows; r++)
        for (int64_t v = 0; v < V; v++) logits[r * V + v] += head_bias[v];
    }
    // In place: logits become ḡlogits = (softmax − onehot)/N.
    loss_sum +=
        cross_entropy_backward(logits.data(), logits.data(), targets + t0, rows, V, 1.0f / float(N), nullptr);
    // With bf16 GEMM weights both products below take ḡlogits in bf16: rounded once here (in chunks over the
    // threads) rather than once inside each gemm() call, the same bits either way.
    MatRef dlogits = mat(logits.data(), V), dlogits_t = mat(logits.data(), V, /*trans=*/true);
    if (w.compute == DType::BF16) {
      dlogits16.resize(rows * V);
      convert_f32_to_bf16_threaded(dlogits16.data(), logits.data(), rows * V);
      dlogits = {dlogits16.data(), DType::BF16, V, false};
      dlogits_t = {dlogits16.data(), DType::BF16, V, true};
    }
    {
      ZAYA_PROFILE_SCOPE("lm_head_ce_backward.dz");
      gemm(rows, H, V, 1.f, dlogits, mat(w.lm_head, H), 0.f, dz.data() + t0 * H, H);
    }
    // ḡW_lm += ḡlogitsᵀ · z. With bf16 GEMM weights this product also takes bf16 inputs (fp32 accumulation),
    // as the forward's do: z rounded to bf16 too.
    MatRef zref = mat(z, H);
    if (w.compute == DType::BF16) {
      z16.resize(rows * H);
      convert_f32_to_bf16_threaded(z16.data(), z, rows * H);
      zref = {z16.data(), DType::BF16, H, false};
    }
    {
      ZAYA_PROFILE_SCOPE("lm_head_ce_backward.dw");
      gemm(V, H, rows, 1.f, dlogits_t, zref, 1.f, g.lm_head.f32(), H);
    }
    if (float* db = opt_f32_mut(g.lm_head_bias)) {
      for (int64_t r = 0; r < rows; r++)
        for (int64_t v = 0; v < V; v++) db[v] += logits[r * V + v];
    }
  }

  // ---- Final norm ----
  rmsnorm_backward(dx.data(), g.final_norm.f32(), dz.data(), acts.x_final.data(), w.final_norm.f32(),
                   acts.rstd_final.data(), T, H, /*accumulate=*/false);

  // ---- Blocks, last to first ----
  std::vector<int64_t> pos(S);
  for (int64_t s = 0; s < S; s++) pos[s] = s;  // a recording forward starts a fresh sequence
  std::vector<uint8_t> key_valid;
  if (!acts.mask.empty()) {
    key_valid.resize(T);
    for (int64_t t = 0; t < T; t++) key_valid[t] = acts.mask[t] != 0;
  }
  std::vector<float>& dm_ = zeroed(bs.dm, T * H);
  std::vector<float>& dy = zeroed(bs.dy, T * H);
  std::vector<float>& du = zeroed(bs.du, T * H);
  std::vector<float>& da = zeroed(bs.da, T * H);
  std::vector<float>& dh = zeroed(bs.dh, T * H);
  std::vector<float>& docat = zeroed(bs.docat, T * A);
  std::vector<float>& dweight = zeroed(bs.dweight, T);
  std::vector<float>& dlogit = zeroed(bs.dlogit, T * (E + 1));
  std::vector<float>& dr2 = zeroed(bs.dr2, T * R);
  std::vector<float>& dr1 = zeroed(bs.dr1, T * R);
  std::vector<float>& drho = zeroed(bs.drho, T * R);
  std::vector<float>& drho_carry = zeroed(bs.drho_carry, T * R);
  std::vector<float>& dqk = zeroed(bs.dqk, T * C);
  std::vector<float>& dvals = zeroed(bs.dvals, T * Kv);
  std::vector<float>& dmixed = zeroed(bs.dmixed, T * C);
  std::vector<float>& draw = zeroed(bs.draw, T * C);
  std::vector<float>& dqkv = zeroed(bs.dqkv, T * NQ);
  // The per-sequence part of each block (attention, q/k mixing and norm, convolutions) runs one sequence per
  // thread when there are at least as many sequences as threads (it is serial within a sequence apart from
  // attention's two KV heads: 13% of a small-model step ran on one core), else one sequence at a time with
  // threaded kernels. Either way each sequence's parameter gradients go to its own row of seq_grads, added
  // into the step's in sequence order: the same bits for any thread count.
  const int seq_slots = B >= num_threads() ? num_threads() : 1;
  std::vector<float>& frames_all = zeroed(bs.frames, seq_slots * (P + S) * C);
  std::vector<float>& dframes_all = zeroed(bs.dframes, seq_slots * (P + S) * C);
  // One sequence's gradients: temperatures [Hk], conv0 w [C, t0] and b [C], conv1 w [C, d, t1] and b [C],
  // the delayed values' seed bias [Kv/2].
  const int64_t t0c = c.cca_time0, t1c = c.cca_time1, hv = Kv / 2;
  const int64_t sg_temp = 0, sg_w0 = sg_temp + Hk, sg_b0 = sg_w0 + C * t0c, sg_w1 = sg_b0 + C,
                sg_b1 = sg_w1 + C * d * t1c, sg_vd = sg_b1 + C, sg_n = sg_vd + hv;
  std::vector<float>& seq_grads = bs.seq_grads;
  seq_grads.resize(size_t(B * sg_n));
  // Recomputation: one block's activations at a time, re-run from what the forward kept.
  LayerActivations& recomputed = bs.recomputed;

  for (int64_t li = L - 1; li >= 0; li--) {
    if (acts.recompute) zaya_recompute_block(model, acts, li, recomputed, rsc);
    const LayerActivations& la = acts.recompute ? recomputed : acts.layers[li];
    const ZayaLayerWeights& lw = w.layers[li];
    ZayaLayerWeights& lg = g.layers[li];

    // x_out = (m + hb')⊙hs' + (y + rb')⊙rs'  (spec §6.3)
    residual_backward(dm_.data(), dy.data(), lg.post_mlp_scale, lw.post_mlp_scale, dx.data(), la.m.data(),
                      la.y.data(), T, H);

    // Experts (spec §6.11-6.12): ḡu through the experts, ḡw for the router.
    std::fill(du.begin(), du.end(), 0.f);
    moe_experts_backward(du.data(), dweight.data(), lg.experts_gate_up.f32(), lg.experts_down.f32(),
                         dm_.data(), la.u.data(), la.choice.data(), la.weight.data(), la.p_skip.data(),
                         la.plan, lw.experts_gate_up, lw.experts_down, la.gu.data(), la.act.data(),
                         la.ye.data(), T, H, I, E, c.skip_passthrough, /*overwrite=*/grads.experts_stale,
                         rsc.moe_backward);

    // Router (spec §6.13): gathered weight → logits → out_proj → GELU → fc2 → GELU → fc1 → norm → ρ.
    route_top1_backward(dlogit.data(), dweight.data(), la.probs.data(), la.choice.data(), T, E);
    linear_backward(dr2.data(), false, lg.router_out.f32(), nullptr, dlogit.data(), la.z2.data(),
                    lw.router_out, T);
    gelu_backward(dr2.data(), dr2.data(), la.pre2.data(), T * R);
    linear_backward(dr1.data(), false, lg.router_fc2.f32(), lg.router_fc2_bias.f32(), dr2.data(),
                    la.z1.data(), lw.router_fc2, T);
    gelu_backward(dr1.data(), dr1.data(), la.pre1.data(), T * R);
    linear_backward(dr2.data(), false, lg.router_fc1.f32(), lg.router_fc1_bias.f32(), dr1.data(),
                    la.rnorm.data(), lw.router_fc1, T);
    rmsnorm_backward(drho.data(), lg.router_norm.f32(), dr2.data(), la.rho.data(), lw.router_norm.f32(),
                     la.rstd_router.data(), T, R, /*accumulate=*/false);
    // EDA: ρ_i feeds block i+1 as γ_{i+1}⊙ρ_i; ρ_i = local + γ_i⊙ρ_{i−1}.
    if (li < L - 1) {
      for (int64_t k = 0; k < T * R; k++) drho[k] += drho_carry[k];
    }
    if (li > 0) {
      const float* gamma = lw.router_eda_scale.f32();
      float* dgamma = lg.router_eda_scale.f32();
      const float* rho_prev = acts.layers[li - 1].rho.data();
      for (int64_t r = 0; r < R; r++) {
        double s = 0;
        for (int64_t t = 0; t < T; t++) s += double(drho[t * R + r]) * rho_prev[t * R + r];
        dgamma[r] += float(s);
      }
      for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < R; r++) drho_carry[t * R + r] = gamma[r] * drho[t * R + r];
    }
    linear_backward(du.data(), true, lg.router_down.f32(), lg.router_down_bias.f32(), drho.data(),
                    la.u.data(), lw.router_down, T);

    // u = rmsnorm(y); y also feeds the post-MLP residual branch (dy holds that part).
    rmsnorm_backward(dy.data(), lg.post_norm.f32(), du.data(), la.y.data(), lw.post_norm.f32(),
                     la.rstd_post.data(), T, H, /*accumulate=*/true);
    // y = (a + hb)⊙hs + (x + rb)⊙rs; dx now restarts as this block's input gradient.
    residual_backward(da.data(), dx.data(), lg.post_attn_scale, lw.post_attn_scale, dy.data(), la.a.data(),
                      la.x.data(), T, H);
    // a = Ocat·W_oᵀ + b_o
    linear_backward(docat.data(), false, lg.o_proj.f32(), opt_f32_mut(lg.o_bias), da.data(), la.ocat.data(),
                    lw.o_proj, T);

    // Attention, q/k normalisation and mixing, convolutions: per sequence row.
    std::fill(dqk.begin(), dqk.end(), 0.f);
    std::fill(dvals.begin(), dvals.end(), 0.f);
    std::fill(draw.begin(), draw.end(), 0.f);
    AttentionArgs args;
    args.S = S;
    args.Hq = Hq;
    args.Hk = Hk;
    args.d = d;
    args.n_keys = S;
    args.key_pos0 = 0;
    args.key_stride = S * d;
    args.window = c.layer_types[li] == LayerType::HybridSliding ? c.sliding_window : 0;
    std::fill(seq_grads.begin(), seq_grads.end(), 0.f);
    parallel_for_dynamic(size_t(B), seq_slots, [&](size_t bi, int slot) {
      const int64_t b = int64_t(bi), o = b * S;
      float* sg = seq_grads.data() + b * sg_n;
      float* frames = frames_all.data() + slot * (P + S) * C;
      float* dframes = dframes_all.data() + slot * (P + S) * C;
      const float* qk = la.qk.data() + o * C;
      attention_backward(dqk.data() + o * C, dqk.data() + o * C + A, dvals.data() + o * Kv,
                         docat.data() + o * A, qk, C, qk + A, C, la.vals.data() + o * Kv, Kv,
                         la.lse.data() + o * Hq, pos.data(),
                         key_valid.empty() ? nullptr : key_valid.data() + o, args);
      cca_qk_backward(dmixed.data() + o * C, draw.data() + o * C, sg + sg_temp, dqk.data() + o * C,
                      la.conv.data() + o * C, la.raw.data() + o * C, lw.temp.f32(), pos.data(), S, dm,
                      c.rotary_dim(li), c.rope(li).theta);
      // Raw frames of a fresh sequence: P zero frames, then U.
      std::fill(frames, frames + P * C, 0.f);
      std::memcpy(frames + P * C, la.raw.data() + o * C, S * C * sizeof(float));
      cca_conv_backward(dframes, sg + sg_w0, sg + sg_b0, sg + sg_w1, sg + sg_b1, dmixed.data() + o * C,
                        la.mid.data() + b * n_mid * C, frames, lw.conv0_w.f32(), lw.conv1_w.f32(), S, dm);
      for (int64_t k = 0; k < S * C; k++) draw[o * C + k] += dframes[P * C + k];

      // Fused projection gradient [ḡU | ḡVc | ḡDv] (spec §6.10): Vd[s] = Dv[s−1], Vd[0] = b_vd (fresh).
      for (int64_t s = 0; s < S; s++)
        std::memcpy(dqkv.data() + (o + s) * NQ, draw.data() + (o + s) * C, C * sizeof(float));
      delayed_values_backward(dqkv.data() + o * NQ + C, dqkv.data() + o * NQ + C + hv, NQ,
                              lw.v_del_bias.data ? sg + sg_vd : nullptr, dvals.data() + o * Kv, S, hv);
    });
    {
      // The sequences' parameter gradients, in sequence order.
      float* dvd = lw.v_del_bias.data ? lg.qkv_bias.f32() + C + hv : nullptr;
      const std::pair<float*, int64_t> parts[] = {{lg.temp.f32(), sg_temp},  {lg.conv0_w.f32(), sg_w0},
                                                  {lg.conv0_b.f32(), sg_b0}, {lg.conv1_w.f32(), sg_w1},
                                                  {lg.conv1_b.f32(), sg_b1}, {dvd, sg_vd}};
      const int64_t ends[] = {sg_w0, sg_b0, sg_w1, sg_b1, sg_vd, sg_n};
      for (int64_t b = 0; b < B; b++) {
        const float* sg = seq_grads.data() + b * sg_n;
        for (size_t k = 0; k < 6; k++) {
          if (!parts[k].first) continue;
          for (int64_t i = 0; i < ends[k] - parts[k].second; i++)
            parts[k].first[i] += sg[parts[k].second + i];
        }
      }
    }
    // Without attention_bias the fused bias is a constant zero: its gradient slot is unused.
    linear_backward(dh.data(), false, lg.qkv.f32(), c.attention_bias ? lg.qkv_bias.f32() : nullptr,
                    dqkv.data(), la.h.data(), lw.qkv, T);
    if (acts.zero_pads) {  // padded rows of h were zeroed in the forward: constants
      for (int64_t t = 0; t < T; t++) {
        if (!acts.mask[t]) std::memset(dh.data() + t * H, 0, H * sizeof(float));
      }
    }
    rmsnorm_backward(dx.data(), lg.input_norm.f32(), dh.data(), la.x.data(), lw.input_norm.f32(),
                     la.rstd_in.data(), T, H, /*accumulate=*/true);
    if (block_done) block_done(li);  // lg is final: nothing below writes block li's gradients
  }
  grads.experts_stale = false;  // every layer's experts written

  // ---- Embedding and input scaling (spec §6.2): x0 = (e + β_in)⊙α_in ----
  embedding_backward(g.embed.f32(), g.input_scale.f32(), g.input_bias.f32(), dx.data(), acts.ids.data(), T,
                     w.embed, w.input_scale.f32(), w.input_bias.f32(), c.pad_token_id);
  return loss_sum / double(N);
}

}  // namespace zaya

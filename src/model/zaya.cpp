#include "model/zaya.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/profile.h"
#include "core/quant.h"
#include "core/threads.h"
#include "kernels/attention.h"
#include "kernels/cca.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/quant_gemm.h"

namespace zaya {

ZayaModel ZayaModel::load(const std::string& dir, const LoadOptions& opt) {
  ZayaModel m;
  // `dir` may also name one .safetensors file (config.json then comes from its directory) or the checkpoint's
  // config.json (the directory is meant).
  std::filesystem::path p(dir);
  ZAYA_CHECK(std::filesystem::exists(p), dir, ": no such checkpoint directory or file");
  std::string config_dir = std::filesystem::is_regular_file(p) ? p.parent_path().string() : dir;
  if (config_dir.empty()) config_dir = ".";
  const std::string weights = p.filename() == "config.json" ? config_dir : dir;
  m.cfg = load_config(config_dir + "/config.json");
  apply_semantics(m.cfg, opt.semantics, config_dir + "/config.json");
  ZAYA_CHECK(opt.compute == DType::F32 || opt.compute == DType::BF16, "compute dtype must be fp32 or bf16");
  m.w = load_weights(weights, m.cfg, opt.compute, opt.in_memory);
  ZAYA_CHECK(opt.kv_cache == DType::F32 || opt.kv_cache == DType::BF16,
             "the key/value cache stores F32 or BF16, not ", dtype_name(opt.kv_cache));
  m.kv_cache = opt.kv_cache;
  return m;
}

namespace {

template <typename T>
T* grow(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(n);
  return v.data();
}

// Recorder copy: dst = src[0, n).
template <typename T>
void keep(std::vector<T>& dst, const T* src, int64_t n) {
  dst.assign(src, src + n);
}

const float* opt_f32(const Tensor& t) {
  return t.data ? t.f32() : nullptr;
}

// out[M, N] (row stride ldc) = in[M, K] · W[N, K]ᵀ (+ bias[N]).
// `compute` is the model's GEMM dtype: a quantized W's many-row (prefill) path dequantizes tiles into it.
void linear_strided(float* out, int64_t ldc, const float* in, const Tensor& W, const float* bias, int64_t M,
                    DType compute, const char* stage = "linear") {
  ProfileScope prof(stage);
  const int64_t N = W.dim(0), K = W.dim(1);
  if (is_quantized(W.dtype) || (W.dtype == DType::BF16 && bf16_streams(M))) {
    quant_linear_forward(out, ldc, in, M, W, compute);
  } else {
    gemm(M, N, K, 1.0f, mat(in, K), mat(W, K, /*trans=*/true), 0.0f, out, ldc);
  }
  if (bias) {
    for (int64_t m = 0; m < M; m++) {
      for (int64_t n = 0; n < N; n++) out[m * ldc + n] += bias[n];
    }
  }
}

void embed_rows(float* x, const int32_t* ids, int64_t T, const ZayaWeights& w, int64_t H, int64_t V) {
  const float* scale = w.input_scale.f32();
  const float* bias = w.input_bias.f32();
  for (int64_t t = 0; t < T; t++) {
    ZAYA_CHECK(ids[t] >= 0 && ids[t] < V, "token id ", ids[t], " at position ", t,
               " is outside the vocabulary [0, ", V, ")");
    float* row = x + t * H;
    dequantize_row(row, w.embed, ids[t]);
    for (int64_t i = 0; i < H; i++) row[i] = (row[i] + bias[i]) * scale[i];
  }
}

// One sequence's rows in a block call: `n` consecutive tokens starting at row t0 of the call's T rows,
// continuing row `row` of `cache` at absolute positions pos[0, n).
struct BlockSegment {
  int64_t t0 = 0, n = 0;
  ZayaCache* cache = nullptr;
  int64_t row = 0;                                  // row of `cache` (a B-row cache holds B sequences)
  const int64_t* pos = nullptr;                     // [n] absolute positions of the new tokens
  bool has_state = false;                           // the cache row holds earlier tokens (false: fresh)
  const std::vector<uint8_t>* key_valid = nullptr;  // [positions] 0 = padded key
};

// The shape, mask, positions and cache state of one forward call, shared by its blocks. A call is a list of
// segments over T rows: B rows of S tokens of one B-row cache (zaya_forward), or sequences of different
// lengths each with its own cache (zaya_forward_seqs, continuous batching). All segments of one cache have
// the same length and come one after another (its keys advance once per call).
struct BlockCall {
  int64_t T = 0;
  int64_t max_n = 0;  // the longest segment
  std::vector<BlockSegment> segs;
  const int32_t* mask = nullptr;  // [T] or null
  bool zero_pads = false;         // zero the normed input rows of padded positions (spec §5.5)
  bool training = false;  // recording semantics: fp32 attention, every key kept (no sliding-window trim)
};

// The call of B rows of S tokens continuing the B-row `cache` at positions pos[S].
BlockCall rows_call(ZayaCache& cache, int64_t B, int64_t S, const int64_t* pos) {
  BlockCall call;
  call.T = B * S;
  call.max_n = S;
  call.segs.resize(B);
  for (int64_t b = 0; b < B; b++) {
    BlockSegment& sg = call.segs[b];
    sg.t0 = b * S;
    sg.n = S;
    sg.cache = &cache;
    sg.row = b;
    sg.pos = pos;
    sg.has_state = cache.has_state;
    sg.key_valid = &cache.key_valid[b];
  }
  return call;
}

// One decoder block li (spec §5.5-5.8) over the call's T tokens.
//   x[T, H]: the block input, overwritten in place with the block output.
//   rho_in[T, R]: the previous block's router state (unused, may be null, for block 0); the state this
//   block passes on is left in sc.rho[T, R].
//   Each segment's cache layer li: its conv and delayed-value states and its keys/values advance by the
//   segment's n tokens. Everything but the attention runs over all T rows at once.
//   la: receives every intermediate the backward needs (null: nothing is copied).
//   router_logits[T, E+1], choice_out[T]: taps (null: none).
// Both the forward and the recomputation (zaya_recompute_block) run exactly this function.
void block_forward(const ZayaModel& model, int64_t li, const BlockCall& call, float* x, const float* rho_in,
                   LayerActivations* la, float* router_logits, int32_t* choice_out, ForwardScratch& sc) {
  const ZayaConfig& c = model.cfg;
  const ZayaLayerWeights& lw = model.w.layers[li];
  const int64_t T = call.T, Smax = call.max_n, H = c.hidden_size;
  const int64_t A = c.q_dim(), Kv = c.kv_dim(), C = c.conv_channels(), P = c.conv_state_len();
  const int64_t Hq = c.num_attention_heads, Hk = c.num_key_value_heads, d = c.head_dim;
  const int64_t R = c.router_hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
  const CcaDims dm{Hq, Hk, d, c.cca_time0, c.cca_time1};
  const int32_t* mask = call.mask;
  const float eps = float(c.rms_norm_eps);
  const int64_t n_segs = int64_t(call.segs.size());

  float* h = grow(sc.h, T * H);
  float* u = grow(sc.u, T * H);
  float* a = grow(sc.a, T * H);
  const int64_t NQ = C + Kv;  // fused projection width
  float* qkv = grow(sc.qkv, T * NQ);
  float* raw = grow(sc.raw, T * C);
  float* vc = grow(sc.vc, T * Kv / 2);
  float* dv = grow(sc.dv, T * Kv / 2);
  // Segments are independent (each continues its own cache row). Many short ones (decode steps, the
  // continuations of shared-context scoring) run one per thread, every kernel inside single-threaded: one
  // 20-token segment's convolution, RoPE and attention are too small to split, so threading inside them
  // paid a parallel region per kernel per segment. Long segments keep their kernels' own threads. Each
  // thread has its own frames / mid / vals scratch. A training forward (the sequences of a micro-batch, all
  // of one length) runs every segment one per thread when there are at least as many as threads: within a
  // long segment only attention's heads and the convolution's groups were threaded, RoPE and the rest ran on
  // one core. So does a prefill of long segments of about one length (within 20%: a batch of prompts,
  // `zaya bench forward`), which would otherwise pay a parallel region and the serial parts (the
  // convolution's depthwise half and bias, the keys' transpose) per kernel and segment; segments of unequal
  // lengths keep their kernels' threads (one thread per segment would wait on the longest). Every kernel here
  // gives each output the same bits on one thread as on many (its threads split outputs, never a sum), so
  // neither the recording nor a served sequence's logits depend on this choice.
  constexpr int64_t kShortSegment = 64;  // tokens: below this a segment's kernels are not worth splitting
  const int max_threads = std::max(1, omp_get_max_threads());
  // Equal lengths spread evenly: a whole number of rounds over the threads, or enough rounds that the last
  // one's idle threads do not matter (3 prompts on 2 threads would take 2 rounds for 1.5 rounds of work).
  bool even_prefill = n_segs % max_threads == 0 || n_segs >= 4 * max_threads;
  for (int64_t si = 0; si < n_segs; si++) even_prefill &= call.segs[si].n * 5 >= Smax * 4;
  const bool all_seg_parallel = (la || call.training || even_prefill) && n_segs > 1 && n_segs >= max_threads;
  const bool seg_parallel = all_seg_parallel || (!la && !call.training && n_segs > 1);
  const int64_t seg_threads = seg_parallel ? max_threads : 1;
  const int64_t frames_n = (P + Smax) * C, mid_n = (Smax + c.cca_time1 - 1) * C, vals_n = Smax * Kv;
  float* frames_all = grow(sc.frames, seg_threads * frames_n);
  float* mid_all = grow(sc.mid, seg_threads * mid_n);
  float* conv = grow(sc.conv, T * C);
  float* vals_all = grow(sc.vals, seg_threads * vals_n);
  float* ocat = grow(sc.ocat, T * A);
  float* rho = grow(sc.rho, T * R);
  float* r1 = grow(sc.r1, T * R);
  float* r2 = grow(sc.r2, T * R);
  float* probs = grow(sc.probs, T * (E + 1));
  float* m = grow(sc.m, T * H);
  int32_t* choice = grow(sc.choice, T);
  float* weight = grow(sc.weight, T);
  float* p_skip = grow(sc.p_skip, T);

  if (la) {
    // Recording is for B rows of one length (zaya_forward on a fresh cache): segment i's depthwise-conv
    // intermediates sit at [i, S+t1-1, C].
    keep(la->x, x, T * H);
    la->rstd_in.resize(T);
    la->mid.resize(n_segs * (Smax + c.cca_time1 - 1) * C);
    la->conv.resize(T * C);
    la->qk.resize(T * C);
    la->vals.resize(T * Kv);
    la->lse.resize(T * Hq);
  }

  // ---- CCA attention (spec §5.5) ----
  rmsnorm_forward(h, la ? la->rstd_in.data() : nullptr, x, lw.input_norm.f32(), T, H, eps);
  if (call.zero_pads) {
    for (int64_t t = 0; t < T; t++) {
      if (!mask[t]) std::memset(h + t * H, 0, H * sizeof(float));
    }
  }
  if (la) keep(la->h, h, T * H);
  // One GEMM for q | k | v_cur | v_del, then split: raw[T, C] = [Q0 | K0], vc and dv [T, Kv/2].
  linear_strided(qkv, NQ, h, lw.qkv, lw.qkv_bias.f32(), T, model.w.compute, "linear_qkv");
  parallel_for_static(T, T * NQ > 65536, [&](int64_t t) {
    const float* row = qkv + t * NQ;
    std::memcpy(raw + t * C, row, C * sizeof(float));
    std::memcpy(vc + t * Kv / 2, row + C, Kv / 2 * sizeof(float));
    std::memcpy(dv + t * Kv / 2, row + C + Kv / 2, Kv / 2 * sizeof(float));
  });
  if (la) keep(la->raw, raw, T * C);

  // Every row of a cache appends at the same place (see BlockCall): its length before this call.
  std::vector<int64_t> old_lens(static_cast<size_t>(n_segs));
  for (int64_t si = 0; si < n_segs; si++) old_lens[size_t(si)] = call.segs[si].cache->layers[li].len;
  // Segment si's raw frames on thread slot tid (its scratch): the P cached frames (zeros on a fresh
  // sequence), then this call's S frames; the cached state advances to the last P.
  auto load_frames = [&](int64_t si, int64_t tid) {
    const BlockSegment& sg = call.segs[si];
    ZayaLayerCache& lc = sg.cache->layers[li];
    float* frames = frames_all + tid * frames_n;
    float* state = lc.conv.data() + sg.row * P * C;
    if (!sg.has_state) std::memset(state, 0, P * C * sizeof(float));
    std::memcpy(frames, state, P * C * sizeof(float));
    std::memcpy(frames + P * C, raw + sg.t0 * C, sg.n * C * sizeof(float));
    std::memcpy(state, frames + sg.n * C, P * C * sizeof(float));  // new state = last P frames
    return frames;
  };
  // Segment si on thread slot tid (its scratch): convolution (unless conv_done: batched below), Q/K,
  // values, key append, attention.
  auto run_segment = [&](int64_t si, int64_t tid, bool conv_done) {
    const BlockSegment& sg = call.segs[si];
    ZayaLayerCache& lc = sg.cache->layers[li];
    const int64_t S = sg.n, t0 = sg.t0, b = sg.row;
    const int64_t key_pos0 = lc.start;
    const int64_t old_len = old_lens[size_t(si)];
    float* vals = vals_all + tid * vals_n;
    float* cv = conv + t0 * C;
    if (!conv_done) {
      float* mid = mid_all + tid * mid_n;
      const float* frames = load_frames(si, tid);
      cca_conv_forward(cv, mid, frames, lw.conv0_w.f32(), lw.conv0_b.f32(), lw.conv1_w.f32(),
                       lw.conv1_b.f32(), S, dm, lw.conv1_pack.get());
      if (la) {
        const int64_t n_mid = S + c.cca_time1 - 1;
        std::memcpy(la->mid.data() + si * n_mid * C, mid, n_mid * C * sizeof(float));
        std::memcpy(la->conv.data() + t0 * C, cv, S * C * sizeof(float));
      }
    }
    cca_qk_forward(cv, raw + t0 * C, lw.temp.f32(), sg.pos, S, dm, c.rotary_dim(li), c.rope(li).theta);
    if (la) std::memcpy(la->qk.data() + t0 * C, cv, S * C * sizeof(float));

    // Values: current half, and the delayed half shifted by one token (seeded by the cached Dv,
    // or by v_proj_delayed(0) = its bias on a fresh sequence).
    float* dv_state = lc.dv.data() + b * Kv / 2;
    for (int64_t s = 0; s < S; s++) {
      float* vrow = vals + s * Kv;
      std::memcpy(vrow, vc + (t0 + s) * Kv / 2, Kv / 2 * sizeof(float));
      const float* prev;
      if (s > 0)
        prev = dv + (t0 + s - 1) * Kv / 2;
      else if (sg.has_state)
        prev = dv_state;
      else
        prev = nullptr;
      if (prev)
        std::memcpy(vrow + Kv / 2, prev, Kv / 2 * sizeof(float));
      else if (lw.v_del_bias.data)
        std::memcpy(vrow + Kv / 2, lw.v_del_bias.f32(), Kv / 2 * sizeof(float));
      else
        std::memset(vrow + Kv / 2, 0, Kv / 2 * sizeof(float));
    }
    std::memcpy(dv_state, dv + (t0 + S - 1) * Kv / 2, Kv / 2 * sizeof(float));
    if (la) std::memcpy(la->vals.data() + t0 * Kv, vals, S * Kv * sizeof(float));

    // Append keys and values: [Hk, cap, d] per row (bf16 caches round each once, to nearest even).
    const bool kv16 = sg.cache->kv_dtype == DType::BF16;
    ZAYA_CHECK(!kv16 || !la, "a recording (training) forward needs an fp32 key/value cache");
    for (int64_t j = 0; j < Hk; j++) {
      const int64_t at = ((b * Hk + j) * lc.cap + old_len) * d;
      for (int64_t s = 0; s < S; s++) {
        const float* ks = cv + s * C + A + j * d;
        const float* vs = vals + s * Kv + j * d;
        if (kv16) {
          convert_f32_to_bf16(lc.k16.data() + at + s * d, ks, d);
          convert_f32_to_bf16(lc.v16.data() + at + s * d, vs, d);
        } else {
          std::memcpy(lc.k.data() + at + s * d, ks, d * sizeof(float));
          std::memcpy(lc.v.data() + at + s * d, vs, d * sizeof(float));
        }
      }
    }
    AttentionArgs args;
    args.S = S;
    args.Hq = Hq;
    args.Hk = Hk;
    args.d = d;
    args.n_keys = old_len + S;
    args.key_pos0 = key_pos0;
    args.key_stride = lc.cap * d;
    args.window = c.layer_types[li] == LayerType::HybridSliding ? c.sliding_window : 0;
    args.gemm_dtype = call.training ? DType::F32 : model.w.compute;  // training keeps fp32 attention
    const uint8_t* kvalid = sg.key_valid->data() + key_pos0;
    if (kv16)
      attention_forward_kv16(ocat + t0 * A, nullptr, cv, C, lc.k16.data() + b * Hk * lc.cap * d,
                             lc.v16.data() + b * Hk * lc.cap * d, sg.pos, kvalid, args);
    else
      attention_forward(ocat + t0 * A, la ? la->lse.data() + t0 * Hq : nullptr, cv, C,
                        lc.k.data() + b * Hk * lc.cap * d, lc.v.data() + b * Hk * lc.cap * d, sg.pos, kvalid,
                        args);
  };
  std::vector<int64_t> short_segs, long_segs;
  for (int64_t si = 0; si < n_segs; si++)
    (all_seg_parallel || (seg_parallel && call.segs[si].n < kShortSegment) ? short_segs : long_segs)
        .push_back(si);
  // The short segments' grouped convolutions as one call: a decode step of B sequences reads the conv
  // weights (1.3 MB a layer for ZAYA1-8B, evicted from L2 by the expert stream between layers) once, not
  // B times. Each output keeps the bits it has in its own segment's cca_conv_forward (the same form per
  // position below 16 positions: the inference pack's fma chain, or dot_f32 per output without a pack; the
  // small GEMM in batch-invariant mode).
  std::vector<int64_t> batched, batch_row0;  // segments, and their first row in the batch
  int64_t batch_T = 0;
  for (int64_t si : short_segs) {
    if (la) break;  // a recording keeps each segment's intermediates: run_segment's own convolution
    if (call.segs[si].n >= kShortSegment) continue;  // long ones: their taps would be big, their calls few
    if (!gemm_batch_invariant() && !cca_conv_dot_form(call.segs[si].n)) continue;
    batched.push_back(si);
    batch_row0.push_back(batch_T);
    batch_T += call.segs[si].n;
  }
  if (batched.size() < 2) batched.clear();
  std::vector<uint8_t> conv_done(size_t(n_segs), 0);
  if (!batched.empty()) {
    ZAYA_PROFILE_SCOPE("cca_conv");
    const int64_t groups = Hq + Hk, K = d * c.cca_time1;
    float* taps = grow(sc.taps, batch_T * groups * K);  // [batch_T, groups, d·t1]
    float* conv_batch = grow(sc.conv_batch, batch_T * C);
    parallel_for_dynamic(batched.size(), int(seg_threads), [&](size_t i, int slot) {
      const BlockSegment& sg = call.segs[batched[i]];
      float* mid = mid_all + slot * mid_n;
      cca_depthwise_forward(mid, load_frames(batched[i], slot), lw.conv0_w.f32(), lw.conv0_b.f32(), sg.n, dm);
      cca_conv_taps(taps + batch_row0[i] * groups * K, mid, sg.n, dm);
    });
    cca_grouped_taps_forward(conv_batch, taps, lw.conv1_w.f32(), lw.conv1_b.f32(), batch_T,
                             !gemm_batch_invariant(), dm, lw.conv1_pack.get());
    for (size_t i = 0; i < batched.size(); i++) {
      const BlockSegment& sg = call.segs[batched[i]];
      std::memcpy(conv + sg.t0 * C, conv_batch + batch_row0[i] * C, sg.n * C * sizeof(float));
      conv_done[size_t(batched[i])] = 1;
    }
  }
  parallel_for_dynamic(short_segs.size(), int(seg_threads), [&](size_t i, int slot) {
    run_segment(short_segs[i], slot, conv_done[size_t(short_segs[i])] != 0);
  });
  for (int64_t si : long_segs) run_segment(si, 0, false);
  // Each cache's keys advance once, after all its rows attended. Sliding layers keep only the last W-1 keys
  // (spec §7.4); a recording (training) forward keeps all.
  for (int64_t si = 0; si < n_segs; si++) {
    const BlockSegment& sg = call.segs[si];
    if (sg.row + 1 < sg.cache->B) continue;
    ZayaLayerCache& lc = sg.cache->layers[li];
    lc.len = old_lens[size_t(si)] + sg.n;
    if (!call.training && c.layer_types[li] == LayerType::HybridSliding && lc.len > c.sliding_window - 1) {
      int64_t keep = c.sliding_window - 1, drop = lc.len - keep;
      auto trim = [&](auto* k, auto* v) {  // fp32 or bf16 storage: [B·Hk][cap][d]
        for (int64_t bh = 0; bh < sg.cache->B * Hk; bh++) {
          auto* kb = k + bh * lc.cap * d;
          auto* vb = v + bh * lc.cap * d;
          std::memmove(kb, kb + drop * d, keep * d * sizeof(*kb));
          std::memmove(vb, vb + drop * d, keep * d * sizeof(*vb));
        }
      };
      if (sg.cache->kv_dtype == DType::BF16)
        trim(lc.k16.data(), lc.v16.data());
      else
        trim(lc.k.data(), lc.v.data());
      lc.start += drop;
      lc.len = keep;
    }
  }
  linear_strided(a, H, ocat, lw.o_proj, opt_f32(lw.o_bias), T, model.w.compute, "linear_o");
  const ResidualScaleWeights& ra = lw.post_attn_scale;
  residual_scale_forward(x, a, x, ra.hidden_bias.f32(), ra.hidden_scale.f32(), ra.residual_bias.f32(),
                         ra.residual_scale.f32(), T, H);  // x now holds y
  if (la) {
    keep(la->ocat, ocat, T * A);
    keep(la->a, a, T * H);
    keep(la->y, x, T * H);
    la->rstd_post.resize(T);
    la->rstd_router.resize(T);
  }

  // ---- Router with EDA (spec §5.6) ----
  rmsnorm_forward(u, la ? la->rstd_post.data() : nullptr, x, lw.post_norm.f32(), T, H, eps);
  linear_strided(rho, R, u, lw.router_down, lw.router_down_bias.f32(), T, model.w.compute, "linear_router");
  if (li > 0) {
    const float* gamma = lw.router_eda_scale.f32();
    for (int64_t t = 0; t < T; t++) {
      for (int64_t r = 0; r < R; r++) rho[t * R + r] += gamma[r] * rho_in[t * R + r];
    }
  }
  rmsnorm_forward(r1, la ? la->rstd_router.data() : nullptr, rho, lw.router_norm.f32(), T, R,
                  float(c.router_eps()));
  if (la) {
    keep(la->u, u, T * H);
    keep(la->rho, rho, T * R);
    keep(la->rnorm, r1, T * R);
  }
  linear_strided(r2, R, r1, lw.router_fc1, lw.router_fc1_bias.f32(), T, model.w.compute, "linear_router");
  if (la) keep(la->pre1, r2, T * R);
  gelu_forward(r2, T * R);
  linear_strided(r1, R, r2, lw.router_fc2, lw.router_fc2_bias.f32(), T, model.w.compute, "linear_router");
  if (la) {
    keep(la->z1, r2, T * R);
    keep(la->pre2, r1, T * R);
  }
  gelu_forward(r1, T * R);
  if (la) keep(la->z2, r1, T * R);
  linear_strided(probs, E + 1, r1, lw.router_out, nullptr, T, model.w.compute, "linear_router");
  if (router_logits) std::memcpy(router_logits, probs, T * (E + 1) * sizeof(float));
  softmax_forward(probs, T, E + 1);
  route_top1(choice, weight, probs, lw.balancing_biases.f32(), T, E);
  for (int64_t t = 0; t < T; t++) p_skip[t] = probs[t * (E + 1) + E];
  if (choice_out) std::memcpy(choice_out, choice, T * sizeof(int32_t));

  // ---- Experts (spec §5.8) and the post-MLP residual merge ----
  ExpertPlan plan = plan_experts(choice, T, E);
  moe_experts_forward(m, u, choice, weight, p_skip, plan, lw.experts_gate_up, lw.experts_down, T, H, I, E,
                      c.skip_passthrough, sc.moe, model.w.compute);
  if (la) {
    const int64_t n = plan.offsets[E];
    keep(la->probs, probs, T * (E + 1));
    keep(la->choice, choice, T);
    keep(la->weight, weight, T);
    keep(la->p_skip, p_skip, T);
    la->plan = plan;
    keep(la->gu, sc.moe.gu.data(), n * 2 * I);
    keep(la->act, sc.moe.act.data(), n * I);
    keep(la->ye, sc.moe.y.data(), n * H);
    keep(la->m, m, T * H);
  }
  const ResidualScaleWeights& rm = lw.post_mlp_scale;
  residual_scale_forward(x, m, x, rm.hidden_bias.f32(), rm.hidden_scale.f32(), rm.residual_bias.f32(),
                         rm.residual_scale.f32(), T, H);
}

template <typename T>
size_t vec_bytes(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}

}  // namespace

size_t LayerActivations::bytes() const {
  size_t n = vec_bytes(choice) + vec_bytes(plan.perm) + vec_bytes(plan.offsets);
  for (const std::vector<float>* v :
       {&x,  &rstd_in, &h,         &raw,    &mid, &conv,        &qk,    &vals, &lse, &ocat,
        &a,  &y,       &rstd_post, &u,      &rho, &rstd_router, &rnorm, &pre1, &z1,  &pre2,
        &z2, &probs,   &weight,    &p_skip, &gu,  &act,         &ye,    &m})
    n += vec_bytes(*v);
  return n;
}

size_t Activations::bytes() const {
  size_t n = vec_bytes(ids) + vec_bytes(mask) + vec_bytes(x_final) + vec_bytes(rstd_final) + vec_bytes(z);
  for (const LayerActivations& l : layers) n += l.bytes();
  return n;
}

// Forward calls of at most this many tokens (decode steps; the stream kernels' row limit) run their threads'
// loops on the leaf pool (core/thread_pool.h): ~280 regions a batch-1 ZAYA1-8B step, each handed over in
// ~0.7 us instead of an OpenMP region's ~3 us. Longer calls keep OpenMP, which their GEMMs use.
constexpr int64_t kLeafPoolMaxTokens = kQuantStreamMaxRows;

void zaya_forward(const ZayaModel& model, ZayaCache& cache, const int32_t* ids, const int32_t* mask,
                  int64_t B, int64_t S, const ForwardOptions& opt, ForwardResult& out, ForwardScratch& sc) {
  const ZayaConfig& c = model.cfg;
  const ZayaWeights& w = model.w;
  ZAYA_CHECK(cache.B == B, "cache was made for batch ", cache.B, " but the call has batch ", B);
  ZAYA_CHECK(S >= 1, "a forward call needs at least one token per row");
  const int64_t T = B * S, H = c.hidden_size, L = c.num_hidden_layers, V = c.vocab_size;
  const int64_t R = c.router_hidden_size, E = c.num_experts;
  const int64_t seen = cache.seen;
  Activations* rec = opt.record;
  const LeafPoolScope leaf_pool(T <= kLeafPoolMaxTokens && !rec);
  const bool recompute = rec && opt.recompute;
  if (rec) {
    ZAYA_CHECK(!cache.has_state,
               "recording activations for the backward needs a fresh cache (whole sequences)");
    rec->B = B;
    rec->S = S;
    rec->ids.assign(ids, ids + B * S);
    if (mask)
      rec->mask.assign(mask, mask + B * S);
    else
      rec->mask.clear();
    rec->recompute = recompute;
    rec->block_bytes = 0;
    rec->layers.resize(L);
  }

  // Padding: multi-token calls zero the normed input rows of padded positions (spec §5.5).
  bool zero_pads = false;
  if (mask && S > 1) {
    for (int64_t t = 0; t < T; t++) zero_pads |= mask[t] == 0;
  }
  for (int64_t b = 0; b < B; b++) {
    for (int64_t s = 0; s < S; s++) cache.key_valid[b].push_back(mask ? uint8_t(mask[b * S + s] != 0) : 1);
  }
  int64_t* pos = grow(sc.positions, S);
  for (int64_t s = 0; s < S; s++) pos[s] = seen + s;

  float* x = grow(sc.x, T * H);
  float* rho_prev = grow(sc.rho_prev, T * R);

  if (opt.tap_hidden) out.hidden.assign((L + 2) * T * H, 0.f);
  if (opt.tap_router) {
    out.router_logits.assign(L * T * (E + 1), 0.f);
    out.choice.assign(L * T, 0);
  }

  embed_rows(x, ids, T, w, H, V);
  if (opt.tap_hidden) std::memcpy(out.hidden.data(), x, T * H * sizeof(float));
  if (!cache.has_state) cache.set_kv_dtype(rec ? DType::F32 : model.kv_cache);  // a fresh cache: the model's
  cache.reserve(c, S);

  if (rec) rec->zero_pads = zero_pads;
  BlockCall call = rows_call(cache, B, S, pos);
  call.mask = mask;
  call.zero_pads = zero_pads;
  call.training = rec != nullptr;

  // Recomputation: each block records into this one reused block (the same path the backward's re-run
  // takes); only x, rho and choice are kept from it.
  LayerActivations block;
  for (int64_t li = 0; li < L; li++) {
    LayerActivations* la = rec ? (recompute ? &block : &rec->layers[li]) : nullptr;
    block_forward(model, li, call, x, rho_prev, la,
                  opt.tap_router ? out.router_logits.data() + li * T * (E + 1) : nullptr,
                  opt.tap_router ? out.choice.data() + li * T : nullptr, sc);
    std::memcpy(rho_prev, sc.rho.data(), T * R * sizeof(float));
    if (recompute) {
      LayerActivations& kept = rec->layers[li];
      kept = LayerActivations{};
      kept.x.swap(block.x);
      kept.rho.swap(block.rho);
      kept.choice.swap(block.choice);
      rec->block_bytes = std::max(rec->block_bytes, block.bytes() + kept.bytes());
    }
    if (opt.tap_hidden) std::memcpy(out.hidden.data() + (li + 1) * T * H, x, T * H * sizeof(float));
  }
  cache.seen += S;
  cache.has_state = true;
  // ---- Final norm and LM head (spec §5.9) ----
  float* z = grow(sc.z, T * H);
  if (rec) {
    keep(rec->x_final, x, T * H);
    rec->rstd_final.resize(T);
  }
  rmsnorm_forward(z, rec ? rec->rstd_final.data() : nullptr, x, w.final_norm.f32(), T, H,
                  float(c.rms_norm_eps));
  if (rec) keep(rec->z, z, T * H);
  if (opt.tap_hidden) std::memcpy(out.hidden.data() + (L + 1) * T * H, z, T * H * sizeof(float));
  const float* head_bias = opt_f32(w.lm_head_bias);
  if (opt.all_logits) {
    out.logits.resize(T * V);
    linear_strided(out.logits.data(), V, z, w.lm_head, head_bias, T, w.compute, "lm_head");
  } else {
    // Only the last position of each row: gather those rows first.
    float* last = grow(sc.head_in, B * H);
    for (int64_t b = 0; b < B; b++) std::memcpy(last + b * H, z + (b * S + S - 1) * H, H * sizeof(float));
    out.logits.resize(B * V);
    linear_strided(out.logits.data(), V, last, w.lm_head, head_bias, B, w.compute, "lm_head");
  }
}

void zaya_forward_seqs(const ZayaModel& model, const std::vector<SeqStep>& seqs, std::vector<float>& logits,
                       std::vector<int64_t>& logit_row, ForwardScratch& sc) {
  const ZayaConfig& c = model.cfg;
  const ZayaWeights& w = model.w;
  const int64_t H = c.hidden_size, L = c.num_hidden_layers, V = c.vocab_size, R = c.router_hidden_size;
  const int64_t N = int64_t(seqs.size());
  ZAYA_CHECK(N >= 1, "zaya_forward_seqs needs at least one sequence");
  // Validate everything before any cache changes.
  int64_t T = 0, n_logits = 0, max_n = 0;
  for (int64_t i = 0; i < N; i++) {
    const SeqStep& e = seqs[i];
    ZAYA_CHECK(e.cache && e.cache->B == 1, "sequence ", i, " of the batch needs a one-row cache");
    ZAYA_CHECK(e.ids && e.n >= 1, "sequence ", i, " of the batch has no new tokens");
    ZAYA_CHECK(e.logits >= 0 && e.logits <= e.n, "sequence ", i, " asks for the logits of ", e.logits,
               " positions but has ", e.n, " new tokens");
    for (int64_t j = 0; j < i; j++)
      ZAYA_CHECK(seqs[j].cache != e.cache, "sequences ", j, " and ", i, " of the batch share one cache");
    for (int64_t s = 0; s < e.n; s++)
      ZAYA_CHECK(e.ids[s] >= 0 && e.ids[s] < V, "token id ", e.ids[s], " at position ", s, " of sequence ", i,
                 " is outside the vocabulary [0, ", V, ")");
    T += e.n;
    n_logits += e.logits;
    max_n = std::max(max_n, e.n);
  }
  const LeafPoolScope leaf_pool(T <= kLeafPoolMaxTokens);

  // Rows: sequence after sequence. Positions continue each cache.
  int32_t* ids = grow(sc.ids, T);
  int64_t* pos = grow(sc.positions, T);
  BlockCall call;
  call.T = T;
  call.max_n = max_n;
  call.segs.resize(N);
  for (int64_t i = 0, t0 = 0; i < N; i++) {
    const SeqStep& e = seqs[i];
    ZayaCache& cache = *e.cache;
    std::copy(e.ids, e.ids + e.n, ids + t0);
    for (int64_t s = 0; s < e.n; s++) pos[t0 + s] = cache.seen + s;
    cache.key_valid[0].insert(cache.key_valid[0].end(), e.n, uint8_t(1));
    if (!cache.has_state) cache.set_kv_dtype(model.kv_cache);  // a fresh cache takes the model's
    cache.reserve(c, e.n);
    BlockSegment& sg = call.segs[i];
    sg.t0 = t0;
    sg.n = e.n;
    sg.cache = &cache;
    sg.row = 0;
    sg.has_state = cache.has_state;
    t0 += e.n;
  }
  // Pointers into vectors that the loop above may have grown.
  for (int64_t i = 0; i < N; i++) {
    call.segs[i].pos = pos + call.segs[i].t0;
    call.segs[i].key_valid = &seqs[i].cache->key_valid[0];
  }

  float* x = grow(sc.x, T * H);
  float* rho_prev = grow(sc.rho_prev, T * R);
  embed_rows(x, ids, T, w, H, V);
  for (int64_t li = 0; li < L; li++) {
    block_forward(model, li, call, x, rho_prev, nullptr, nullptr, nullptr, sc);
    std::memcpy(rho_prev, sc.rho.data(), T * R * sizeof(float));
  }
  for (const SeqStep& e : seqs) {
    e.cache->seen += e.n;
    e.cache->has_state = true;
  }

  // ---- Final norm and LM head (spec §5.9) over the wanted rows only ----
  logit_row.assign(N, 0);
  float* z = grow(sc.z, std::max<int64_t>(n_logits, 1) * H);
  float* rows = grow(sc.head_in, std::max<int64_t>(n_logits, 1) * H);
  for (int64_t i = 0, r = 0, t0 = 0; i < N; i++) {
    logit_row[i] = r;
    const SeqStep& e = seqs[i];
    for (int64_t s = e.n - e.logits; s < e.n; s++, r++)
      std::memcpy(rows + r * H, x + (t0 + s) * H, H * sizeof(float));
    t0 += e.n;
  }
  logits.resize(n_logits * V);
  if (n_logits == 0) return;
  rmsnorm_forward(z, nullptr, rows, w.final_norm.f32(), n_logits, H, float(c.rms_norm_eps));
  linear_strided(logits.data(), V, z, w.lm_head, opt_f32(w.lm_head_bias), n_logits, w.compute, "lm_head");
}

void zaya_recompute_block(const ZayaModel& model, const Activations& acts, int64_t li, LayerActivations& out,
                          ForwardScratch& sc) {
  ZAYA_PROFILE_SCOPE("recompute_block");
  const ZayaConfig& c = model.cfg;
  const int64_t B = acts.B, S = acts.S, T = B * S, H = c.hidden_size, L = c.num_hidden_layers;
  const int64_t R = c.router_hidden_size, Kv = c.kv_dim(), C = c.conv_channels(), P = c.conv_state_len();
  ZAYA_CHECK(acts.recompute && int64_t(acts.layers.size()) == L && li >= 0 && li < L && T > 0,
             "zaya_recompute_block needs the activations of a recording forward with recompute on, and a "
             "block index below ",
             L, " (got ", li, ")");
  const LayerActivations& kept = acts.layers[li];
  ZAYA_CHECK(int64_t(kept.x.size()) == T * H && int64_t(kept.choice.size()) == T &&
                 (li == 0 || int64_t(acts.layers[li - 1].rho.size()) == T * R),
             "zaya_recompute_block: block ", li, " kept no input of this model's shape");

  // The recording forward's view of a fresh sequence: positions 0..S-1, key validity from the mask, a
  // fresh cache layer (zero conv state; key capacity as ZayaCache::reserve gives a fresh cache — only the
  // stride of the keys depends on it, never a value).
  int64_t* pos = grow(sc.positions, S);
  for (int64_t s = 0; s < S; s++) pos[s] = s;
  ZayaCache cache;  // only layer li is filled
  cache.B = B;
  cache.layers.resize(L);
  cache.key_valid.resize(B);
  for (int64_t b = 0; b < B; b++) {
    cache.key_valid[b].assign(S, 1);
    if (!acts.mask.empty())
      for (int64_t s = 0; s < S; s++) cache.key_valid[b][s] = acts.mask[b * S + s] != 0;
  }
  ZayaLayerCache& lc = cache.layers[li];
  lc.conv.assign(B * P * C, 0.f);
  lc.dv.assign(B * Kv / 2, 0.f);
  lc.cap = std::max<int64_t>(S, 64);
  lc.k.resize(B * c.num_key_value_heads * lc.cap * c.head_dim);
  lc.v.resize(lc.k.size());

  BlockCall call = rows_call(cache, B, S, pos);
  call.mask = acts.mask.empty() ? nullptr : acts.mask.data();
  call.zero_pads = acts.zero_pads;
  call.training = true;
  float* x = grow(sc.x, T * H);
  std::memcpy(x, kept.x.data(), T * H * sizeof(float));
  block_forward(model, li, call, x, li > 0 ? acts.layers[li - 1].rho.data() : nullptr, &out, nullptr, nullptr,
                sc);
  ZAYA_ASSERT(out.choice == kept.choice, "a recomputed block routes exactly as the original forward");
}

}  // namespace zaya

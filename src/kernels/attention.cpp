#include "kernels/attention.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 reduce/cast intrinsics start from _mm512_undefined_*: false "uninitialized" warnings.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/threads.h"
#include "kernels/gemm.h"
#include "kernels/gemm_small.h"
#include "kernels/in_register.h"
#include "kernels/vec_exp.h"
#include "kernels/vec_math.h"

namespace zaya {

namespace {

// Visible key range [first, last] of a query at absolute position qp (causal, optional window).
inline void visible_range(int64_t qp, const AttentionArgs& a, int64_t* first, int64_t* last) {
  *last = std::min(qp - a.key_pos0, a.n_keys - 1);
  *first = a.window > 0 ? std::max<int64_t>(0, qp - a.window + 1 - a.key_pos0) : 0;
}

// Masked softmax in place over one score row p[0, n) restricted to [first, last]; entries outside and
// padded keys become 0. Returns the log-sum-exp (-inf when nothing is visible; the row is then all 0).
// Vectorised (vec_math.h: exp within 2 ulp, the sum in double): the scalar std::exp loop this replaced was
// most of a mid.json forward's attention time (~40M exps a step). A row's values depend only on its own
// visible scores: the lanes run over [first, last] from `first`, whatever n or the block around it.
float masked_softmax_row(float* p, int64_t n, int64_t first, int64_t last, const uint8_t* key_valid) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  first = std::max<int64_t>(first, 0);
  last = std::min<int64_t>(last, n - 1);
  if (last < first) {
    std::fill(p, p + n, 0.f);
    return kNegInf;
  }
  std::fill(p, p + first, 0.f);
  std::fill(p + last + 1, p + n, 0.f);
  if (key_valid)
    for (int64_t j = first; j <= last; j++)
      if (!key_valid[j]) p[j] = kNegInf;  // exp(-inf - max) is an exact 0
  const int64_t cnt = last - first + 1;
  const float mx = row_max(p + first, cnt);
  if (mx == kNegInf) {
    std::fill(p + first, p + last + 1, 0.f);
    return mx;
  }
  const double sum = exp_shift_sum(p + first, p + first, cnt, mx);
  scale_row(p + first, cnt, float(1.0 / sum));
  return mx + float(std::log(sum));
}

}  // namespace

namespace {

// Few queries (decode, short chunks): dot products per query, no GEMM (whose primitives are per shape and
// the key count changes every step).
// For each of nh heads g (nh query heads sharing one KV head): o[g·d, (g+1)·d) = Σ_{j in [first, last],
// p[g·ldp + j] != 0} p[g·ldp + j] · v[j·d, (j+1)·d), summed over j in order for each element (the same fma
// chain whatever the vector width, head count or key block: every path gives the same bits). Up to 4 heads
// at a time take each value row from one load, 64 elements a pass (16 accumulators in registers across the
// keys; a store per key and vector cost 30% before), so the values are read once, not once per head:
// ZAYA1-8B's shape (4 query heads per KV head), one decode query, 2 threads, Zen 5 (bench/attention_bench
// BM_AttentionDecode, two alternating runs): 249-279 -> 200-221 us at 4096 keys, 4274-4649 -> 3208-3659 at
// 32768. The passes run over blocks of keys (kValueBlockBytes), the accumulators parked in `o` between blocks
// (exact), so a pass after the first reads its block from L1, not the whole cache again; the first pass
// prefetches each row kValuePrefetchRows ahead. With the key prefetch in dot_f32_grid, from memory (cold:
// the iterations go round 128 MB of caches), in-process randomly interleaved, medians of 5: 54 -> 41 us at
// 512 keys, 407 -> 278 us at 4096.
// accumulate: the chains continue from what `o` holds (a bf16 cache's next block of keys, below) instead of
// starting from zero: the same fmas in the same order as one call over all the keys.
constexpr int64_t kValueBlockBytes = 16 << 10;  // one block of value rows, well inside a 32 kB L1
constexpr int64_t kValuePrefetchRows = 16;
inline void weighted_rows_f32(float* o, const float* p, int64_t ldp, int64_t nh, const float* v,
                              int64_t first, int64_t last, int64_t d, bool accumulate = false) {
  for (int64_t g0 = 0; g0 < nh; g0 += 4) {
    const int64_t ng = std::min<int64_t>(4, nh - g0);
    const float* pg = p + g0 * ldp;
    float* og = o + g0 * d;
    if (last < first) {  // no visible key: the key-block loop below would not write the output at all
      if (!accumulate) std::fill(og, og + ng * d, 0.f);
      continue;
    }
    int64_t i0 = 0;
#if defined(__AVX512F__)
    constexpr int64_t kW = 16;  // floats a vector
    constexpr int kU = 4;       // vectors a head and pass: 4 heads x 4 accumulators of the 32 registers
    using vec = __m512;
    auto zero = [] { return _mm512_setzero_ps(); };
    auto load = [](const float* x) { return _mm512_loadu_ps(x); };
    auto store = [](float* x, vec a) { _mm512_storeu_ps(x, a); };
    auto fma = [](float s, vec x, vec acc) { return _mm512_fmadd_ps(_mm512_set1_ps(s), x, acc); };
    // The weight broadcast, and acc + s·x only in the lanes of a nonzero weight (`s != 0`, NaN included, as
    // the scalar tail's test): a masked fma leaves acc's bits as they were where the weight is 0.
    using weight_mask = __mmask16;
    auto broadcast = [](const float* s) { return _mm512_set1_ps(*s); };
    auto nonzero = [](vec s) { return _mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_NEQ_UQ); };
    auto fma_where = [](vec s, vec x, vec acc, weight_mask m) { return _mm512_mask3_fmadd_ps(s, x, acc, m); };
#elif defined(__AVX2__) && defined(__FMA__)
    constexpr int64_t kW = 8;  // CPUs without AVX-512: the same per-element chains on 8-float vectors,
    constexpr int kU = 2;      // 4 heads x 2 accumulators, within AVX2's 16 registers
    using vec = __m256;
    auto zero = [] { return _mm256_setzero_ps(); };
    auto load = [](const float* x) { return _mm256_loadu_ps(x); };
    auto store = [](float* x, vec a) { _mm256_storeu_ps(x, a); };
    auto fma = [](float s, vec x, vec acc) { return _mm256_fmadd_ps(_mm256_set1_ps(s), x, acc); };
    using weight_mask = __m256;
    auto broadcast = [](const float* s) { return _mm256_broadcast_ss(s); };
    auto nonzero = [](vec s) { return _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_NEQ_UQ); };
    auto fma_where = [](vec s, vec x, vec acc, weight_mask m) {
      return _mm256_blendv_ps(acc, _mm256_fmadd_ps(s, x, acc), m);
    };
#endif
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
    const int64_t wide = d / (kU * kW) * (kU * kW);  // elements the 4-vector passes cover
    const int64_t jb = std::max<int64_t>(8, kValueBlockBytes / (d * int64_t(sizeof(float))));  // keys a block
    for (int64_t j0 = first; j0 <= last && wide > 0; j0 += jb) {
      const int64_t j1 = std::min(last + 1, j0 + jb);
      // One pass over the block for NG heads: a compile-time count keeps the NG x kU accumulators in
      // registers (with the run-time count GCC kept them on the stack once the loop had no branches).
      auto pass = [&](auto heads) {
        constexpr int NG = decltype(heads)::value;
        for (i0 = 0; i0 < wide; i0 += kU * kW) {
          vec acc[NG][kU];
          for (int g = 0; g < NG; g++)
            for (int u = 0; u < kU; u++)
              acc[g][u] = j0 == first && !accumulate ? zero() : load(og + g * d + i0 + u * kW);
          for (int64_t j = j0; j < j1; j++) {
            const float* vv = v + j * d + i0;
            if (i0 == 0)  // the whole row kValuePrefetchRows on: the later passes read it from L1
              for (int64_t l = 0; l < d; l += 16)
                _mm_prefetch(reinterpret_cast<const char*>(v + (j + kValuePrefetchRows) * d + l),
                             _MM_HINT_T0);
            vec x[kU];  // 4 loads a key, not one per fma (in_register.h)
            for (int u = 0; u < kU; u++) x[u] = in_register(load(vv + u * kW));
            // Without a branch: a branch per head and key that skipped a zero weight (taken to out-of-line
            // fmas and back) had cost ~10% of the hot call.
            for (int g = 0; g < NG; g++) {
              const vec pj = broadcast(pg + g * ldp + j);
              const weight_mask m = nonzero(pj);
              for (int u = 0; u < kU; u++) acc[g][u] = fma_where(pj, x[u], acc[g][u], m);
            }
          }
          for (int g = 0; g < NG; g++)
            for (int u = 0; u < kU; u++) store(og + g * d + i0 + u * kW, acc[g][u]);
        }
      };
      switch (ng) {
        case 1:
          pass(std::integral_constant<int, 1>{});
          break;
        case 2:
          pass(std::integral_constant<int, 2>{});
          break;
        case 3:
          pass(std::integral_constant<int, 3>{});
          break;
        default:
          pass(std::integral_constant<int, 4>{});
          break;
      }
    }
    i0 = wide;
    for (; i0 + kW <= d; i0 += kW) {  // head_dim 16 or 48, say
      vec acc[4] = {zero(), zero(), zero(), zero()};
      if (accumulate)
        for (int g = 0; g < ng; g++) acc[g] = load(og + g * d + i0);
      for (int64_t j = first; j <= last; j++) {
        const vec x = load(v + j * d + i0);
        for (int g = 0; g < ng; g++)
          if (pg[g * ldp + j] != 0.f) acc[g] = fma(pg[g * ldp + j], x, acc[g]);
      }
      for (int g = 0; g < ng; g++) store(og + g * d + i0, acc[g]);
    }
#endif
    for (int64_t g = 0; g < ng; g++)
      for (int64_t i = i0; i < d; i++) {
        float acc = accumulate ? og[g * d + i] : 0.f;
        for (int64_t j = first; j <= last; j++)
          if (pg[g * ldp + j] != 0.f) acc = std::fma(pg[g * ldp + j], v[j * d + i], acc);
        og[g * d + i] = acc;
      }
  }
}

// Keys or values [j0, j1) of one head of a bf16 cache, widened into scratch ([j1 - j0, d] fp32, exact).
inline void widen_rows(float* dst, const uint16_t* src, int64_t j0, int64_t j1, int64_t d) {
  convert_bf16_to_f32(dst, src + j0 * d, (j1 - j0) * d);
}

// Keys a bf16 cache's per-row path widens at a time: 16 kB of fp32 at head_dim 128, in L1 while the score
// grid or the value sum reads it (and 16+ keys, so the grid keeps its 4 x 4 blocks).
constexpr int64_t kWidenBytes = 16 << 10;

// KV: float (an fp32 cache, read in place) or uint16_t (a bf16 cache: blocks of keys and of values widened
// into per-thread scratch as the scores and the value sum reach them; every score is the same dot and every
// output element the same fma chain over the keys in order, so the bits are those of an fp32 cache holding
// the same values).
template <typename KV>
void attention_rows(float* out, float* lse, const float* q, int64_t q_stride, const KV* k, const KV* v,
                    const int64_t* q_pos, const uint8_t* key_valid, const AttentionArgs& a) {
  const int64_t G = a.Hq / a.Hk, d = a.d, n = a.n_keys;
  const float scale = 1.0f / std::sqrt(float(d));
  // Work items: (query, KV head, part of its G query heads). The G heads that share a KV head take their
  // scores in one dot_f32_grid call, which reads each key once for all of them (4 x 4 blocks where there are
  // 16+ keys), the same bits as dot_f32 per pair. With fewer (query, KV head) pairs than threads, the G heads
  // split into parts so every thread has one. ZAYA1-8B's shape (8 query heads, 2 KV heads, d 128), one decode
  // query, 2 threads, Zen 5: 53-59 -> 41 us at 512 keys, 398 -> 298 at 4096, the same outputs bit for bit.
  const int64_t pairs = a.S * a.Hk;
  int64_t parts = 1;
  while (parts < G && G % (parts * 2) == 0 && pairs * parts < int64_t(threads_here())) parts *= 2;
  const int64_t hp = G / parts;  // query heads per item
  // Threaded from about 2k query-key pairs: a decode token at 512 keys (8 heads) spends ~0.3 ms a layer
  // alone, far more than waking the pool costs. Items are leaves: they run on the leaf pool.
  const int threads = a.S * a.Hq * n > 2048 ? threads_here() : 1;
  parallel_for_shares(size_t(pairs * parts), threads, [&](size_t i, int) {
    const int64_t item = int64_t(i);
    const int64_t t = item / (a.Hk * parts), j = item / parts % a.Hk, h0 = j * G + item % parts * hp;
    // grid [keys][hp] as dot_f32_grid writes them; p [hp][n]; wide: a bf16 cache's widened block [kb][d].
    thread_local std::vector<float> grid, p, wide;
    const KV* kh = k + j * a.key_stride;
    const KV* vh = v + j * a.key_stride;
    int64_t first, last;
    visible_range(q_pos[t], a, &first, &last);
    const int64_t nv = std::max<int64_t>(0, last - first + 1);
    grid.resize(size_t(std::max<int64_t>(1, nv * hp)));
    p.resize(size_t(hp * n));
    const float* qh = q + t * q_stride + h0 * d;
    [[maybe_unused]] const int64_t kb = std::max<int64_t>(16, kWidenBytes / (d * int64_t(sizeof(float))));
    if constexpr (std::is_same_v<KV, float>) {
      if (nv > 0) dot_f32_grid(grid.data(), hp, qh, d, hp, kh + first * d, d, nv, d);
    } else {
      wide.resize(size_t(kb * d));
      for (int64_t j0 = first; j0 <= last; j0 += kb) {
        const int64_t j1 = std::min(last + 1, j0 + kb);
        widen_rows(wide.data(), kh, j0, j1, d);
        dot_f32_grid(grid.data() + (j0 - first) * hp, hp, qh, d, hp, wide.data(), d, j1 - j0, d);
      }
    }
    for (int64_t g = 0; g < hp; g++) {
      const int64_t h = h0 + g;
      float* ph = p.data() + g * n;
      for (int64_t i = 0; i < nv; i++) ph[first + i] = grid[size_t(i * hp + g)] * scale;
      float l = masked_softmax_row(ph, n, first, last, key_valid);
      if (lse) lse[t * a.Hq + h] = l;
    }
    float* oh = out + t * a.Hq * d + h0 * d;
    if constexpr (std::is_same_v<KV, float>) {
      weighted_rows_f32(oh, p.data(), n, hp, vh, first, last, d);
    } else {
      if (nv == 0) weighted_rows_f32(oh, p.data(), n, hp, wide.data(), first, last, d);  // zeros
      for (int64_t j0 = first; j0 <= last; j0 += kb) {
        const int64_t j1 = std::min(last + 1, j0 + kb);
        widen_rows(wide.data(), vh, j0, j1, d);
        weighted_rows_f32(oh, p.data() + j0, n, hp, wide.data(), 0, j1 - j0 - 1, d,
                          /*accumulate=*/j0 > first);
      }
    }
  });
}

}  // namespace

namespace {

// Per query head and block of kQB queries: scores[rows, keys] = Q · Kᵀ / √d (a GEMM) over the keys up to the
// block's last visible one (causality skips the rest), masked softmax per row, O = P · V. (head, block) items
// run in parallel (when `parallel`) with single-threaded GEMMs (gemm() stays on the calling thread inside a
// parallel region). `bf16`: K and V rounded to bf16 once per call (gemm() rounds Q and P). `invariant`: fp32
// products on zaya's small kernel called directly, bitwise what gemm()'s row-invariant backend computes for
// fp32 (gemm_rows.h runs it per tile) without its per-call dispatch (~2.5 us a call: 16 calls per decode
// token and layer).
void attention_blocks(float* out, float* lse, const float* q, int64_t q_stride, const float* k,
                      const float* v, const int64_t* q_pos, const uint8_t* key_valid, const AttentionArgs& a,
                      bool bf16, bool parallel, bool invariant) {
  const int64_t G = a.Hq / a.Hk, d = a.d, S = a.S, n = a.n_keys;
  const float scale = 1.0f / std::sqrt(float(d));
  constexpr int64_t kQB = 128;
  const int64_t n_blocks = (S + kQB - 1) / kQB;
  std::vector<uint16_t> k16, v16;
  if (bf16) {
    k16.resize(a.Hk * n * d);
    v16.resize(a.Hk * n * d);
    for (int64_t j = 0; j < a.Hk; j++) {
      convert_f32_to_bf16(k16.data() + j * n * d, k + j * a.key_stride, n * d);
      convert_f32_to_bf16(v16.data() + j * n * d, v + j * a.key_stride, n * d);
    }
  }
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (parallel)
  for (int64_t h = 0; h < a.Hq; h++) {
    for (int64_t qb = 0; qb < n_blocks; qb++) {
      const int64_t t0 = qb * kQB, rows = std::min(kQB, S - t0);
      int64_t key_lo = n, key_hi = 0;  // union of the visible ranges of the block's queries
      for (int64_t t = t0; t < t0 + rows; t++) {
        int64_t first, last;
        visible_range(q_pos[t], a, &first, &last);
        key_lo = std::min(key_lo, first);
        key_hi = std::max(key_hi, last + 1);
      }
      float* o = out + t0 * a.Hq * d + h * d;
      if (key_hi <= key_lo) {
        for (int64_t t = 0; t < rows; t++) std::fill(o + t * a.Hq * d, o + t * a.Hq * d + d, 0.f);
        continue;
      }
      const int64_t nk = key_hi - key_lo;
      thread_local std::vector<float> scores;
      scores.resize(rows * nk);
      const float* kh = k + (h / G) * a.key_stride + key_lo * d;
      const float* vh = v + (h / G) * a.key_stride + key_lo * d;
      MatRef kref = mat(kh, d, /*trans=*/true), vref = mat(vh, d);
      if (bf16) {
        kref = {k16.data() + ((h / G) * n + key_lo) * d, DType::BF16, d, true};
        vref = {v16.data() + ((h / G) * n + key_lo) * d, DType::BF16, d, false};
      }
      if (invariant)
        gemm_small_f32(rows, nk, d, scale, mat(q + t0 * q_stride + h * d, q_stride), kref, 0.f, scores.data(),
                       nk);
      else
        gemm(rows, nk, d, scale, mat(q + t0 * q_stride + h * d, q_stride), kref, 0.f, scores.data(), nk);
      for (int64_t t = 0; t < rows; t++) {
        int64_t first, last;
        visible_range(q_pos[t0 + t], a, &first, &last);
        float l = masked_softmax_row(scores.data() + t * nk, nk, first - key_lo, last - key_lo,
                                     key_valid ? key_valid + key_lo : nullptr);
        if (lse) lse[(t0 + t) * a.Hq + h] = l;
      }
      if (invariant)
        gemm_small_f32(rows, d, nk, 1.f, mat(scores.data(), nk), vref, 0.f, o, a.Hq * d);
      else
        gemm(rows, d, nk, 1.f, mat(scores.data(), nk), vref, 0.f, o, a.Hq * d);
    }
  }
}

#if defined(__AVX512F__)
// The fused forward's tiles: 16 queries (the vector lanes) x 16 keys.
constexpr int64_t kFlashRows = 16, kFlashKeys = 16;

// Row stride of transposed keys or values [d][stride] for n keys: n rounded up to whole key blocks, plus one
// block when that is an even number of 64-byte lines (a power-of-two stride, 2 KB for 512 keys, put the d
// lines a key block reads, and the transpose writes, into 2 of L1's 64 sets).
int64_t flash_key_stride(int64_t n) {
  int64_t stride = (n + kFlashKeys - 1) / kFlashKeys * kFlashKeys;
  if ((stride / kFlashKeys) % 2 == 0) stride += kFlashKeys;
  return stride;
}

// dst[c][i] = src[i·ld + c] for c < d, i < n; zero for i in [n, stride). 16 keys at a time, so that their d
// destination lines stay in L1 while the 16 fill them (a key at a time wrote a new line per element).
void transpose_keys(float* dst, int64_t stride, const float* src, int64_t ld, int64_t n, int64_t d) {
  for (int64_t c = 0; c < d; c++) std::fill(dst + c * stride + n, dst + (c + 1) * stride, 0.f);
  for (int64_t i0 = 0; i0 < n; i0 += kFlashKeys)
    for (int64_t i = i0; i < std::min(n, i0 + kFlashKeys); i++)
      for (int64_t c = 0; c < d; c++) dst[c * stride + i] = src[i * ld + c];
}

// Per query of a block of 16: its visible keys [first, last] (first > last: none; rows past `rows` see
// nothing), and the union [key_lo, key_hi) (key_lo = key_hi when nothing is visible).
void flash_visible(int32_t* first, int32_t* last, int64_t* key_lo, int64_t* key_hi, const int64_t* q_pos,
                   int64_t rows, const AttentionArgs& a) {
  const int64_t n = a.n_keys;
  int64_t lo = n, hi = 0;
  for (int64_t i = 0; i < kFlashRows; i++) {
    first[i] = 1, last[i] = 0;
    if (i >= rows) continue;
    int64_t f, e;
    visible_range(q_pos[i], a, &f, &e);
    f = std::max<int64_t>(f, 0);
    e = std::min<int64_t>(e, n - 1);
    if (e < f) continue;
    first[i] = int32_t(f), last[i] = int32_t(e);
    lo = std::min(lo, f);
    hi = std::max(hi, e + 1);
  }
  *key_lo = lo;
  *key_hi = std::max(lo, hi);
}

// The mask of queries (lanes) that see key j0 + j of a block of nb keys: all 16 when the block lies inside
// every query's range (`unmasked`), none past the block's end or for a padded key.
inline __mmask16 flash_seen(bool unmasked, int64_t j0, int j, int64_t nb, const uint8_t* key_valid,
                            __m512i vfirst, __m512i vlast) {
  if (unmasked) return 0xffff;
  if (j >= nb || (key_valid && !key_valid[j0 + j])) return 0;
  const __m512i key = _mm512_set1_epi32(int32_t(j0 + j));
  return __mmask16(_mm512_cmple_epi32_mask(vfirst, key) & _mm512_cmpge_epi32_mask(vlast, key));
}

// acc[j] = Σ_c xt[c][lanes] · yt[c][j0 + j] for the 16 keys j of a block: Q·Kᵀ of 16 queries (lanes) and
// 16 keys, xt [d][16] the queries' rows transposed, yt [d][stride] the keys'.
inline void flash_scores(__m512* acc, const float* xt, const float* yt, int64_t stride, int64_t j0,
                         int64_t d) {
#pragma GCC unroll 16
  for (int j = 0; j < kFlashKeys; j++) acc[j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < d; c++) {
    const __m512 xc = _mm512_loadu_ps(xt + c * kFlashRows);
    const float* yc = yt + c * stride + j0;
#pragma GCC unroll 16
    for (int j = 0; j < kFlashKeys; j++) acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(yc[j]), xc, acc[j]);
  }
}

// Fused (flash-style) forward of one query head over a block of 16 queries, fp32 throughout, for head_dim a
// multiple of 16 (spec §5.5g; the online softmax of FlashAttention-2, Dao 2023, Algorithm 1):
//   for each block of 16 keys in the query block's visible range:
//     S = Q·Kᵀ·scale,  m' = max(m, rowmax S),  P = exp(S − m') (0 where masked),
//     l = l·e^(m−m') + rowsum P,  O = O·e^(m−m') + P·V
//   out = O / l, lse = m + log l.
// The queries sit in the vector lanes (Sᵀ: one 16-lane vector per key), so the row max, the row sums, the
// rescaling and the masks are element-wise across vectors, and every product broadcasts one key or value
// element at a constant offset. The scores never leave registers and L1 (the GEMM path wrote [128, keys]
// score blocks to memory and read them three times, and ran its K = 64 products at ~80 GFLOP/s a core).
//   qt [d][16]: the block's queries transposed; kt [d][kt_stride]: the KV head's keys transposed (zero past
//   the last key); v [n, d]: its values; first/last [16]: each query's visible keys (first > last: none).
// Each query's result depends only on its own visible keys and the key blocks (which start at the query
// block's first visible key): never on the thread count.
void flash_query_block(float* out, int64_t out_stride, float* lse, int64_t lse_stride, const float* qt,
                       const float* kt, int64_t kt_stride, const float* v, const int32_t* first,
                       const int32_t* last, int64_t rows, int64_t key_lo, int64_t key_hi,
                       const uint8_t* key_valid, int64_t d, float scale) {
  using vec_exp::exp_ps;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  thread_local std::vector<float> ot_buf;  // [d][16] Oᵀ, the running output
  ot_buf.assign(size_t(d * kFlashRows), 0.f);
  float* ot = ot_buf.data();
  alignas(64) float p_tile[kFlashKeys][kFlashRows];  // Pᵀ of the key block
  const __m512i vfirst = _mm512_loadu_si512(first), vlast = _mm512_loadu_si512(last);
  const __m512 vscale = _mm512_set1_ps(scale), neg_inf = _mm512_set1_ps(kNegInf);
  __m512 m = neg_inf, l = _mm512_setzero_ps();
  int32_t min_last = INT32_MAX,
          max_first = INT32_MIN;  // a key block inside every query's range needs no mask
  for (int64_t i = 0; i < rows; i++)
    min_last = std::min(min_last, last[i]), max_first = std::max(max_first, first[i]);
  for (int64_t j0 = key_lo; j0 < key_hi; j0 += kFlashKeys) {
    const int64_t nb = std::min(kFlashKeys, key_hi - j0);
    // Sᵀ: one accumulator per key, the queries in its lanes.
    __m512 acc[kFlashKeys];
    flash_scores(acc, qt, kt, kt_stride, j0, d);
    const bool unmasked =
        nb == kFlashKeys && rows == kFlashRows && max_first <= j0 && min_last >= j0 + nb - 1 && !key_valid;
    __m512 block_max = neg_inf;
    __mmask16 seen[kFlashKeys];
#pragma GCC unroll 16
    for (int j = 0; j < kFlashKeys; j++) {
      acc[j] = _mm512_mul_ps(acc[j], vscale);
      seen[j] = flash_seen(unmasked, j0, j, nb, key_valid, vfirst, vlast);
      block_max = _mm512_mask_max_ps(block_max, seen[j], block_max, acc[j]);
    }
    const __m512 m_new = _mm512_max_ps(m, block_max);
    // α = e^(m − m'); 0 for a query that has seen nothing yet (m = m' = −inf: O and l are 0 anyway).
    const __mmask16 live = _mm512_cmp_ps_mask(m_new, neg_inf, _CMP_NEQ_OQ);
    const __m512 alpha = _mm512_maskz_mov_ps(live, exp_ps(_mm512_sub_ps(m, m_new)));
    __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int j = 0; j < kFlashKeys; j++) {
      const __m512 pj = _mm512_maskz_mov_ps(seen[j], exp_ps(_mm512_sub_ps(acc[j], m_new)));
      sum = _mm512_add_ps(sum, pj);
      _mm512_store_ps(p_tile[j], pj);
    }
    l = _mm512_fmadd_ps(l, alpha, sum);
    m = m_new;
    // Oᵀ = Oᵀ·α + Pᵀ-weighted rows of V, 16 head-dim columns at a time.
    for (int64_t c0 = 0; c0 < d; c0 += 16) {
      __m512 oc[16];
#pragma GCC unroll 16
      for (int cc = 0; cc < 16; cc++)
        oc[cc] = _mm512_mul_ps(_mm512_loadu_ps(ot + (c0 + cc) * kFlashRows), alpha);
      for (int64_t j = 0; j < nb; j++) {
        const __m512 pj = _mm512_load_ps(p_tile[j]);
        const float* vj = v + (j0 + j) * d + c0;
#pragma GCC unroll 16
        for (int cc = 0; cc < 16; cc++) oc[cc] = _mm512_fmadd_ps(_mm512_set1_ps(vj[cc]), pj, oc[cc]);
      }
#pragma GCC unroll 16
      for (int cc = 0; cc < 16; cc++) _mm512_storeu_ps(ot + (c0 + cc) * kFlashRows, oc[cc]);
    }
  }
  alignas(64) float l_rows[kFlashRows], m_rows[kFlashRows];
  _mm512_store_ps(l_rows, l);
  _mm512_store_ps(m_rows, m);
  for (int64_t i = 0; i < rows; i++) {
    float* dst = out + i * out_stride;
    if (l_rows[i] == 0.f) {  // no visible key (a padding query): zero output, lse −inf
      std::fill(dst, dst + d, 0.f);
      if (lse) lse[i * lse_stride] = kNegInf;
      continue;
    }
    const float inv = 1.f / l_rows[i];
    for (int64_t c = 0; c < d; c++) dst[c] = ot[c * kFlashRows + i] * inv;
    if (lse) lse[i * lse_stride] = m_rows[i] + std::log(l_rows[i]);
  }
}

// attention_forward's fused path: every (query head, block of 16 queries) as one item, over the threads.
void attention_flash(float* out, float* lse, const float* q, int64_t q_stride, const float* k, const float* v,
                     const int64_t* q_pos, const uint8_t* key_valid, const AttentionArgs& a) {
  const int64_t G = a.Hq / a.Hk, d = a.d, S = a.S, n = a.n_keys;
  ZAYA_ASSERT(n < (int64_t(1) << 31), "the fused kernel's masks compare key indices as int32");
  const float scale = 1.0f / std::sqrt(float(d));
  const int64_t kt_stride = flash_key_stride(n);
  std::vector<float> kt(size_t(a.Hk * d * kt_stride));  // [Hk][d][kt_stride] the keys of each KV head
  for (int64_t j = 0; j < a.Hk; j++)
    transpose_keys(kt.data() + j * d * kt_stride, kt_stride, k + j * a.key_stride, d, n, d);
  const int64_t n_blocks = (S + kFlashRows - 1) / kFlashRows;
#pragma omp parallel for collapse(2) schedule(dynamic, 1) if (S * a.Hq * n > 2048)
  for (int64_t h = 0; h < a.Hq; h++) {
    for (int64_t qb = 0; qb < n_blocks; qb++) {
      const int64_t t0 = qb * kFlashRows, rows = std::min(kFlashRows, S - t0);
      int32_t first[kFlashRows], last[kFlashRows];
      int64_t key_lo, key_hi;
      flash_visible(first, last, &key_lo, &key_hi, q_pos + t0, rows, a);
      thread_local std::vector<float> qt;  // [d][16] the block's queries transposed
      qt.assign(size_t(d * kFlashRows), 0.f);
      for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < d; c++) qt[size_t(c * kFlashRows + i)] = q[(t0 + i) * q_stride + h * d + c];
      const int64_t j = h / G;
      flash_query_block(out + t0 * a.Hq * d + h * d, a.Hq * d, lse ? lse + t0 * a.Hq + h : nullptr, a.Hq,
                        qt.data(), kt.data() + j * d * kt_stride, kt_stride, v + j * a.key_stride, first,
                        last, rows, key_lo, key_hi, key_valid, d, scale);
    }
  }
}
#endif

}  // namespace

void attention_forward(float* out, float* lse, const float* q, int64_t q_stride, const float* k,
                       const float* v, const int64_t* q_pos, const uint8_t* key_valid,
                       const AttentionArgs& a) {
  ZAYA_PROFILE_SCOPE("attention");
  // Batch-invariant mode (gemm.h): every call, decode included, takes the blocked path in fp32, whose GEMMs
  // then run on the row-invariant kernel. A query's output is then the same however many queries share the
  // call (the scheduler's prefill chunks) or the block: its score row is a dot product over d in a fixed
  // order, its softmax runs over its visible keys in order (the block's other keys are exact zeros, added
  // after or before them), and P·V is one fused multiply-add chain over the keys in order (B stored [K, N]:
  // gemm_rows.h), to which the zeros of keys it cannot see add nothing. (The per-row loop below would be
  // invariant too, but is ~5x slower for long prefills.)
  if (gemm_batch_invariant())
    return attention_blocks(out, lse, q, q_stride, k, v, q_pos, key_valid, a, /*bf16=*/false,
                            /*parallel=*/a.S * a.Hq * a.n_keys > 8192, /*invariant=*/true);
  // Few queries (decode, speculative chunks): per-row dot products. From 8 queries the blocked path's GEMMs
  // win: 20-query chunks against a 100-key cache ran 2.8x faster there (zaya bench eval --way shared).
  if (a.S < 8) return attention_rows(out, lse, q, q_stride, k, v, q_pos, key_valid, a);
#if defined(__AVX512F__)
  // AVX-512 and head_dim a multiple of 16 (mid.json 64, ZAYA1-8B 128): the fused kernel, in fp32 whatever
  // gemm_dtype says (its products are not GEMM calls; fp32 costs nothing there and keeps the scores exact).
  if (a.d % 16 == 0) return attention_flash(out, lse, q, q_stride, k, v, q_pos, key_valid, a);
#endif
  attention_blocks(out, lse, q, q_stride, k, v, q_pos, key_valid, a, a.gemm_dtype == DType::BF16,
                   /*parallel=*/true, /*invariant=*/false);
}

void attention_forward_kv16(float* out, float* lse, const float* q, int64_t q_stride, const uint16_t* k,
                            const uint16_t* v, const int64_t* q_pos, const uint8_t* key_valid,
                            const AttentionArgs& a) {
  if (!gemm_batch_invariant() && a.S < 8) {  // attention_forward's per-row path, on widened blocks
    ZAYA_PROFILE_SCOPE("attention");
    return attention_rows(out, lse, q, q_stride, k, v, q_pos, key_valid, a);
  }
  // Prefill chunks (and every call in batch-invariant mode): the cached keys and values widened once, then
  // attention_forward as for an fp32 cache.
  const int64_t n = a.n_keys, d = a.d;
  thread_local std::vector<float> kw, vw;  // [Hk, n, d]
  kw.resize(size_t(a.Hk * n * d));
  vw.resize(kw.size());
  for (int64_t j = 0; j < a.Hk; j++) {
    widen_rows(kw.data() + j * n * d, k + j * a.key_stride, 0, n, d);
    widen_rows(vw.data() + j * n * d, v + j * a.key_stride, 0, n, d);
  }
  AttentionArgs wide = a;
  wide.key_stride = n * d;
  attention_forward(out, lse, q, q_stride, kw.data(), vw.data(), q_pos, key_valid, wide);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, int64_t q_stride,
                        const float* k, int64_t k_stride, const float* v, int64_t v_stride, const float* lse,
                        const int64_t* q_pos, const uint8_t* key_valid, const AttentionArgs& a) {
  ZAYA_PROFILE_SCOPE("attention_backward");
  const int64_t G = a.Hq / a.Hk, d = a.d, S = a.S, od = a.Hq * d;
  const float scale = 1.0f / std::sqrt(float(d));
  constexpr int64_t kQB = 128;
  const int64_t n_blocks = (S + kQB - 1) / kQB;
  // Per query head h and block of queries, over the keys the block can see, with single-threaded GEMMs:
  //   scores = Q·Kᵀ/√d,  π = exp(scores − lse) (0 where masked),  ḡπ = ḡO·Vᵀ,
  //   ḡs = π ⊙ (ḡπ − rowsum(π ⊙ ḡπ)),  ḡQ += ḡs·K/√d,  ḡK += ḡsᵀ·Q/√d,  ḡV += πᵀ·ḡO.
  // Parallel over KV heads: the dk/dv columns of head j are written only by its G query heads and dq columns
  // only by their own head, so threads never share an output.
#pragma omp parallel for schedule(static) if (a.Hk > 1 && S * a.n_keys * a.Hq * d > 65536)
  for (int64_t j = 0; j < a.Hk; j++) {
    std::vector<float> pi, dpi;
    for (int64_t h = j * G; h < (j + 1) * G; h++) {
      for (int64_t qb = 0; qb < n_blocks; qb++) {
        const int64_t t0 = qb * kQB, rows = std::min(kQB, S - t0);
        int64_t key_lo = a.n_keys, key_hi = 0;
        for (int64_t t = t0; t < t0 + rows; t++) {
          int64_t first, last;
          visible_range(q_pos[t], a, &first, &last);
          key_lo = std::min(key_lo, first);
          key_hi = std::max(key_hi, last + 1);
        }
        if (key_hi <= key_lo) continue;
        const int64_t nk = key_hi - key_lo;
        pi.resize(rows * nk);
        dpi.resize(rows * nk);
        const float* qb_ptr = q + t0 * q_stride + h * d;
        const float* go = dout + t0 * od + h * d;
        const float* kr = k + key_lo * k_stride + j * d;
        const float* vr = v + key_lo * v_stride + j * d;
        gemm(rows, nk, d, scale, mat(qb_ptr, q_stride), mat(kr, k_stride, /*trans=*/true), 0.f, pi.data(),
             nk);
        gemm(rows, nk, d, 1.f, mat(go, od), mat(vr, v_stride, /*trans=*/true), 0.f, dpi.data(), nk);
        for (int64_t r = 0; r < rows; r++) {
          const int64_t t = t0 + r;
          float* p = pi.data() + r * nk;
          float* g = dpi.data() + r * nk;
          const float l = lse[t * a.Hq + h];
          int64_t first, last;
          visible_range(q_pos[t], a, &first, &last);
          // π over the visible keys [lo, hi] of this block's range (vectorised exp, vec_math.h), 0 elsewhere.
          const int64_t lo = std::max<int64_t>(first - key_lo, 0),
                        hi = std::min<int64_t>(last - key_lo, nk - 1);
          if (!std::isfinite(l) || hi < lo) {
            std::fill(p, p + nk, 0.f);
            std::fill(g, g + nk, 0.f);
            continue;
          }
          std::fill(p, p + lo, 0.f);
          std::fill(p + hi + 1, p + nk, 0.f);
          if (key_valid)
            for (int64_t i = lo; i <= hi; i++)
              if (!key_valid[key_lo + i]) p[i] = -std::numeric_limits<float>::infinity();  // exp gives 0
          exp_shift_sum(p + lo, p + lo, hi - lo + 1, l);
          const float row_dot = dot_f32(p, g, nk);
          for (int64_t i = 0; i < nk; i++) g[i] = p[i] * (g[i] - row_dot) * scale;  // ḡs/√d
        }
        gemm(rows, d, nk, 1.f, mat(dpi.data(), nk), mat(kr, k_stride), 1.f, dq + t0 * q_stride + h * d,
             q_stride);
        gemm(nk, d, rows, 1.f, mat(dpi.data(), nk, /*trans=*/true), mat(qb_ptr, q_stride), 1.f,
             dk + key_lo * k_stride + j * d, k_stride);
        gemm(nk, d, rows, 1.f, mat(pi.data(), nk, /*trans=*/true), mat(go, od), 1.f,
             dv + key_lo * v_stride + j * d, v_stride);
      }
    }
  }
}

}  // namespace zaya

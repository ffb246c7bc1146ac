// Products with quantized weights (Q8_0, MXFP4, F8_E4M3; formats in core/quant.h), and with BF16 weights
// when few rows make a product a stream of weights (decode).
//
// Decode reads every weight a token touches, so its speed is the rate at which weights stream from memory.
// The streaming kernel reads each weight block once for all the call's rows (register blocks of up to 8
// weight rows x 8 activation rows), turns it into fp32 in registers (int8 -> fp32, E2M1 nibbles -> fp32
// through a 16-entry table, e4m3 -> fp16 -> fp32, bf16 -> fp32), scales it by its block scale (Q8_0,
// MXFP4) and multiplies with the fp32 activations as they are: no activation quantization, so its only
// error is fp32 rounding. Sum order per output: one 16-lane accumulator, a chain of fmas over the blocks in
// order (lo half, then hi half), reduced at the end; FP8's row scale applied after. Row m's results depend
// on in[m] and W only, never on M, the blocking, the tiling or the thread: the kernel is batch invariant by
// construction.
//
// Many rows (prefill) are faster as a GEMM: above kQuantStreamMaxRows rows a tile of W is dequantized into
// `tile` (the model's compute dtype: BF16 rounds each weight once, F32 keeps it exact) and goes through
// gemm(). In gemm's batch-invariant mode the streaming kernel serves every M, so a row's result
// never depends on how many rows shared its call.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace zaya {

// Rows up to which the streaming kernel is used outside batch-invariant mode.
constexpr int64_t kQuantStreamMaxRows = 16;

// True when a BF16 weight product of M rows should take the streaming kernel: few rows, and gemm()'s
// batch-invariant mode off (that mode keeps every product on its own row-invariant kernel).
bool bf16_streams(int64_t M);

// out[M, N] (row stride ldc) = in[M, K] · W[N, K]ᵀ; W quantized (or BF16), 2-D [N, K]. Threads split N.
void quant_linear_forward(float* out, int64_t ldc, const float* in, int64_t M, const Tensor& W,
                          DType tile = DType::BF16);

// The expert form: out[r, :] = in[r, :] · W[e]ᵀ for the rows r in [offsets[e], offsets[e+1]) of expert e;
// W [E, N, K] quantized. Every (expert, N-tile) pair of the call is one work item of a single parallel
// loop, so a decode step with a few rows per expert keeps all threads streaming.
void quant_grouped_linear_forward(float* out, const float* in, const Tensor& W, const int64_t* offsets,
                                  int64_t E, DType tile = DType::BF16);

// The VNNI decode kernel (AVX512-VNNI CPUs; Q8_0 and MXFP4 weights with N a multiple of 16).
//
// pack_for_decode re-lays W ([N, K] or [E, N, K]) in groups of 16 rows, block by block: for Q8_0 eight
// 64-byte vectors (16 rows x 4 consecutive elements, as u8 = w + 128) then the 16 rows' fp16 scales; for
// MXFP4 four 64-byte vectors (16 rows x 4 bytes; byte j of vector p holds elements 4p + j in its low nibble
// and 4p + 16 + j in its high one) then the 16 rows' E8M0 scales. A group's blocks follow each other, so a
// group streams from memory front to back. The copy is attached to W.decode_pack; W keeps its own data (the
// prefill path and everything else read that). Other weights and CPUs are left as they are.
//
// With a pack, the streaming path quantizes the activations per block of 32 to int8 (scale amax / 127,
// round to nearest even: ggml's Q8_0 activations) and forms each block's integer dot product for 16 weight
// rows at once with vpdpbusd; out[m, n] = Σ_b float(Σ_k w_q·a_q) · (s_w(n, b) · s_a(m, b)), one fma per
// block in block order: exact integer dots, fp32 rounding after, and the same sum for a row whatever the
// other rows (batch invariant). Its only added error is the activations' rounding to int8.
// release_source: afterwards, hand W's own pages (elements and scales) back to the OS (MADV_PAGEOUT: a hint
// that keeps the contents; a memory-mapped checkpoint's pages are simply dropped and would be read again
// from the file if anything touched them). Decode and prefill both read the pack then, so a loaded quantized
// model holds its quantized weights once, not twice.
//
// BF16 weights are packed too (builds with the VNNI kernel, N a multiple of 16, K of 32): groups of 16
// rows, per block of 32 sixteen 64-byte vectors, vector j holding elements (2j, 2j + 1) of each of the 16
// rows as one dword. With it, decode's products take the bf16 packed kernel: one shift or one and widens 16
// weights, which meet broadcast fp32 activations (lanes over output columns, one chain of fmas per output
// over k in order: batch invariant, fp32 rounding only). 2-D BF16 sources are never released: prefill's
// GEMM reads them. 3-D (expert) ones are: every grouped call on packed BF16 experts reads the pack (prefill
// unpacks bf16 tiles for its GEMM, the same values), so ZAYA1-8B's 16 GB of bf16 experts are held once.
//
// FP8 (e4m3) weights with per-row scales, 2-D or 3-D, are packed likewise: per block of 32 eight 64-byte
// vectors, vector q holding elements (4q, 4q + 1) of each of the 16 rows as one word, then (4q + 2, 4q + 3);
// the rows' scales (times 2^8) beside the pack. The FP8 packed kernel widens each byte to the fp16 of its
// value times 2^-8 (three integer ops per 32 elements) and then to fp32, exactly, and runs as the bf16 one
// (one fma chain per output over k in order; the row scale multiplies the sum). A matrix with e4m3 NaN codes
// is not packed. FP8 sources are released like Q8_0 ones (prefill dequantizes from the pack, bit for bit).
void pack_for_decode(Tensor& W, bool release_source = false);
bool has_decode_pack(const Tensor& W);

// Whether a loaded model should pack its BF16 matrices (pack_for_decode; `experts`: the 3-D expert tensors,
// whose sources are then released and whose prefill unpacks bf16 tiles from the pack): a build with the
// packed kernels, on a CPU where vdpbf16ps is slow (cpu_fast_bf16_dot false: there the fp32 kernels carry
// bf16 decode, and the packed one ran 16-row products 1.7x faster than the streaming one), experts included;
// or, dense matrices only, where vdpbf16ps is fast: the packed bf16 dot kernel over the pack beat the bf16
// dot kernel over the source on Zen 5 at 1 / 4 / 16 rows, 52.8 / 57.2 / 22.8 against 49.4 / 36.0 / 21.5 GB/s
// from memory (bench/quant_gemm_bench, randomly interleaved repetitions; ZAYA1-8B MXFP4 experts decoded 1.13
// / 1.27 / 1.11x faster at batch 1 / 4 / 16; the expert pack there left bf16 decode as it was and cost 16% of
// its prefill), and on Zen 4 (which takes it from 4 rows, bf16_dot_min_rows) at 4 / 16 rows, 32.7 / 22.4
// against 26.0 / 16.0 GB/s (docs/quantization.md, "The table on Zen 4 at 32d76a3"). So every CPU with these
// kernels packs its dense BF16 matrices; their sources stay for prefill's GEMM (ZAYA1-8B: +1.5 GB).
// ZAYA_BF16_PACK=0 / 1 overrides, experts included (benchmarks compare both); read once.
bool bf16_decode_pack_wanted(bool experts);
// Whether a loaded model should pack its FP8 matrices, experts included (pack_for_decode; the source pages
// are released, prefill dequantizes from the pack): in every build with the packed kernels, for the FP8
// packed kernel. On Zen 5: 50.9 / 31.2 / 11.7 GB/s at 1 / 4 / 16 rows against 43.9 / 15.0 / 10.7 for the
// kernels decode picks without a pack (fp32 streaming at one row, bf16 dot from 4); ZAYA1-8B FP8 experts
// 1.10 / 1.40 / 1.37x faster at batch 1 / 4 / 16. On Zen 4, where vdpbf16ps is fast too: 28.4 / 16.6 / 6.6
// against 22.3 / 14.0 / 7.8, and as a step's expert products meet 1-2 rows at every batch, ZAYA1-8B FP8
// experts decode ~1.12 / 1.2x faster at batch 4 / 16 (level at 1) for 7-20% slower prefill (its tiles unpack
// from the pack; docs/quantization.md). ZAYA_FP8_PACK=0 turns it off; read once.
bool fp8_decode_pack_wanted();

// Activations as the VNNI kernel uses them: q[M, K] int8, d[M, K / 32] the block scales (a ≈ q · d).
struct ActQ8 {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> neg_sum128;  // [M, K / 32]: -128 · Σ q over the block (the u8 weights' offset)
};
void quantize_activations(ActQ8* out, const float* in, int64_t M, int64_t K);

// Whether decode's streamed Q8_0 / MXFP4 products quantize their activations to int8 per block (the VNNI
// kernel over a pack, the AVX2 int8 kernel): on by default, the fast kernels. Off (ZAYA_INT8_ACTIVATIONS=0 in
// the environment, or set_quant_int8_activations(false)) they take the fp32 streaming kernel: the weights as
// stored times the activations as they are, fp32 rounding only, slower. Explicit QuantPaths ignore it.
bool quant_int8_activations();
void set_quant_int8_activations(bool on);

// How a call is computed (tests and benchmarks). Auto: Stream up to kQuantStreamMaxRows rows (every M in
// gemm's batch-invariant mode), DequantGemm above. Stream: the decode kernels as decode picks them (the
// VNNI kernel over a pack; the float packed kernel over a BF16 / FP8 pack, whatever the CPU; the bf16 dot
// kernel for unpacked BF16 / FP8 weights when decode takes it, see below; else the fp32 streaming kernel).
// StreamF32: the fp32 streaming kernel on W's own layout, always. Bf16Dot: the bf16 dot kernel, always (BF16
// / FP8 weights, K a multiple of 32, a build with AVX512-BF16; an error otherwise). StreamAvx2: the fp32
// streaming kernel on 256-bit vectors, which decode takes in builds without AVX-512 (AMD Zen 3, older Intel);
// any AVX2 build runs it here (an error in builds without AVX2 / FMA / F16C). Int8Avx2: the int8 kernel on
// 256-bit vectors (Q8_0 / MXFP4 weights on their own layout, activations quantized per block to int8 as
// ActQ8, vpmaddubsw dots), which decode takes for those formats in builds without AVX-512; any AVX2 build
// runs it here. PackedF32: the float packed kernel (fp32 activations) over a BF16 / FP8 matrix's decode pack,
// which decode takes for packed matrices outside PackedBf16Dot's cases; an error without a pack.
// PackedBf16Dot: the bf16 dot kernel over a BF16 matrix's decode pack (vdpbf16ps on the pack's element
// pairs, activations rounded to bf16; one chain per output over the pairs in order), which decode takes for a
// packed BF16 matrix where it would take the bf16 dot kernel (Zen 5); an error without a pack or AVX512-BF16.
enum class QuantPath {
  Auto,
  Stream,
  StreamF32,
  StreamAvx2,
  Int8Avx2,
  Bf16Dot,
  PackedF32,
  PackedBf16Dot,
  DequantGemm
};

// The bf16 dot kernel (BF16 and FP8 weights; builds with AVX512-BF16): the activations are rounded to bf16
// (nearest even) once per call, FP8 weights are widened to bf16 exactly (every e4m3 value is a bf16 value),
// and vdpbf16ps forms the products, 4 weight rows x up to 6 activation rows per register block; FP8's row
// scale multiplies each result. Its sum order is gemm_rows.h's bf16 dot form, so with BF16 weights a result
// equals gemm()'s batch-invariant product bit for bit, and a row's result never depends on the other rows.
// Decode takes it for a product of at least bf16_dot_min_rows rows in a bf16-compute model on a CPU where
// vdpbf16ps is fast (cpu_fast_bf16_dot): there fp32 fmas, not memory, limit the fp32 kernel at 16 rows.
// In gemm's batch-invariant mode it takes every M there, so a row's result never depends on its batch.
constexpr int64_t kBf16DotMinRows = 4;
// The fewest rows for which decode takes the bf16 dot kernel outside the batch-invariant mode: 1 for BF16
// weights on full-width AVX-512 (Zen 5, cpu_full_width_avx512: there the fp32 kernel's conversions and fmas
// limit even one row: 87 vs 137 GB/s on cached weights, 45 vs 54 from memory, bench/quant_gemm_bench);
// kBf16DotMinRows otherwise (FP8's widening costs more than one row's fmas; Zen 4's memory is the limit).
int64_t bf16_dot_min_rows(DType fmt);
bool quant_bf16_dot_available();
bool quant_avx2_stream_available();
void quant_linear_forward_with(QuantPath path, float* out, int64_t ldc, const float* in, int64_t M,
                               const Tensor& W, DType tile = DType::BF16);

}  // namespace zaya

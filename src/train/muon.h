// Muon (momentum + Newton–Schulz orthogonalisation) for matrix parameters, Moonlight's formulation:
//
//   buf ← μ·buf + G                       (no buffer when μ = 0: U = G)
//   U   ← G + μ·buf  (Nesterov)  or  buf
//   O   ← NewtonSchulz(U)                 ≈ the orthogonal polar factor of U (singular values ≈ 1)
//   W   ← W·(1 − lr·wd) − lr·s·O          s = rms_match rule (Moonlight: 0.2·sqrt(max(rows, cols)))
//
// Keller Jordan's form (buf ← μ·buf + (1−μ)·G, U ← (1−μ)·G + μ·buf) is the same U times (1−μ), which the
// Frobenius normalisation of Newton–Schulz removes, so both give the same update (up to its 1e-7 guard).
#pragma once

#include <cstdint>
#include <vector>

#include "train/optim_config.h"

namespace zaya::train {

// Orthogonalises X [rows, cols] (row-major, in place) with cfg.ns_steps quintic Newton–Schulz iterations:
//   X ← X / (‖X‖_F + 1e-7); transpose when rows > cols (the iteration works on the short side);
//   repeat: A = X·Xᵀ; B = b·A + c·A·A; X = a·X + B·X;   transpose back.
// Products through gemm() on fp32 operands, or on their bf16 roundings (cfg.ns_dtype; fp32 accumulation and
// an fp32 iterate either way). `scratch` is reused between calls.
void newton_schulz(float* X, int64_t rows, int64_t cols, const MuonConfig& cfg, std::vector<float>& scratch);

// FLOPs of one newton_schulz of a [rows, cols] matrix: per iteration A (2·s²·l), A·A (2·s³) and the update
// product (2·s²·l), s and l the short and long sides.
double newton_schulz_flops(int64_t rows, int64_t cols, int ns_steps);

// The rms_match factor s for a [rows, cols] matrix.
float muon_update_scale(int64_t rows, int64_t cols, const MuonConfig& cfg);

// One Muon step on `batch` independent matrices [rows, cols] stored back to back (an expert tensor
// [E, R, C] is batch = E): value, grad and momentum (unused when cfg.momentum == 0) hold batch·rows·cols
// floats. lr and weight_decay are the group's. grad_scale multiplies every gradient as it is read (the
// clipping factor; bitwise as if the gradients had been scaled before the call).
void muon_update(float* value, const float* grad, float* momentum, int64_t batch, int64_t rows, int64_t cols,
                 float lr, float weight_decay, const MuonConfig& cfg, std::vector<float>& scratch,
                 float grad_scale = 1.0f);

}  // namespace zaya::train

// Fresh ZAYA1 weights with the Hugging Face initialisation (spec §9.2; tools/reference/zaya_ref.py
// init_weights): N(0, initializer_range) for linear, convolution, embedding and expert weights; zero biases
// and a zero pad-token embedding row; ones for norm weights, residual scales and EDA scales; zero residual
// biases; key temperature 0; balancing biases (0, …, 0, −1).
//
// Values are a pure function of (seed, tensor name, element index), generated in 1 Mi-element blocks with
// a counter-based RNG, so tensors can be produced one at a time, in parallel, straight into a mapped file.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/tensor.h"
#include "model/zaya-config.h"

namespace zaya {

// How the initialiser treats a tensor, from its native name.
enum class InitKind : uint8_t { Normal, Zeros, Ones, BalancingBias, Embedding };
InitKind init_kind(const std::string& name);

// Writes the initial values of tensor `name` with `shape` as `dtype` (F32 or BF16) into dst.
void init_tensor(void* dst, const std::string& name, const Shape& shape, DType dtype, const ZayaConfig& cfg,
                 uint64_t seed);

}  // namespace zaya

namespace zaya {
struct ZayaWeights;
// A whole model initialised in memory: GEMM weights in `compute` dtype, everything else F32.
ZayaWeights init_weights(const ZayaConfig& cfg, DType compute, uint64_t seed);
}  // namespace zaya

// ZAYA1 weights as the model code uses them (spec §4): GEMM weights in the compute dtype (F32 or BF16;
// zero-copy views into the mapped checkpoint when the stored dtype matches), every vector, convolution,
// temperature and balancing bias in F32. Loading maps native and legacy (spec §8.3) tensor names.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/zaya-config.h"

namespace zaya {

struct CcaConvPack;  // kernels/cca.h

struct ResidualScaleWeights {
  Tensor hidden_scale, hidden_bias, residual_scale, residual_bias;  // [H] each, F32
};

struct ZayaLayerWeights {
  Tensor input_norm;         // [H]
  Tensor q_proj, q_bias;     // [A, H], [A] (bias only with attention_bias)
  Tensor k_proj, k_bias;     // [Kv, H], [Kv]
  Tensor v_cur, v_cur_bias;  // [Kv/2, H], [Kv/2]
  Tensor v_del, v_del_bias;  // [Kv/2, H], [Kv/2]
  // The four input projections stored as one matrix so the forward does one GEMM:
  // qkv [A + 2·Kv, H] = rows q | k | v_cur | v_del (q_proj … v_del are views into it), qkv_bias [A + 2·Kv]
  // (zeros without attention_bias).
  Tensor qkv, qkv_bias;
  Tensor conv0_w, conv0_b;  // [C, 1, t0], [C]   depthwise
  Tensor conv1_w, conv1_b;  // [C, d, t1], [C]   grouped, one group per head
  // conv1_w re-laid for inference (kernels/cca.h), made by pack_decode_weights; null in training models,
  // whose conv1_w changes every step.
  std::shared_ptr<const CcaConvPack> conv1_pack;
  Tensor temp;            // [Hk] key temperature
  Tensor o_proj, o_bias;  // [H, A], [H]
  ResidualScaleWeights post_attn_scale;
  Tensor post_norm;                      // [H]
  Tensor router_down, router_down_bias;  // [R, H], [R]
  Tensor router_eda_scale;               // [R], undefined in block 0
  Tensor router_norm;                    // [R]
  Tensor router_fc1, router_fc1_bias;    // [R, R], [R]
  Tensor router_fc2, router_fc2_bias;    // [R, R], [R]
  Tensor router_out;                     // [E+1, R]
  Tensor balancing_biases;               // [E+1] buffer, always F32
  Tensor experts_gate_up;                // [E, 2I, H]
  Tensor experts_down;                   // [E, H, I]
  ResidualScaleWeights post_mlp_scale;
};

struct ZayaWeights {
  DType compute = DType::F32;      // dtype of the GEMM weights
  Tensor embed;                    // [V, H]
  Tensor input_scale, input_bias;  // [H]
  Tensor final_norm;               // [H]
  Tensor lm_head;                  // [V, H] (== embed when tied)
  Tensor lm_head_bias;             // [V] when lm_head_bias
  std::vector<ZayaLayerWeights> layers;
};

// Every checkpoint tensor under its native Hugging Face name with a pointer to its slot, in checkpoint
// order; shapes follow the config. Used by the loader, `zaya init` and (later) the optimizer.
struct NamedParam {
  std::string name;
  Shape shape;
  Tensor* slot;
  bool is_matrix;  // a GEMM weight (compute dtype) rather than a vector/conv (F32)
  bool is_buffer;  // balancing_biases: not a parameter
};
std::vector<NamedParam> named_params(const ZayaConfig& cfg, ZayaWeights& w);

// Native name of a legacy tensor name (spec §8.3); returns false for names that have no native place.
// Expert tensors map to "…mlp.experts.gate_up_proj" / "down_proj" with *expert set (else -1).
bool legacy_to_native_name(const std::string& legacy, int64_t num_layers, std::string* native, int* expert);

// Loads weights from an HF checkpoint directory (config.json + safetensors, single or sharded; native or
// legacy names). `compute` is the GEMM dtype. Missing, unexpected and mis-shaped tensors are reported
// together in one error naming the directory.
// in_memory (`--no-mmap`): the matrices that would be read in place from the memory-mapped checkpoint are
// copied into huge-page buffers (core/tensor.h: huge_alloc_shared) and the mapping's pages under them handed
// back: a longer load (the copy), a faster decode (no 4 KiB-page TLB misses while streaming them).
ZayaWeights load_weights(const std::string& dir, const ZayaConfig& cfg, DType compute,
                         bool in_memory = false);

// t, a view of a read-only file mapping, copied into a huge-page buffer of its own (t re-pointed at it,
// shape, dtype and scales kept); this process's pages of the mapped range are handed back (MADV_DONTNEED).
void move_mapped_to_huge_pages(Tensor& t);

// Gathers q_proj, k_proj, v_proj_current, v_proj_delayed (and biases) of every layer into the fused qkv
// matrix and re-points the four named tensors at views of it. Called by every way of making weights.
void fuse_qkv(const ZayaConfig& cfg, ZayaWeights& w);

// Attaches the decode kernels' packed copy (kernels/quant_gemm.h: pack_for_decode) to every Q8_0 and MXFP4
// matrix a decode step reads: q/k/v, o, router, experts, head; to the FP8 ones where
// fp8_decode_pack_wanted(); and to the BF16 ones where bf16_decode_pack_wanted(experts). F32 weights are left
// alone. Called by load_weights, which also releases the checkpoint's pages of the packed quantized matrices
// and BF16 experts (prefill dequantizes from the pack too), so those weights are held once; 2-D BF16 matrices
// keep theirs (prefill's GEMM reads them).
void pack_decode_weights(ZayaWeights& w, bool release_source = false);

// Checks the skip-class condition of spec §5.7 per layer: true when max_{e<E} β_e >= β_E + 1, i.e. the skip
// class can never win and all skip semantics agree.
std::vector<bool> skip_never_chosen(const ZayaConfig& cfg, const ZayaWeights& w);

}  // namespace zaya

// Quantized checkpoints on disk: config.json's `quantization_config` and the tensors that hold a quantized
// weight, in the compressed-tensors layouts vLLM reads (weights only):
//
//   format (quantization_config)  weights args                              tensors for a weight P
//   "int-quantized"   (Q8_0)      int, 8 bits, group 32, symmetric          P: I8 [.., rows, K]
//                                                                           P.weight_scale: F16 [.., rows,
//                                                                           K/32]
//   "float-quantized" (FP8)       float, 8 bits, channel, symmetric         P: F8_E4M3 [.., rows, K]
//                                 (Zyphra's ZAYA1-8B-FP8-Experts)           P.weight_scale: [.., rows, 1]
//   "mxfp4-pack-quantized"        float, 4 bits, group 32, uint8 scales     P.weight_packed: U8 [.., rows,
//   K/2]
//                                 (Zyphra's ZAYA1-8B-MXFP4-Experts)         P.weight_scale: U8 [.., rows,
//                                 K/32]
//
// where a Linear weight `X.weight` has its parts at `X.weight` / `X.weight_packed` / `X.weight_scale`,
// and a stacked expert tensor `…experts.gate_up_proj` (no `.weight`) at `…gate_up_proj` /
// `…gate_up_proj.weight_packed` (also read: `…gate_up_proj_packed`, or the packed bytes under the name
// itself) / `…gate_up_proj.weight_scale`. Which weights are quantized is read from the file (a weight
// with a `weight_scale` is); the config says how. Scales stored as F16, BF16 or F32 (FP8, Q8_0) are
// converted at load: Q8_0 to F16, FP8 to F32.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/checkpoint_files.h"

namespace zaya {

// What config.json's quantization_config declares.
struct WeightQuant {
  DType format = DType::F32;  // Q8_0, MXFP4 or F8_E4M3; F32 when the checkpoint is not quantized
  std::string format_name;    // the compressed-tensors format string
};

// Parses the quantization_config JSON text ("" = none). Throws a zaya::Error naming `where` and the field
// for anything zaya cannot run: another quant_method, activation quantization, other bit widths, group
// sizes or strategies (NVFP4, int4, block FP8...).
WeightQuant parse_quantization_config(const std::string& json_text, const std::string& where);

// The quantization_config zaya writes for `format` (Q8_0, MXFP4 or F8_E4M3); `ignore` lists the modules
// left in float as compressed-tensors does ("re:" regexes or names).
std::string quantization_config_json(DType format, const std::vector<std::string>& ignore);

// The file names of weight `param`'s parts in `format`.
struct QuantParts {
  std::string data, scales;
};
// Finds the parts of `param` in `files`; false when `param` has no weight_scale (it is stored in float).
bool find_quant_parts(const CheckpointFiles& files, const std::string& param, DType format, QuantParts* out);
// The names zaya quantize writes for `param`.
QuantParts quant_part_names(const std::string& param, DType format);

// The weight `param` of logical shape `shape` from its parts: a view of the stored elements plus the
// scales (converted where the stored dtype differs from the in-memory one). Throws naming the tensors,
// their dtypes and shapes and what was expected.
Tensor load_quantized(const CheckpointFiles& files, const QuantParts& parts, DType format,
                      const Shape& shape);

}  // namespace zaya

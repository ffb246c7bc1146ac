// Quantized checkpoints: quantization_config and the tensors of a quantized weight (see quant_checkpoint.h).
#include "io/quant_checkpoint.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/quant.h"
#include "io/strict_json.h"

namespace zaya {

namespace {

using json = nlohmann::json;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// `X.weight` -> `X`; a stacked expert tensor (no `.weight`) is its own stem.
std::string stem_of(const std::string& param) {
  return ends_with(param, ".weight") ? param.substr(0, param.size() - 7) : param;
}

std::string describe(const TensorInfo& t) {
  return str_cat(t.name, " (", dtype_name(t.dtype), " ", shape_str(t.shape), ")");
}

// A field of the weights args, or null.
const json* field(const json& args, const char* key) {
  auto it = args.find(key);
  return it == args.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

WeightQuant parse_quantization_config(const std::string& json_text, const std::string& where) {
  WeightQuant q;
  if (json_text.empty()) return q;
  const std::string src = where + ": quantization_config";
  json j = parse_json_strict(json_text.data(), json_text.size(), src);
  ZAYA_CHECK(j.is_object(), src, " must be an object, got ", json_type_phrase(j));
  const json* method = field(j, "quant_method");
  ZAYA_CHECK(method && method->is_string() && method->get<std::string>() == "compressed-tensors", src,
             ": quant_method must be \"compressed-tensors\" (the format zaya reads and writes), got ",
             method ? method->dump() : "nothing");
  const json* groups = field(j, "config_groups");
  ZAYA_CHECK(groups && groups->is_object() && !groups->empty(), src,
             ": config_groups must be a non-empty object of quantization schemes");
  const json* fmt = field(j, "format");
  std::string format = fmt && fmt->is_string() ? fmt->get<std::string>() : "";
  DType found = DType::F32;
  for (const auto& [gname, g] : groups->items()) {
    const std::string gsrc = str_cat(src, ".config_groups.", gname);
    ZAYA_CHECK(g.is_object(), gsrc, " must be an object");
    if (const json* gf = field(g, "format"); gf && gf->is_string()) {
      ZAYA_CHECK(format.empty() || format == gf->get<std::string>(), gsrc, ": format ", gf->dump(),
                 " differs from the checkpoint's \"", format, "\"; zaya reads one format per checkpoint");
      format = gf->get<std::string>();
    }
    ZAYA_CHECK(!field(g, "input_activations") && !field(g, "output_activations"), gsrc,
               ": activation quantization is not supported (zaya reads weight-only checkpoints: "
               "input_activations must be null)");
    const json* w = field(g, "weights");
    ZAYA_CHECK(w && w->is_object(), gsrc, ".weights must be an object");
    auto num = [&](const char* k) -> int64_t {
      const json* v = field(*w, k);
      return v && v->is_number_integer() ? v->get<int64_t>() : -1;
    };
    auto str = [&](const char* k) -> std::string {
      const json* v = field(*w, k);
      return v && v->is_string() ? v->get<std::string>() : "";
    };
    const int64_t bits = num("num_bits"), group = num("group_size");
    const std::string type = str("type"), strategy = str("strategy");
    const json* sym = field(*w, "symmetric");
    ZAYA_CHECK(!sym || (sym->is_boolean() && sym->get<bool>()), gsrc,
               ".weights.symmetric must be true (zaya reads symmetric weights, no zero points)");
    DType d;
    if (type == "int" && bits == 8 && strategy == "group" && group == kQuantBlock) {
      d = DType::Q8_0;
    } else if (type == "float" && bits == 8 && strategy == "channel") {
      d = DType::F8_E4M3;
    } else if (type == "float" && bits == 4 && strategy == "group" && group == kQuantBlock) {
      d = DType::MXFP4;
    } else {
      fail(
          str_cat(gsrc, ".weights: ", w->dump(),
                  " is not a scheme zaya runs; expected int 8-bit group 32 (Q8_0), float 8-bit channel (FP8) "
                  "or float 4-bit group 32 (MXFP4)"));
    }
    ZAYA_CHECK(found == DType::F32 || found == d, gsrc, ": a second weight scheme in one checkpoint");
    found = d;
  }
  const char* want = found == DType::Q8_0      ? "int-quantized"
                     : found == DType::F8_E4M3 ? "float-quantized"
                                               : "mxfp4-pack-quantized";
  if (format.empty()) format = want;
  ZAYA_CHECK(format == want || (found != DType::MXFP4 && format == "naive-quantized"), src, ": format \"",
             format, "\" does not store ", quant_scheme_name(found), " weights; expected \"", want, "\"",
             format == "nvfp4-pack-quantized" ? " (NVFP4 is not supported)" : "");
  q.format = found;
  q.format_name = format;
  return q;
}

std::string quantization_config_json(DType format, const std::vector<std::string>& ignore) {
  json w;
  if (format == DType::Q8_0) {
    w = {{"num_bits", 8},     {"type", "int"},    {"strategy", "group"},     {"group_size", kQuantBlock},
         {"symmetric", true}, {"dynamic", false}, {"scale_dtype", "float16"}};
  } else if (format == DType::F8_E4M3) {
    w = {{"num_bits", 8},     {"type", "float"},  {"strategy", "channel"},   {"group_size", nullptr},
         {"symmetric", true}, {"dynamic", false}, {"scale_dtype", "float32"}};
  } else {
    ZAYA_CHECK(format == DType::MXFP4, "no quantization_config for ", dtype_name(format));
    w = {{"num_bits", 4},     {"type", "float"},  {"strategy", "group"},   {"group_size", kQuantBlock},
         {"symmetric", true}, {"dynamic", false}, {"scale_dtype", "uint8"}};
  }
  const char* fmt = format == DType::Q8_0      ? "int-quantized"
                    : format == DType::F8_E4M3 ? "float-quantized"
                                               : "mxfp4-pack-quantized";
  json j = {{"quant_method", "compressed-tensors"},
            {"format", fmt},
            {"quantization_status", "compressed"},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}}, {"weights", w}, {"input_activations", nullptr}, {"format", fmt}}}}},
            {"ignore", ignore},
            {"zaya_scheme", quant_scheme_name(format)}};
  return j.dump();
}

QuantParts quant_part_names(const std::string& param, DType format) {
  const std::string stem = stem_of(param);
  QuantParts p;
  p.data = format == DType::MXFP4 ? stem + ".weight_packed" : param;
  p.scales = stem + ".weight_scale";
  return p;
}

bool find_quant_parts(const CheckpointFiles& files, const std::string& param, DType format, QuantParts* out) {
  const std::string stem = stem_of(param);
  if (!files.has(stem + ".weight_scale")) return false;
  out->scales = stem + ".weight_scale";
  if (format == DType::MXFP4) {
    for (const std::string& c : {stem + ".weight_packed", stem + "_packed", param}) {
      if (files.has(c)) {
        out->data = c;
        return true;
      }
    }
    fail(str_cat(files.source(), ": ", out->scales, " has no packed MXFP4 weights: expected ", stem,
                 ".weight_packed (or ", stem, "_packed, or ", param, ")"));
  }
  ZAYA_CHECK(files.has(param), files.source(), ": ", out->scales, " has no weight: expected ", param);
  out->data = param;
  return true;
}

Tensor load_quantized(const CheckpointFiles& files, const QuantParts& parts, DType format,
                      const Shape& shape) {
  const TensorInfo& di = files.info(parts.data);
  const TensorInfo& si = files.info(parts.scales);
  const std::string where = files.source();
  ZAYA_CHECK(!shape.empty(), where, ": ", parts.data, " is a scalar");
  const int64_t K = shape.back();
  Shape data_shape = shape;
  DType want_data = format == DType::Q8_0 ? DType::I8 : format == DType::F8_E4M3 ? DType::F8_E4M3 : DType::U8;
  if (format == DType::MXFP4) {
    ZAYA_CHECK(K % kQuantBlock == 0, where, ": ", parts.data, ": MXFP4 needs the input dim (", K,
               ") to be whole blocks of ", kQuantBlock);
    data_shape.back() = K / 2;
  }
  if (format == DType::Q8_0) {
    ZAYA_CHECK(K % kQuantBlock == 0, where, ": ", parts.data, ": Q8_0 needs the input dim (", K,
               ") to be whole blocks of ", kQuantBlock);
  }
  ZAYA_CHECK(
      di.dtype == want_data && di.shape == data_shape, where, ": ", describe(di), " should be ",
      dtype_name(want_data), " ", shape_str(data_shape), " for a ", quant_scheme_name(format),
      " weight of shape ", shape_str(shape),
      di.dtype == want_data && di.shape.size() == data_shape.size() && di.shape.back() < data_shape.back()
          ? " (truncated blocks)"
          : "");
  Shape scale_shape = quant_scales_shape(format, shape);
  bool scale_ok = si.shape == scale_shape;
  if (format == DType::F8_E4M3 && !scale_ok) {  // a per-row scale also comes as [.., rows]
    Shape flat(scale_shape.begin(), scale_shape.end() - 1);
    scale_ok = si.shape == flat;
  }
  const bool float_scale = si.dtype == DType::F32 || si.dtype == DType::BF16 || si.dtype == DType::F16;
  const bool dtype_ok = format == DType::MXFP4 ? si.dtype == DType::U8 : float_scale;
  ZAYA_CHECK(scale_ok && dtype_ok, where, ": ", describe(si), " should be ",
             format == DType::MXFP4 ? "U8 (E8M0)" : "F16, BF16 or F32", " ", shape_str(scale_shape),
             " for a ", quant_scheme_name(format), " weight of shape ", shape_str(shape), " (one scale per ",
             format == DType::F8_E4M3 ? "output row" : "block of 32 inputs", ")");

  Tensor data = files.tensor(parts.data);
  Tensor out = Tensor::view(format, shape, data.data, data.owner);
  Tensor scales = files.tensor(parts.scales);
  const DType mem = quant_scales_dtype(format);
  if (scales.dtype != mem) {
    Tensor f = scales.to(DType::F32);
    if (mem == DType::F16) {
      Tensor h = Tensor::empty(DType::F16, scale_shape);
      auto* hp = static_cast<uint16_t*>(h.data);
      for (int64_t i = 0; i < f.numel(); i++) hp[i] = f32_to_f16(f.f32()[i]);
      scales = h;
    } else {
      scales = f;
    }
  }
  scales.shape = scale_shape;
  out.scales = std::make_shared<const Tensor>(std::move(scales));
  check_quantized(out, where + ": " + parts.data);
  return out;
}

}  // namespace zaya

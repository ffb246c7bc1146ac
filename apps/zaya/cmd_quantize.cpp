// zaya quantize: a Hugging Face ZAYA1 checkpoint (native layout, any float dtype) rewritten with quantized
// weights, in the compressed-tensors layouts of io/quant_checkpoint.h, with config.json's
// quantization_config saying how. Every command that loads a model reads the result.
//
//   --scheme q8_0   int8, one fp16 scale per 32 inputs (8.5 bits a weight)
//   --scheme mxfp4  E2M1, one E8M0 scale per 32 inputs (4.25 bits a weight)
//   --scheme fp8    float8 e4m3, one fp32 scale per output row (Zyphra's FP8 experts)
//   --what experts  the expert matrices only (as Zyphra's published checkpoints: everything else bf16)
//   --what all      also the attention projections, the router MLP and the embedding / head
//
// Norms, biases, residual scales, convolutions, temperatures and balancing biases stay as stored. A matrix
// whose input dim is not whole blocks of 32 (Q8_0, MXFP4) stays as stored, with a note. The weights are
// streamed: each output tensor is quantized straight into the mapped output file from the mapped input, so
// an 8B checkpoint needs no more memory than its pages in flight.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli.h"
#include "command.h"
#include "core/error.h"
#include "core/quant.h"
#include "core/threads.h"
#include "io/checkpoint_files.h"
#include "io/output_dir.h"
#include "io/quant_checkpoint.h"
#include "io/safetensors_writer.h"
#include "io/strict_json.h"
#include "model/zaya-config.h"
#include "model/zaya-weights.h"

namespace {

namespace fs = std::filesystem;
using zaya::DType;
using zaya::Tensor;

// What one output tensor is made of.
struct Job {
  enum Kind { Copy, Data, Scales } kind = Copy;
  std::string source;  // the input tensor
  DType format = DType::F32;
};

// Quantizes rows of `src` ([.., rows, K], any float dtype) into the `kind` part at `dst`, rows in parallel.
void quantize_part(void* dst, const Tensor& src, DType format, Job::Kind kind) {
  const int64_t K = src.shape.back(), rows = src.numel() / K;
  const int64_t nb = format == DType::F8_E4M3 ? 1 : K / zaya::kQuantBlock;
  const size_t row_bytes = zaya::dtype_row_bytes(format, K);
  const size_t scale_bytes = size_t(nb) * zaya::dtype_size(zaya::quant_scales_dtype(format));
#pragma omp parallel
  {
    std::vector<float> x(static_cast<size_t>(K));
    std::vector<uint8_t> q(row_bytes), s(scale_bytes);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
      zaya::convert_to_f32(x.data(),
                           static_cast<const char*>(src.data) + size_t(r * K) * zaya::dtype_size(src.dtype),
                           src.dtype, K);
      uint8_t* qd = kind == Job::Data ? static_cast<uint8_t*>(dst) + size_t(r) * row_bytes : q.data();
      uint8_t* sd = kind == Job::Scales ? static_cast<uint8_t*>(dst) + size_t(r) * scale_bytes : s.data();
      if (format == DType::Q8_0) {
        zaya::quantize_row_q8_0(reinterpret_cast<int8_t*>(qd), reinterpret_cast<uint16_t*>(sd), x.data(), K);
      } else if (format == DType::MXFP4) {
        zaya::quantize_row_mxfp4(qd, sd, x.data(), K);
      } else {
        zaya::quantize_row_f8e4m3(qd, reinterpret_cast<float*>(sd), x.data(), K);
      }
    }
  }
}

std::string human_bytes(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, b >= 1e9 ? "%.2f GB" : "%.1f MB", b >= 1e9 ? b / 1e9 : b / 1e6);
  return buf;
}

int cmd_quantize(int argc, char** argv) {
  CLI::App app{"Quantize a ZAYA1 checkpoint's weights (Q8_0, MXFP4 or FP8) into a new checkpoint directory"};
  std::string model_dir, out_dir, scheme, what = "experts";
  double max_shard_mb = 5000.0;
  bool overwrite = false;
  app.add_option("--model", model_dir, "input checkpoint directory (config.json + safetensors)")->required();
  app.add_option("--out", out_dir, "output checkpoint directory")->required();
  app.add_option("--scheme", scheme, "q8_0 | mxfp4 | fp8")
      ->required()
      ->check(CLI::IsMember({"q8_0", "mxfp4", "fp8"}));
  app.add_option("--what", what, "experts (default: the expert matrices) | all (every matrix)")
      ->check(CLI::IsMember({"experts", "all"}));
  app.add_option("--max-shard-mb", max_shard_mb, "shard above this many MB per file (default 5000)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--overwrite", overwrite,
               "write into a non-empty --out (its checkpoint files are removed first)");
  ZAYA_PARSE(app, argc, argv);
  const auto t0 = std::chrono::steady_clock::now();

  DType format;
  ZAYA_CHECK(zaya::quant_scheme_from_name(scheme, &format), "--scheme ", scheme, ": unknown");
  const std::string config_path = model_dir + "/config.json";
  ZAYA_CHECK(fs::is_regular_file(config_path), "--model ", model_dir, ": no config.json");
  zaya::ZayaConfig cfg = zaya::load_config(config_path);
  ZAYA_CHECK(cfg.layout == zaya::CheckpointLayout::Native, config_path,
             ": legacy layout; quantize a native checkpoint (convert it with `zaya export` or the trainer)");
  ZAYA_CHECK(cfg.quantization_config.empty(), config_path,
             ": the checkpoint is already quantized (quantization_config); quantize its float original");
  ZAYA_CHECK(fs::weakly_canonical(model_dir) != fs::weakly_canonical(out_dir),
             "--out must differ from --model");
  zaya::check_output_dir(out_dir, "--out", overwrite);

  const zaya::CheckpointFiles files = zaya::CheckpointFiles::open(model_dir);
  zaya::ZayaWeights slots;
  const std::vector<zaya::NamedParam> params = zaya::named_params(cfg, slots);
  std::map<std::string, const zaya::NamedParam*> param_of;
  for (const auto& p : params) param_of[p.name] = &p;

  std::vector<zaya::TensorSpec> specs;
  std::map<std::string, Job> jobs;
  std::vector<std::string> kept_matrices;
  double in_bytes = 0, out_bytes = 0;
  int64_t quantized = 0;
  for (const std::string& name : files.names()) {
    const zaya::TensorInfo& info = files.info(name);
    in_bytes += double(info.nbytes());
    auto it = param_of.find(name);
    const bool matrix = it != param_of.end() && it->second->is_matrix;
    const bool wanted = matrix && (what == "all" || name.find(".experts.") != std::string::npos);
    const int64_t K = info.shape.empty() ? 0 : info.shape.back();
    const bool fits = format == DType::F8_E4M3 || K % zaya::kQuantBlock == 0;
    ZAYA_CHECK(!wanted || info.dtype == DType::F32 || info.dtype == DType::BF16 || info.dtype == DType::F16,
               files.source(), ": ", name, " is ", zaya::dtype_name(info.dtype), "; expected a float dtype");
    if (wanted && fits && info.shape.size() >= 2) {
      const zaya::QuantParts parts = zaya::quant_part_names(name, format);
      zaya::Shape data_shape = info.shape;
      if (format == DType::MXFP4) data_shape.back() /= 2;
      const DType data_dtype = format == DType::Q8_0    ? DType::I8
                               : format == DType::MXFP4 ? DType::U8
                                                        : DType::F8_E4M3;
      specs.push_back({parts.data, data_dtype, data_shape});
      specs.push_back(
          {parts.scales, zaya::quant_scales_dtype(format), zaya::quant_scales_shape(format, info.shape)});
      jobs[parts.data] = {Job::Data, name, format};
      jobs[parts.scales] = {Job::Scales, name, format};
      quantized++;
    } else {
      if (wanted) kept_matrices.push_back(name);
      specs.push_back({name, info.dtype, info.shape});
      jobs[name] = {Job::Copy, name, DType::F32};
    }
  }
  ZAYA_CHECK(quantized > 0, model_dir, ": no matrix to quantize with --what ", what);
  for (const auto& s : specs) out_bytes += double(s.nbytes());
  for (const std::string& n : kept_matrices)
    std::fprintf(stderr, "quantize: %s stays as stored: its input dim is not whole blocks of %d\n", n.c_str(),
                 int(zaya::kQuantBlock));

  const std::vector<std::string> removed = zaya::remove_model_files(out_dir);
  if (!removed.empty())
    std::fprintf(stderr, "quantize: --overwrite: removed %zu files from %s\n", removed.size(),
                 out_dir.c_str());
  fs::create_directories(out_dir);

  // Progress on long runs (an 8B checkpoint is minutes): tensors done, bytes written, ETA.
  size_t done = 0;
  double done_bytes = 0;
  auto last = std::chrono::steady_clock::now();
  zaya::write_safetensors_sharded(
      out_dir, specs,
      [&](const zaya::TensorSpec& s, void* dst) {
        const Job& j = jobs.at(s.name);
        const Tensor src = files.tensor(j.source);
        if (j.kind == Job::Copy) {
          std::memcpy(dst, src.data, src.nbytes());
        } else {
          quantize_part(dst, src, j.format, j.kind);
        }
        done++;
        done_bytes += double(s.nbytes());
        const auto now = std::chrono::steady_clock::now();
        if (std::chrono::duration<double>(now - last).count() >= 2.0 || done == specs.size()) {
          last = now;
          const double el = std::chrono::duration<double>(now - t0).count();
          std::fprintf(stderr, "quantize: %zu/%zu tensors, %s of %s written, %.0f s, ETA %.0f s\n", done,
                       specs.size(), human_bytes(done_bytes).c_str(), human_bytes(out_bytes).c_str(), el,
                       el / std::max(done_bytes, 1.0) * (out_bytes - done_bytes));
        }
      },
      uint64_t(max_shard_mb * 1e6), {{"format", "pt"}});

  // config.json: the input's own text (every field kept) plus quantization_config.
  std::ifstream cf(config_path);
  const std::string text((std::istreambuf_iterator<char>(cf)), std::istreambuf_iterator<char>());
  nlohmann::json cj = zaya::parse_json_strict(text.data(), text.size(), config_path);
  std::vector<std::string> ignore;
  if (what == "experts") ignore.push_back("re:^(?!.*experts).*$");
  for (const std::string& n : kept_matrices) ignore.push_back(n.size() > 7 ? n.substr(0, n.size() - 7) : n);
  cj["quantization_config"] = nlohmann::json::parse(zaya::quantization_config_json(format, ignore));
  {
    std::ofstream f(out_dir + "/config.json.tmp");
    f << cj.dump(2) << "\n";
    ZAYA_CHECK(f.good(), out_dir, "/config.json: write failed");
  }
  fs::rename(out_dir + "/config.json.tmp", out_dir + "/config.json");
  // The rest of the model directory (tokenizer, chat template, generation config) comes along.
  for (const auto& e : fs::directory_iterator(model_dir)) {
    const std::string n = e.path().filename().string();
    if (!e.is_regular_file() || n == "config.json" || n == "model.safetensors.index.json" ||
        e.path().extension() == ".safetensors")
      continue;
    fs::copy_file(e.path(), fs::path(out_dir) / n, fs::copy_options::overwrite_existing);
  }
  const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "quantize: %s %s: %ld matrices quantized, %s -> %s (%.2fx smaller) in %.1f s -> %s\n",
               scheme.c_str(), what.c_str(), long(quantized), human_bytes(in_bytes).c_str(),
               human_bytes(out_bytes).c_str(), in_bytes / out_bytes, el, out_dir.c_str());
  return 0;
}

zaya::app::Register reg("quantize", "quantize a checkpoint's weights (q8_0, mxfp4, fp8)", cmd_quantize);

}  // namespace

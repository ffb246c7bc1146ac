// zaya generate: cached generation. With --input (token ids) it prints {"new_tokens": [[...], ...]} (the
// parity contract against the golden generation); with --prompt and a tokenizer it streams text.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "command.h"
#include "core/error.h"
#include "io/model_inputs.h"
#include "load_flags.h"
#include "model/generate.h"
#include "tokenizer/tokenizer.h"

namespace {

int cmd_generate(int argc, char** argv) {
  CLI::App app{"Generate tokens with the CCA cache (prefill, then one token per step)"};
  std::string model_dir, input, prompt, tokenizer_path, dtype = "fp32";
  zaya::GenerateOptions go;
  go.max_new_tokens = -1;
  bool greedy = false, json_out = false, ignore_eos = false, no_special = false;
  zaya::app::LoadFlags semantics;
  app.add_option("--model", model_dir, "HF checkpoint directory")->required();
  auto* in_opt = app.add_option("--input", input, "INPUTS.json; generates for generation.prompt_ids");
  app.add_option("--prompt", prompt, "prompt text (needs a tokenizer)")->excludes(in_opt);
  app.add_option("--tokenizer", tokenizer_path, "tokenizer.json (default: MODEL/tokenizer.json)");
  app.add_option("--max-new-tokens", go.max_new_tokens,
                 "tokens to generate per row (default: the input's, else 64)");
  app.add_flag("--greedy", greedy, "argmax decoding (default when no --temperature is given)");
  app.add_option("--temperature", go.sampler.temperature, "sampling temperature");
  app.add_option("--top-k", go.sampler.top_k, "sample among the k most likely tokens (0 = off)");
  app.add_option("--top-p", go.sampler.top_p, "nucleus sampling mass (1 = off)");
  app.add_option("--seed", go.sampler.seed, "sampling seed");
  app.add_option("--prefill-chunk", go.prefill_chunk, "prefill in chunks of this many tokens (0 = one call)");
  app.add_flag("--ignore-eos", ignore_eos, "do not stop at the end-of-sequence token");
  app.add_flag("--json", json_out, "print {\"new_tokens\": [[...]]} (and \"text\" with a tokenizer)");
  app.add_flag("--no-special", no_special, "do not add <bos> when encoding --prompt");
  app.add_option("--dtype", dtype, "GEMM compute dtype")->check(CLI::IsMember({"fp32", "bf16"}));
  zaya::app::add_load_flags(app, semantics);
  ZAYA_PARSE(app, argc, argv);
  ZAYA_CHECK(!input.empty() || !prompt.empty(), "zaya generate needs --input INPUTS.json or --prompt TEXT");

  auto temp_given = app.count("--temperature") > 0;
  go.sampler.greedy = greedy || !temp_given;
  go.stop_at_eos = !ignore_eos;
  zaya::LoadOptions lo;
  lo.compute = dtype == "bf16" ? zaya::DType::BF16 : zaya::DType::F32;
  semantics.apply(lo);
  auto t_load = std::chrono::steady_clock::now();
  zaya::ZayaModel model = zaya::ZayaModel::load(model_dir, lo);
  std::fprintf(stderr, "load: %.3f s (%.3f B parameters, %s GEMMs)\n",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count(),
               model.cfg.num_params() / 1e9, dtype.c_str());

  std::vector<int32_t> ids;
  int64_t B = 1, S = 0;
  std::unique_ptr<zaya::Tokenizer> tok;
  if (tokenizer_path.empty() && std::filesystem::exists(model_dir + "/tokenizer.json"))
    tokenizer_path = model_dir + "/tokenizer.json";
  if (!tokenizer_path.empty()) tok = std::make_unique<zaya::Tokenizer>(zaya::Tokenizer::load(tokenizer_path));
  if (!input.empty()) {
    zaya::ModelInputs in = zaya::load_model_inputs(input);
    ZAYA_CHECK(in.gen_B > 0, input, ": generation.prompt_ids is required for zaya generate --input");
    ids = in.prompt_ids;
    B = in.gen_B;
    S = in.gen_S;
    if (go.max_new_tokens < 0) go.max_new_tokens = in.max_new_tokens > 0 ? in.max_new_tokens : 64;
  } else {
    ZAYA_CHECK(tok, "--prompt needs a tokenizer: pass --tokenizer FILE or put tokenizer.json in ", model_dir);
    ids = tok->encode(prompt, !no_special);
    S = int64_t(ids.size());
    ZAYA_CHECK(S > 0, "the prompt encodes to no tokens");
    if (go.max_new_tokens < 0) go.max_new_tokens = 64;
  }

  // Streaming text for a single --prompt row when printing plain text.
  std::unique_ptr<zaya::StreamDecoder> stream;
  if (tok && !json_out && B == 1) {
    stream = std::make_unique<zaya::StreamDecoder>(*tok, true);
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  // A model's vocabulary may be padded past the tokenizer's (ids the tokenizer has no text for): those ids
  // print as nothing, as the server shows them.
  auto known = [&](const std::vector<int32_t>& row) {
    std::vector<int32_t> v;
    for (int32_t id : row)
      if (id >= 0 && id < tok->vocab_size()) v.push_back(id);
    return v;
  };
  auto on_token = [&](int64_t, int32_t id) {
    if (!stream || id >= tok->vocab_size()) return;
    std::fputs(stream->push(id).c_str(), stdout);
    std::fflush(stdout);
  };
  zaya::GenerateStats st;
  auto out = zaya::generate(model, ids.data(), B, S, go, on_token, nullptr, &st);
  if (stream) std::printf("%s\n", stream->flush().c_str());

  if (json_out) {
    nlohmann::json j;
    j["new_tokens"] = out;
    if (tok) {
      std::vector<std::string> texts;
      for (const auto& row : out) texts.push_back(tok->decode(known(row), true));
      j["text"] = texts;
    }
    std::printf("%s\n", j.dump().c_str());
  } else if (!stream) {
    for (const auto& row : out) {
      for (size_t i = 0; i < row.size(); i++) std::printf("%s%d", i ? " " : "", row[i]);
      std::printf("\n");
    }
  }
  // The text ends with its newline on stdout before the timing line goes to stderr (same order in a file).
  std::fflush(stdout);
  std::fprintf(stderr,
               "prefill: %ld tokens in %.3f s (%.1f tok/s); decode: %ld tokens in %.3f s (%.2f tok/s)\n",
               long(st.prompt_tokens), st.prefill_s, st.prompt_tokens / std::max(st.prefill_s, 1e-9),
               long(st.new_tokens), st.decode_s, st.new_tokens / std::max(st.decode_s, 1e-9));
  return 0;
}

zaya::app::Register reg("generate", "generate text or token ids with the CCA cache", cmd_generate);

}  // namespace

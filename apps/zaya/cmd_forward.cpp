// zaya forward: the parity tool. Runs one forward over INPUTS.json and writes logits, loss, router choices
// and hidden states to a safetensors file (contract: tests/data/golden/README.md; keep it stable).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli.h"
#include "command.h"
#include "core/error.h"
#include "io/model_inputs.h"
#include "io/safetensors_writer.h"
#include "kernels/loss.h"
#include "load_flags.h"
#include "model/zaya-backward.h"
#include "model/zaya.h"

namespace {

int cmd_forward(int argc, char** argv) {
  CLI::App app{"Run one forward pass over INPUTS.json and write logits/loss/router choices/hidden states"};
  std::string model_dir, input, output, dtype = "fp32";
  bool grads = false;
  zaya::app::LoadFlags semantics;
  app.add_option("--model", model_dir, "HF checkpoint directory (config.json + safetensors)")->required();
  app.add_option("--input", input, "INPUTS.json with input_ids [B][S], optional targets and attention_mask")
      ->required();
  app.add_option("--output", output, "output .safetensors file")->required();
  app.add_option("--dtype", dtype, "compute dtype of the GEMMs")->check(CLI::IsMember({"fp32", "bf16"}));
  zaya::app::add_load_flags(app, semantics);
  app.add_flag(
      "--grads", grads,
      "also write grad.<hf-name> (F32) for every parameter: d(mean CE loss)/d(param), needs targets");
  ZAYA_PARSE(app, argc, argv);

  zaya::ModelInputs in = zaya::load_model_inputs(input);
  ZAYA_CHECK(in.B > 0, input, ": 'input_ids' is required for zaya forward");
  ZAYA_CHECK(!grads || !in.targets.empty(), input,
             ": --grads needs 'targets' (the token each position predicts)");
  zaya::LoadOptions lo;
  lo.compute = dtype == "bf16" ? zaya::DType::BF16 : zaya::DType::F32;
  semantics.apply(lo);
  zaya::ZayaModel model = zaya::ZayaModel::load(model_dir, lo);
  const auto& c = model.cfg;

  zaya::ZayaCache cache(c, in.B);
  zaya::ForwardOptions opt;
  opt.tap_hidden = opt.tap_router = true;
  zaya::ForwardResult res;
  zaya::ForwardScratch scratch;
  zaya::Activations acts;
  if (grads) opt.record = &acts;
  zaya::zaya_forward(model, cache, in.input_ids.data(),
                     in.attention_mask.empty() ? nullptr : in.attention_mask.data(), in.B, in.S, opt, res,
                     scratch);

  const int64_t B = in.B, S = in.S, L = c.num_hidden_layers, H = c.hidden_size, V = c.vocab_size;
  std::vector<std::pair<std::string, zaya::Tensor>> out;
  auto put = [&](const std::string& name, zaya::DType dt, const zaya::Shape& shape, const void* src) {
    zaya::Tensor t = zaya::Tensor::empty(dt, shape);
    std::memcpy(t.data, src, t.nbytes());
    out.emplace_back(name, t);
  };
  put("logits", zaya::DType::F32, {B, S, V}, res.logits.data());
  put("hidden_states", zaya::DType::F32, {L + 2, B, S, H}, res.hidden.data());
  put("router.choice", zaya::DType::I32, {L, B, S, 1}, res.choice.data());
  put("router.logits", zaya::DType::F32, {L, B, S, c.num_experts + 1}, res.router_logits.data());
  if (!in.targets.empty()) {
    int64_t count = 0;
    std::vector<float> per_token(B * S);
    float loss = float(zaya::cross_entropy_forward(per_token.data(), res.logits.data(), in.targets.data(),
                                                   B * S, V, &count));
    put("loss", zaya::DType::F32, {}, &loss);
    put("per_token_loss", zaya::DType::F32, {B, S}, per_token.data());
    std::fprintf(stderr, "loss %.6f over %ld targets\n", loss, long(count));
  }
  if (grads) {
    zaya::ZayaGrads g = zaya::ZayaGrads::zeros(c);
    zaya::zaya_backward(model, acts, in.targets.data(), g);
    for (const zaya::NamedParam& p : g.named(c))
      put("grad." + p.name, zaya::DType::F32, p.shape, p.slot->data);
  }
  zaya::write_safetensors(output, out, {{"format", "zaya-forward"}, {"dtype", dtype}});
  return 0;
}

zaya::app::Register reg("forward",
                        "run one forward pass (parity tool): logits, loss, router choices, hidden states",
                        cmd_forward);

}  // namespace

"""PyTorch reference trajectory for zaya.cpp training (src/train/train_step.h): 10 optimizer steps of the full
ZAYA1 recipe from the golden checkpoint, written to tests/data/train_traj/ and checked by
tests/train_traj_test.cpp.

Regenerate (needs torch, i.e. Debian's /usr/bin/python3, not the pyenv python3):

    /usr/bin/python3 tools/reference/train_ref.py                 # both variants (about 2 minutes on 2 cores)
    /usr/bin/python3 tools/reference/train_ref.py adamw_accum2    # one variant
    /usr/bin/python3 tools/reference/train_ref.py --fp32-to DIR   # the same in float32, written to DIR: how
                                                                  # far fp32 rounding alone moves the trajectory

What one step does here (the same as zaya.cpp's train_step):
  1. forward + autograd backward of every micro-batch of the step; each micro-batch's summed per-token CE is
     divided by the step's whole count of targets (-100 excluded), so the accumulated gradient is exactly that
     of the mean over every counted token of the step; the reported loss is that mean.
  2. the expert choice of every token and layer (index E = skip) is counted over all micro-batches: [L, E+1].
  3. global-norm clipping (fp64 norm; scale max/(norm + 1e-6) only when norm > max, torch's formula).
  4. lr of update `step - 1` from the warmup + cosine schedule (src/train/schedule.h).
  5. the optimizer update: the ZAYA1 split (Muon for 2-D hidden matrices and for each expert matrix on its own,
     AdamW for the rest; optim_ref.py's Muon, torch.optim.AdamW) or AdamW everywhere.
  6. the balancer update (Adam rule on balancing_biases, src/train/balancer.h) from the step's counts: it changes
     the next step's routing.

Precision: the model, its gradients and the optimizer run in float64 so that the reference is the more exact side
of the comparison (zaya.cpp runs fp32). The routing itself follows the fp32 rule of the model (fp32 probabilities
+ fp32 balancing biases), and the balancer mirrors zaya.cpp's fp32 state exactly, so both sides take the same
decisions unless two classes are within float rounding of each other; `min_routing_gap` in the output records how
close the nearest decision came.

Variants (one file pair each):
  zaya1_split   one micro-batch of 2 x 32 per step, Muon + AdamW split, weight decay, clipping at a threshold that
                clips some of the steps but not all.
  adamw_accum2  all-AdamW, gradient accumulation 2: two micro-batches of 2 x 32 per step with unequal target counts.

ADAMW_EPS_NOTE: with AdamW's usual eps = 1e-8 the all-AdamW trajectory is ill-conditioned in fp32, whatever the
implementation: the first AdamW update is lr * g / (|g| + eps), about lr * sign(g), so a gradient entry of ~1e-8
whose fp32 rounding error is comparable to itself moves its weight by +-lr at random. Measured on this variant:
PyTorch's own fp32 run differs from its fp64 run by 1.3e-5 in loss at step 3, 1.7e-5 at step 4, and a routing
near-tie (margin 1.2e-5) flips at step 5 (loss off by 1.5e-3); zaya.cpp fp32 did the same (3.0e-5 at step 4, the
same flip at step 5). With eps = 1e-6 such entries take a proportional step instead, and PyTorch fp32 vs fp64 agree
within 1e-6 over all 10 steps. The zaya1_split variant keeps eps = 1e-8: there the AdamW tensors (embedding, norms,
biases, scales) have no such near-zero gradients, and it matches within 1e-6.

Outputs, per variant <v>:
  <v>.safetensors  the batches: step<k>.micro<m>.input_ids / .targets, I32 [2, 32] (k = 1..10), and a strided
                   sample of every final parameter: final.<name>, F32 (flattened, elements [0::stride], stride in
                   the JSON), the full tensor when it is small.
  <v>.json         the configuration, per step loss / grad_norm / lr / clipped / counts / min_routing_gap, and per
                   parameter the stride and full-tensor statistics of the final value (sum, sum |x|, max |x|).
"""

import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import optim_ref  # noqa: E402
import zaya_ref  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
GOLDEN = os.path.join(ROOT, "tests", "data", "golden", "zaya1_like")
OUT = os.path.join(ROOT, "tests", "data", "train_traj")

STEPS = 10
ROWS, SEQ = 2, 32
SAMPLE_STRIDE = 16  # final parameters with more than SAMPLE_FULL elements keep every 16th element
SAMPLE_FULL = 1024

# The hyper-parameters of each variant; tests/train_traj_test.cpp reads them from <v>.json.
COMMON = dict(
    lr=4e-3,
    weight_decay=0.1,
    adamw=dict(betas=[0.9, 0.95], eps=1e-8),
    muon=dict(momentum=0.95, nesterov=True, ns_steps=5, ns_coefficients=[3.4445, -4.7750, 2.0315],
              rms_match_scale=0.2),
    schedule=dict(kind="cosine", warmup_steps=3, total_steps=STEPS, min_lr_fraction=0.1),
    balancer=dict(lr=1e-2, betas=[0.9, 0.99], eps=1e-8),
)
VARIANTS = {
    "zaya1_split": dict(COMMON, optimizer="zaya1_split", grad_clip=13.0, grad_accum=1, data_seed=11,
                        ignored_per_micro=[3]),
    # AdamW's eps is 1e-6 here, not 1e-8: see ADAMW_EPS_NOTE.
    "adamw_accum2": dict(COMMON, optimizer="adamw", grad_clip=8.0, grad_accum=2, data_seed=22,
                         ignored_per_micro=[2, 9], adamw=dict(betas=[0.9, 0.95], eps=1e-6)),
}


# ---------------------------------------------------------------------------------------------------------------
# Data


def make_batches(cfg, vocab):
    """STEPS x grad_accum micro-batches: (input_ids, targets) int32 [ROWS, SEQ]. Each row is SEQ + 1 tokens of a
    noisy bigram chain (a fixed random successor with probability 0.75, else uniform over the vocabulary), so the
    loss has something to learn; targets are the next tokens, a few of them -100."""
    rng = np.random.RandomState(cfg["data_seed"])
    successor = rng.randint(0, vocab, size=vocab)
    batches = []
    for _ in range(STEPS):
        micro = []
        for ignored in cfg["ignored_per_micro"]:
            rows = np.zeros((ROWS, SEQ + 1), dtype=np.int64)
            for r in range(ROWS):
                tok = rng.randint(0, vocab)
                for t in range(SEQ + 1):
                    rows[r, t] = tok
                    tok = successor[tok] if rng.rand() < 0.75 else rng.randint(0, vocab)
            ids, targets = rows[:, :SEQ].copy(), rows[:, 1:].copy()
            flat = rng.choice(ROWS * SEQ, size=ignored, replace=False)
            targets.reshape(-1)[flat] = -100
            micro.append((ids.astype(np.int32), targets.astype(np.int32)))
        batches.append(micro)
    return batches


# ---------------------------------------------------------------------------------------------------------------
# Recipe pieces (each mirrors the src/train file named)


def lr_at(s, lr, step):
    """src/train/schedule.cpp, warmup + cosine only."""
    if step < s["warmup_steps"]:
        return lr * (step + 1) / s["warmup_steps"]
    min_lr = s["min_lr_fraction"] * lr
    if step >= s["total_steps"]:
        return min_lr
    p = (step - s["warmup_steps"]) / (s["total_steps"] - s["warmup_steps"])
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))


def zaya_group(name, shape):
    """src/train/param_groups.cpp zaya_param_group: the ZAYA1 split by name (order matters)."""
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return "embedding"
    if ".mlp.experts." in name:
        return "expert"
    if ".conv_qk_" in name and name.endswith(".weight"):
        return "conv"
    if name.endswith("qk_norm.temp"):
        return "temperature"
    if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
        return "norm"
    if name.endswith(".bias") or name.endswith("_bias"):
        return "bias"
    if name.endswith("_scale"):
        return "scale"
    if name.endswith(".weight") and len(shape) == 2:
        return "matrix"
    raise ValueError(f"parameter {name} {list(shape)}: no ZAYA1 group")


def clip_grad_norm(params, max_norm):
    """src/train/clip.cpp: returns the fp64 global norm before clipping; scales only when norm > max_norm."""
    norm = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in params))
    clipped = max_norm > 0 and norm > max_norm
    if clipped:
        scale = max_norm / (norm + 1e-6)
        for p in params:
            p.grad.mul_(scale)
    return norm, clipped


class Balancer:
    """src/train/balancer.cpp, Adam rule, skip class fixed. Mirrors its fp32 state (m, v, bias) operation by
    operation, so both sides hold bit-identical biases when they saw the same counts."""

    def __init__(self, layers, experts, cfg):
        self.E = experts
        self.cfg = cfg
        self.m = np.zeros((layers, experts), dtype=np.float32)
        self.v = np.zeros((layers, experts), dtype=np.float32)
        self.t = 0

    def update(self, counts, biases):
        """counts [L, E+1] int; biases: per layer the fp32 balancing_biases buffer (E+1), changed in place."""
        E, c = self.E, self.cfg
        b1, b2 = np.float32(c["betas"][0]), np.float32(c["betas"][1])
        self.t += 1
        # C++ rounds the config's betas to float first; the bias corrections are pow() of those floats
        bc1 = 1.0 - float(b1) ** self.t
        bc2 = 1.0 - float(b2) ** self.t
        for l, bias in enumerate(biases):
            routed = int(counts[l, :E].sum())
            if routed == 0:
                continue
            bnp = bias.numpy()
            for e in range(E):
                err = counts[l, e] / routed - 1.0 / E
                m = np.float32(b1 * self.m[l, e]) + np.float32((np.float32(1) - b1) * np.float32(err))
                v = np.float32(b2 * self.v[l, e]) + np.float32((np.float32(1) - b2) * np.float32(err * err))
                self.m[l, e], self.v[l, e] = m, v
                m_hat, v_hat = float(m) / bc1, float(v) / bc2
                delta = float(np.float32(c["lr"])) * m_hat / (math.sqrt(v_hat) + float(np.float32(c["eps"])))
                bnp[e] = np.float32(bnp[e] - np.float32(delta))


class Optimizer:
    """The ZAYA1 split (Muon: matrix + expert groups, each expert matrix its own Muon matrix; AdamW: the rest,
    weight decay on >= 2-D tensors only) or AdamW everywhere."""

    def __init__(self, named, cfg):
        self.cfg = cfg
        self.muon, adamw_decay, adamw_plain = [], [], []
        for name, p in named:
            g = zaya_group(name, p.shape)
            if cfg["optimizer"] == "zaya1_split" and g in ("matrix", "expert"):
                self.muon.append(p)
            elif g in ("matrix", "expert", "embedding", "conv"):
                adamw_decay.append(p)
            else:
                adamw_plain.append(p)
        a = cfg["adamw"]
        groups = [dict(params=adamw_decay, weight_decay=cfg["weight_decay"])]
        if adamw_plain:
            groups.append(dict(params=adamw_plain, weight_decay=0.0))
        self.adamw = torch.optim.AdamW(groups, lr=cfg["lr"], betas=tuple(a["betas"]), eps=a["eps"])
        self.buffers = [torch.zeros_like(p) for p in self.muon]

    @torch.no_grad()
    def step(self, lr):
        m = self.cfg["muon"]
        muon_cfg = dict(lr=lr, weight_decay=self.cfg["weight_decay"], momentum=m["momentum"], ns_steps=m["ns_steps"],
                        abc=tuple(m["ns_coefficients"]), rms_scale=m["rms_match_scale"])
        for p, buf in zip(self.muon, self.buffers):
            optim_ref.muon_step(p.data, p.grad, buf, m["nesterov"], muon_cfg)
        for group in self.adamw.param_groups:
            group["lr"] = lr
        self.adamw.step()


# ---------------------------------------------------------------------------------------------------------------
# The trajectory


def routing_gap(model_out, biases):
    """Smallest gap between the chosen class's biased score and the runner-up over every token and layer: how
    close a routing decision came to flipping (fp32 scores, as the model decides)."""
    gap = math.inf
    for logits, bias in zip(model_out["router_logits"], biases):
        scores = torch.softmax(logits.detach(), dim=-1).float() + bias
        top2 = torch.topk(scores, 2, dim=-1).values
        gap = min(gap, float((top2[..., 0] - top2[..., 1]).min()))
    return gap


def run_variant(name, cfg, dtype=torch.float64, out_dir=OUT):
    torch.manual_seed(0)
    model = zaya_ref.load_pretrained(GOLDEN, dtype=dtype)
    model.train()
    mc = model.config
    L, E = mc.num_hidden_layers, mc.num_experts
    named = [(n, p) for n, p in model.named_parameters()]  # tied lm_head appears once, as the embedding
    params = [p for _, p in named]
    biases = [layer.mlp.gate.balancing_biases for layer in model.model.layers]
    optim = Optimizer(named, cfg)
    balancer = Balancer(L, E, cfg["balancer"])
    batches = make_batches(cfg, mc.vocab_size)

    steps = []
    for step in range(1, STEPS + 1):
        micro = batches[step - 1]
        for p in params:
            p.grad = None
        step_targets = sum(int((t != -100).sum()) for _, t in micro)
        counts = np.zeros((L, E + 1), dtype=np.int64)
        loss = 0.0
        gap = math.inf
        for ids, targets in micro:
            out = model(torch.from_numpy(ids.astype(np.int64)), targets=torch.from_numpy(targets.astype(np.int64)))
            micro_loss = out["per_token_loss"].sum() / step_targets
            micro_loss.backward()
            loss += float(micro_loss)
            for l, choice in enumerate(out["router_choice"]):
                counts[l] += np.bincount(choice.reshape(-1).numpy(), minlength=E + 1)
            gap = min(gap, routing_gap(out, biases))
        norm, clipped = clip_grad_norm(params, cfg["grad_clip"])
        lr = lr_at(cfg["schedule"], cfg["lr"], step - 1)
        optim.step(lr)
        with torch.no_grad():
            balancer.update(counts, biases)
        steps.append(dict(step=step, loss=loss, grad_norm=norm, lr=lr, clipped=clipped, counts=counts.tolist(),
                          min_routing_gap=gap))
        print(f"{name} step {step:2d}: loss {loss:.6f} gnorm {norm:.4f}{' (clipped)' if clipped else ''} "
              f"lr {lr:.3e} gap {gap:.2e}")

    tensors, final = {}, {}
    for k, micro in enumerate(batches, 1):
        for m, (ids, targets) in enumerate(micro):
            tensors[f"step{k}.micro{m}.input_ids"] = torch.from_numpy(ids)
            tensors[f"step{k}.micro{m}.targets"] = torch.from_numpy(targets)
    state = zaya_ref.native_state(model)
    for pname, t in state.items():
        flat = t.double().reshape(-1)
        stride = 1 if flat.numel() <= SAMPLE_FULL else SAMPLE_STRIDE
        tensors[f"final.{pname}"] = flat[::stride].float().contiguous()
        final[pname] = dict(stride=stride, numel=flat.numel(), sum=float(flat.sum()), abs_sum=float(flat.abs().sum()),
                            max_abs=float(flat.abs().max()))
    meta = dict(variant=name, generator="tools/reference/train_ref.py", checkpoint="tests/data/golden/zaya1_like",
                rows=ROWS, seq_len=SEQ, config=cfg, steps=steps, final=final)
    zaya_ref.st.save(tensors, os.path.join(out_dir, f"{name}.safetensors"), {"generator": "tools/reference/train_ref.py"})
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


def main():
    torch.set_num_threads(2)
    args = sys.argv[1:]
    dtype, out_dir = torch.float64, OUT
    if args[:1] == ["--fp32-to"]:  # a float32 run of the reference elsewhere: how sensitive is the trajectory?
        dtype, out_dir, args = torch.float32, args[1], args[2:]
    os.makedirs(out_dir, exist_ok=True)
    for name in args or list(VARIANTS):
        run_variant(name, VARIANTS[name], dtype, out_dir)
    print("wrote", out_dir)


if __name__ == "__main__":
    main()

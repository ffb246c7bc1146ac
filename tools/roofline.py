#!/usr/bin/env python3
"""Where a training step's time goes, stage by stage, against the machine's roofline.

Runs `zaya bench train` with ZAYA_PROFILE=1 (and `zaya bench decode` on a tiny model for the machine's read
bandwidth, measured in the same session), then, for every profiled stage, puts its measured seconds per step
beside the FLOPs and bytes the model's shape says it must compute and move:

    bound = max(FLOPs / GEMM peak, bytes / read bandwidth)      (the roofline time of the stage)
    off   = measured / bound                                     (1.0 = on the roofline)

FLOPs count a multiply-add as 2 (src/model/zaya-flops.cpp's forward model, split per stage; backward products
2x their forward ones, attention's backward 2.5x: scores recomputed, then dP, dQ, dK, dV). Bytes are the
stage's compulsory traffic: its weights once (bf16 or fp32 as the run computes), fp32 activations in and out,
and for the backward the fp32 gradients it accumulates (read and written). Element-wise stages count ~10
FLOPs per element. Nested stages (moe_gate_up, swiglu, moe_down inside moe_experts; "stage.part" parts such as
lm_head_ce_backward.logits) are not listed twice.
The optimizer, clipping and the rest come from the bench's own stage_seconds.

    python3 tools/roofline.py --zaya build/zaya --config configs/mid.json --batch 4 --seq 512 --dtype bf16 \
        [--optimizer adamw|zaya] [--steps 3] [--markdown]

Prints one markdown table (stages by measured time) and the JSON line of the bench.
"""

import argparse
import json
import os
import re
import subprocess
import sys


def run(cmd, env=None):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p.stdout, p.stderr


def profile_rows(stderr):
    """{stage: (seconds, calls)} from the ZAYA_PROFILE table."""
    rows = {}
    for line in stderr.splitlines():
        m = re.match(r"^\s+(\S+)\s+([0-9.]+) s\s+(\d+)\s+[0-9.]+%$", line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), int(m.group(3)))
    return rows


def stage_model(cfg, B, S, wbytes):
    """{stage: (flops, bytes)} per training step (all layers)."""
    H, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    Hq, Hk, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    R, E, I = cfg["router_hidden_size"], cfg["num_experts"], cfg["moe_intermediate_size"]
    t0, t1 = cfg.get("cca_time0", 2), cfg.get("cca_time1", 2)
    T = B * S
    A, Kv = Hq * d, Hk * d
    C = A + Kv  # CCA's mixed q | k channels
    NQ = C + Kv  # the fused q | k | v_cur | v_del projection
    ctx = (S + 1) / 2  # mean visible keys (full causal)
    f4 = 4  # fp32 activation bytes
    router_w = H * R + 2 * R * R + R * (E + 1)
    m = {}
    m["linear_qkv"] = (2 * T * H * NQ * L, L * (NQ * H * wbytes + T * (H + NQ) * f4))
    m["linear_o"] = (2 * T * A * H * L, L * (A * H * wbytes + T * (A + H) * f4))
    m["linear_router"] = (2 * T * router_w * L, L * (router_w * wbytes + T * (H + 4 * R + E + 1) * f4))
    m["moe_experts"] = (2 * T * 3 * H * I * L, L * (E * 3 * H * I * wbytes + T * (2 * H + 3 * I) * f4))
    m["attention"] = (4 * A * ctx * T * L, L * T * (C + Kv + A) * f4)
    m["cca_conv"] = ((2 * C * t0 + 2 * C * d * t1) * T * L, L * (3 * T * C * f4 + C * d * t1 * 4))
    m["cca_qk_rope"] = (10 * T * C * L, L * 2 * T * C * f4)
    m["rmsnorm"] = (4 * T * H * (2 * L + 1), (2 * L + 1) * 2 * T * H * f4)
    m["residual_scale"] = (4 * T * H * 2 * L, 2 * L * 3 * T * H * f4)
    m["gelu"] = (20 * T * R * 2 * L, 2 * L * 2 * T * R * f4)
    # Backward.
    m["lm_head_ce_backward"] = (3 * 2 * T * H * V, 4 * T * V * f4 + V * H * (wbytes + 2 * 4) + 2 * T * H * f4)
    lin_f = m["linear_qkv"][0] + m["linear_o"][0] + m["linear_router"][0]
    lin_b = m["linear_qkv"][1] + m["linear_o"][1] + m["linear_router"][1]
    lin_w = L * (NQ * H + A * H + router_w)
    m["linear_backward"] = (2 * lin_f, 2 * lin_b + lin_w * 2 * 4)
    m["moe_experts_backward"] = (2 * m["moe_experts"][0], 2 * m["moe_experts"][1] + L * E * 3 * H * I * 2 * 4)
    m["attention_backward"] = (2.5 * m["attention"][0], 2 * m["attention"][1])
    m["cca_conv_backward"] = (2 * m["cca_conv"][0], 2 * m["cca_conv"][1])
    m["cca_qk_backward"] = (2 * m["cca_qk_rope"][0], 2 * m["cca_qk_rope"][1])
    m["rmsnorm_backward"] = (2 * m["rmsnorm"][0], 2 * m["rmsnorm"][1])
    m["residual_scale_backward"] = (2 * m["residual_scale"][0], 2 * m["residual_scale"][1])
    m["gelu_backward"] = (2 * m["gelu"][0], 2 * m["gelu"][1])
    return m


NESTED = {"moe_gate_up", "moe_down", "swiglu", "zaya_backward", "recompute_block"}
FORWARD = {"linear_qkv", "linear_o", "linear_router", "moe_experts", "attention", "cca_conv", "cca_qk_rope",
           "rmsnorm", "residual_scale", "gelu", "lm_head"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zaya", default="build/zaya")
    ap.add_argument("--config", default="configs/mid.json")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--optimizer", default="adamw", choices=["adamw", "zaya"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--bandwidth", type=float, help="read GB/s (default: measured with zaya bench decode)")
    args = ap.parse_args()

    if args.bandwidth is None:
        out, _ = run([args.zaya, "bench", "decode", "--config", "configs/small.json", "--batch", "1", "--context",
                      "16", "--tokens", "8"])
        args.bandwidth = json.loads(out.strip().splitlines()[-1])["read_bandwidth_gbs"]
    env = dict(os.environ, ZAYA_PROFILE="1")
    out, err = run([args.zaya, "bench", "train", "--config", args.config, "--batch", str(args.batch), "--seq",
                    str(args.seq), "--dtype", args.dtype, "--optimizer", args.optimizer, "--steps",
                    str(args.steps)], env)
    bench = json.loads(out.strip().splitlines()[-1])
    prof = profile_rows(err)
    cfg = json.load(open(args.config))
    steps_profiled = prof.get("zaya_backward", (0, args.steps))[1]  # the timed steps (bench train pauses the warm-up)
    peak = bench["peak_gflops_bf16" if args.dtype == "bf16" else "peak_gflops_fp32"] * 1e9
    bw = args.bandwidth * 1e9
    model = stage_model(cfg, args.batch, args.seq, 2 if args.dtype == "bf16" else 4)
    step_s = bench["seconds_median"]
    rows = []
    covered = 0.0
    for name, (sec, _calls) in prof.items():
        if name in NESTED or "." in name:  # "stage.part": a part of a listed stage
            continue
        t = sec / steps_profiled
        covered += t
        f, b = model.get(name, (None, None))
        rows.append((name, t, f, b))
    st = bench["stage_seconds"]
    for name in ("optimizer", "clip", "zero_grads", "refresh_compute"):
        rows.append((name, st[name], None, None))
        covered += st[name]
    rows.append(("other (glue, copies, not profiled)", max(0.0, step_s - covered), None, None))
    rows.sort(key=lambda r: -r[1])
    print(f"{bench.get('cpu', 'cpu not printed by this zaya')}: {args.config} {args.batch}x{args.seq} {args.dtype}, optimizer {args.optimizer}: "
          f"{step_s:.3f} s a step, {bench['tokens_per_s']:.0f} tok/s, MFU {bench['mfu'] * 100:.1f}%; "
          f"GEMM peak {peak / 1e9:.0f} GFLOP/s, read bandwidth {args.bandwidth:.1f} GB/s")
    print()
    print("| stage | s / step | share | GFLOP | GB | FLOP/B | GFLOP/s | roofline s | x off |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, t, f, b in rows:
        share = f"{100 * t / step_s:.1f}%"
        if f is None:
            print(f"| {name} | {t:.3f} | {share} | | | | | | |")
            continue
        bound = max(f / peak, b / bw)
        print(f"| {name}{' (fwd)' if name in FORWARD else ''} | {t:.3f} | {share} | {f / 1e9:.1f} | {b / 1e9:.2f} | "
              f"{f / b:.0f} | {f / t / 1e9:.0f} | {bound:.3f} | {t / bound:.1f} |")
    print()
    print(json.dumps(bench))


if __name__ == "__main__":
    main()

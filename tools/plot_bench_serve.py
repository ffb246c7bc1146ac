#!/usr/bin/env python3
"""Plots `zaya bench serve` JSON lines: output tokens/s, TTFT and TPOT (p50 and p99) against concurrency, one
curve per GEMM mode (batch-invariant on / off). Usage: plot_bench_serve.py LINES.jsonl OUT.png
A file with several runs (--out appends) is drawn from its last run (run_id)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
rows = [r for r in rows if r.get("bench") == "serve"]
if not rows:
    sys.exit(f"{sys.argv[1]}: no zaya bench serve lines")
last_run = rows[-1].get("run_id")
rows = [r for r in rows if r.get("run_id") == last_run]

series = {}
for r in rows:
    mode = r.get("batch_invariant")
    series.setdefault(mode, []).append(r)
label = {True: "batch-invariant", False: "default GEMMs", None: "server"}

fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
first = rows[0]
title = f"zaya bench serve: {first.get('model', '')}"
if first.get("dtype"):
    title += f" ({first['dtype']})"
fig.suptitle(title)
for mode, rs in sorted(series.items(), key=lambda kv: str(kv[0])):
    rs = sorted(rs, key=lambda r: r["concurrency"])
    c = [r["concurrency"] for r in rs]
    color, marker = ("C0", "o") if mode in (True, None) else ("C1", "s")
    axes[0].plot(c, [r["output_tokens_per_s"] for r in rs], marker + "-", color=color, label=label[mode])
    for ax, key in ((axes[1], "ttft_ms"), (axes[2], "tpot_ms")):
        ax.plot(c, [r[key]["p50"] for r in rs], marker + "-", color=color, label=f"{label[mode]} p50")
        ax.plot(c, [r[key]["p99"] for r in rs], marker + ":", color=color, alpha=0.5, label=f"{label[mode]} p99")
for ax, name in zip(axes, ("output tokens/s", "TTFT (ms)", "TPOT (ms)")):
    ax.set_xscale("log", base=2)
    cs = sorted({r["concurrency"] for r in rows})
    ax.set_xticks(cs)
    ax.set_xticklabels([str(x) for x in cs])
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_title(name)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
axes[0].set_ylim(bottom=0)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=90)

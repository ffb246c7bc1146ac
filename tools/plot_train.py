#!/usr/bin/env python3
"""Plots a zaya train metrics.jsonl: training and validation loss (nats/token) and the router-load entropy
per layer (divided by ln E) over steps. Usage: plot_train.py METRICS.jsonl OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
steps = [r["step"] for r in rows]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
ax1.plot(steps, [r["loss"] for r in rows], label="train", lw=1)
val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
if val:
    ax1.plot([v[0] for v in val], [v[1] for v in val], "o-", label="validation")
ax1.set_xlabel("step")
ax1.set_ylabel("cross-entropy (nats/token)")
ax1.set_title("loss")
ax1.grid(alpha=0.3)
ax1.legend()
n_layers = len(rows[0]["load_entropy"])
for layer in range(n_layers):
    ax2.plot(steps, [r["load_entropy"][layer] for r in rows], lw=1, label=f"layer {layer}")
ax2.axhline(0.95, color="gray", ls="--", lw=1, label="0.95 ln E")
ax2.set_ylim(0, 1.02)
ax2.set_xlabel("step")
ax2.set_ylabel("router-load entropy / ln E")
ax2.set_title("expert load balance")
ax2.grid(alpha=0.3)
ax2.legend(fontsize=7, ncol=2)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)

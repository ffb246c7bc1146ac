#!/usr/bin/env python3
"""Plots a zaya train metrics.jsonl: training and validation loss (nats/token), the router-load entropy
per layer (divided by ln E) over steps, and the accuracies of the eval.tasks (keys "TASK/METRIC") when the
run scored any. Usage: plot_train.py METRICS.jsonl OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
steps = [r["step"] for r in rows]
task_keys = []
for r in rows:
    for k in r:
        if "/" in k and k not in task_keys and not k.endswith("/perplexity"):
            task_keys.append(k)
if task_keys:
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.5))
else:
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
if task_keys:
    for k in task_keys:
        pts = [(r["step"], r[k]) for r in rows if k in r]
        ax3.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=k)
    ax3.set_ylim(0, 1)
    ax3.set_xlabel("step")
    ax3.set_ylabel("accuracy")
    ax3.set_title("tasks (eval.tasks)")
    ax3.grid(alpha=0.3)
    ax3.legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)

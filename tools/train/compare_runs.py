#!/usr/bin/env python3
"""Compares the loss curves of two `zaya train` runs of the same job (e.g. bf16 against fp32) and plots them.

Usage: compare_runs.py REF_METRICS.jsonl OTHER_METRICS.jsonl OUT.png [--window 20] [--labels fp32 bf16]

Per-step training losses differ by routing flips and rounding, so the curve compared is the moving average
over `window` steps (the same steps of both runs); validation losses (the same batches every evaluation)
are compared point by point. Prints one JSON line: the largest relative deviation of the averaged curve
after the first window, of the validation losses, and the final figures of both runs.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def moving_average(xs, w):
    out, s = [], 0.0
    for i, x in enumerate(xs):
        s += x
        if i >= w:
            s -= xs[i - w]
        out.append(s / min(i + 1, w))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("other")
    ap.add_argument("out")
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--labels", nargs=2, default=["fp32", "bf16"])
    a = ap.parse_args()
    ref, other = load(a.ref), load(a.other)
    n = min(len(ref), len(other))
    ref, other = ref[:n], other[:n]
    steps = [r["step"] for r in ref]
    assert steps == [r["step"] for r in other], "the runs must log the same steps"
    ma_ref = moving_average([r["loss"] for r in ref], a.window)
    ma_other = moving_average([r["loss"] for r in other], a.window)
    curve_dev = max(abs(o - r) / r for r, o in zip(ma_ref[a.window:], ma_other[a.window:]))
    val_ref = {r["step"]: r["val_loss"] for r in ref if "val_loss" in r}
    val_other = {r["step"]: r["val_loss"] for r in other if "val_loss" in r}
    common = sorted(set(val_ref) & set(val_other))
    val_dev = max((abs(val_other[s] - val_ref[s]) / val_ref[s] for s in common), default=float("nan"))
    print(json.dumps({
        "steps": n, "window": a.window,
        "max_rel_dev_train_curve": round(curve_dev, 5),
        "max_rel_dev_val": round(val_dev, 5),
        "val_steps": common,
        f"final_val_{a.labels[0]}": val_ref.get(common[-1]) if common else None,
        f"final_val_{a.labels[1]}": val_other.get(common[-1]) if common else None,
        f"final_train_avg_{a.labels[0]}": round(ma_ref[-1], 5),
        f"final_train_avg_{a.labels[1]}": round(ma_other[-1], 5),
    }))

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for ma, rows, lab in ((ma_ref, ref, a.labels[0]), (ma_other, other, a.labels[1])):
        ax1.plot(steps, ma, lw=1.2, label=f"{lab} train ({a.window}-step avg)")
        vs = sorted((s, v) for s, v in ((r["step"], r.get("val_loss")) for r in rows) if v is not None)
        ax1.plot([s for s, _ in vs], [v for _, v in vs], "o--", ms=4, label=f"{lab} validation")
    ax1.set_xlabel("step")
    ax1.set_ylabel("cross-entropy (nats/token)")
    ax1.set_title("loss")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    rel = [(o - r) / r * 100 for r, o in zip(ma_ref, ma_other)]
    ax2.plot(steps, rel, lw=1.2)
    ax2.axhline(2, color="gray", ls="--", lw=1)
    ax2.axhline(-2, color="gray", ls="--", lw=1)
    ax2.set_xlabel("step")
    ax2.set_ylabel(f"{a.labels[1]} vs {a.labels[0]} (%)")
    ax2.set_title("relative difference of the averaged training loss")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()

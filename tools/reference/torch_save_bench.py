#!/usr/bin/python3
"""The baseline of bench/checkpoint_speed.sh: torch.save + fsync of the same training state, synchronously.

Builds one fp32 tensor per entry of a zaya training checkpoint's manifest.json (same names, shapes and
dtypes: the model's weights and its optimizer state), then times `torch.save(state, f)` followed by
flush + os.fsync (what a synchronous checkpoint costs the training loop) `--repeats` times.
Prints one JSON line. Needs /usr/bin/python3 with torch (python3-torch).
"""
import argparse
import json
import os
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--manifest", required=True, help="a zaya checkpoint's manifest.json")
    ap.add_argument("--out", required=True, help="file to write (on the disk under test); removed after")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    with open(args.manifest) as f:
        m = json.load(f)
    torch.manual_seed(0)
    dtypes = {"F32": torch.float32, "I64": torch.int64, "BF16": torch.bfloat16}
    state = {}
    nbytes = 0
    for t in m["tensors"]:
        shape = t.get("whole_shape", t["shape"]) if "whole_shape" not in t else t["shape"]
        x = torch.empty(shape, dtype=dtypes[t["dtype"]])
        if x.is_floating_point():
            x.uniform_(-1, 1)
        else:
            x.zero_()
        state[t["name"]] = x
        nbytes += x.numel() * x.element_size()
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        with open(args.out, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        times.append(time.perf_counter() - t0)
        os.remove(args.out)
    print(json.dumps({"bench": "torch_save_fsync", "torch": torch.__version__, "state_bytes": nbytes,
                      "seconds": times, "seconds_min": min(times), "gbps_best": nbytes / min(times) / 1e9}))


if __name__ == "__main__":
    main()

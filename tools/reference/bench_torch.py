"""Times the reference forward pass (no grad) of a random-init model, or with --train a full training step.

Usage: /usr/bin/python3 tools/reference/bench_torch.py [--config configs/mid.json] [--batch 4] [--seq 512]
       [--dtype fp32 bf16] [--threads 2] [--repeats 3] [--train]

Prints one JSON line per dtype: median seconds of `repeats` timed forwards (or steps) after one warm-up, and
tokens/s.
Forward: bf16 = parameters in bfloat16 with the reference's fp32 op set (fp32 residual stream, norm
statistics, attention softmax, balancing biases); experts run as sorted-token grouped matmuls.
--train: how PyTorch users train it: fp32 parameters, forward + mean cross-entropy + autograd backward +
torch.optim.AdamW (foreach) + zero_grad; bf16 = the same under torch.autocast("cpu", torch.bfloat16)
(bf16 matmuls, fp32 master weights, gradients and optimizer state), as zaya's bf16 training keeps them.
"""

import argparse
import json
import os
import statistics
import sys
import time

# OpenMP threads that spin while waiting stall every small op for a scheduler time slice when the machine is
# shared (other builds running): a 2-thread elementwise add took 20 ms instead of 60 us here. Passive waiting
# avoids that; set OMP_WAIT_POLICY yourself to override (must happen before torch starts its thread pool).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zaya_ref  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    parser = argparse.ArgumentParser(description="Time the ZAYA1 reference forward.")
    parser.add_argument("--config", default=os.path.join(root, "configs", "mid.json"))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--dtype", nargs="+", default=["fp32", "bf16"], choices=sorted(DTYPES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", action="store_true", help="time training steps (AdamW) instead of forwards")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    cfg = zaya_ref.ZayaConfig.from_file(args.config)
    gen = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(3, cfg.vocab_size, (args.batch, args.seq), generator=gen)
    ids[:, 0] = cfg.bos_token_id
    targets = torch.randint(3, cfg.vocab_size, (args.batch, args.seq), generator=gen)
    for name in args.dtype:
        model = zaya_ref.init_weights(zaya_ref.ZayaForCausalLM(cfg), seed=args.seed)
        # HF init has temp 0 (uniform attention); any value costs the same, keep the init as is
        times, cpu_times = [], []
        if args.train:
            model = model.train()
            opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4,
                                    weight_decay=0.1)

            def run():
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=name == "bf16"):
                    loss = model(ids, targets=targets)["loss"]
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
        else:
            model = model.to_dtype(DTYPES[name]).eval()

            def run():
                with torch.no_grad():
                    model(ids)
        run()  # warm-up
        for _ in range(args.repeats):
            start, cpu_start = time.perf_counter(), time.process_time()
            run()
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
        median = statistics.median(times)
        # on a shared machine wall time includes waiting for the CPU; process CPU time / threads estimates the
        # wall time of an otherwise idle machine
        cpu_median = statistics.median(cpu_times)
        print(json.dumps({
            "bench": "torch_reference_train" if args.train else "torch_reference_forward", "config": os.path.basename(args.config), "dtype": name,
            "batch": args.batch, "seq": args.seq, "threads": args.threads, "repeats": args.repeats,
            "median_s": round(median, 4), "tokens_per_s": round(args.batch * args.seq / median, 1),
            "cpu_s": round(cpu_median, 4),
            "tokens_per_s_cpu_time": round(args.batch * args.seq * args.threads / cpu_median, 1),
            "torch": torch.__version__, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Reference quantizer: writes quantized ZAYA1 checkpoints in the compressed-tensors layouts vLLM reads,
from the format definitions (not from zaya's code), for zaya's loader tests (tests/quant_checkpoint_test.cpp).

numpy only. Definitions used:
  * int-quantized, int8 symmetric, group 32 (= ggml Q8_0): d = amax/127 (fp32), q = round-half-away(x * (1/d)),
    scale stored fp16 (ggml's quantize_row_q8_0_ref).
  * float-quantized, FP8 e4m3fn, strategy channel (Zyphra's ZAYA1-8B-FP8-Experts): s = amax/448 per output row,
    q = e4m3(x / s) rounded to nearest even, saturating; weight under the tensor's own name, the scale as
    `<name>.weight_scale` [.., rows, 1] (written BF16 here, as a bf16 checkpoint's scales would be).
  * mxfp4-pack-quantized (compressed-tensors MXFP4PackedCompressor): per group of 32 the E8M0 scale byte
    127 + floor(log2 amax) - 2 (OCP MX), elements the nearest E2M1 value of x / 2^(e-127) by argmin over
    [0, .5, 1, 1.5, 2, 3, 4, 6] (first minimum on a tie, as pack_fp4_to_uint8), sign in bit 3, element 2k
    in the low nibble and 2k+1 in the high one (`weight_packed` [.., rows, K/2] uint8).

Writes, from the golden checkpoint (tests/data/golden/zaya1_like):
  fp8_experts/    experts FP8 (stacked names + .weight_scale, BF16 scales), everything else BF16
  mxfp4_experts/  experts MXFP4: gate_up_proj as `.weight_packed`, down_proj as `_packed` (both names
                  occur in the wild; the loader reads either); everything else as stored (F32)
  q8_0_all/       every matrix (attention, router, experts, embedding) Q8_0, the rest F32
each with config.json (+ quantization_config) and dequant.json: per quantized weight, the FNV-1a 64 hash of
its dequantized fp32 values (little-endian bytes), the sum and the first values, which the C++ test checks
against its own dequantization bit for bit.

Usage: python3 tools/reference/quantize_ref.py [--golden DIR] [--out tests/data/quant]
"""

import argparse
import json
import os
import struct

import numpy as np

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)


# ---- safetensors (numpy) ----

def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[b:e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif dt == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: {name}: dtype {dt} not expected in the golden checkpoint")
        out[name] = a.reshape(info["shape"]).copy()
    return out


def bf16_bytes(a):
    """fp32 -> bf16 round to nearest even, as bytes."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r.tobytes()


def write_safetensors(path, tensors):
    """tensors: {name: (dtype string, shape, bytes)}; sorted by name, 8-byte aligned data start."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, shape, raw = tensors[name]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---- formats ----

def q8_0(w):
    rows = w.reshape(-1, w.shape[-1]).astype(np.float32)
    blocks = rows.reshape(rows.shape[0], -1, 32)
    d = (np.abs(blocks).max(axis=2) / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    v = (blocks * inv[:, :, None]).astype(np.float32)
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)  # half away from zero
    scale = d.astype(np.float16)
    deq = q.astype(np.float32) * scale.astype(np.float32)[:, :, None]
    shape_s = w.shape[:-1] + (w.shape[-1] // 32,)
    return q.reshape(w.shape), scale.reshape(shape_s), deq.reshape(w.shape)


def e4m3_table():
    vals = []
    for code in range(127):  # 0x00 .. 0x7e; 0x7f is NaN
        e, m = code >> 3, code & 7
        vals.append(m / 8.0 * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))
    return np.array(vals, dtype=np.float64)


E4M3 = e4m3_table()


def to_e4m3(x):
    """fp32 array -> e4m3fn codes, nearest, ties to the even code, saturating at 448."""
    a = np.abs(x.astype(np.float64)).ravel()
    hi = np.searchsorted(E4M3, a, side="left").clip(0, 126)  # first value >= a
    lo = (hi - 1).clip(0, 126)
    dl, dh = a - E4M3[lo], E4M3[hi] - a
    code = np.where(dl < dh, lo, hi)
    tie = dl == dh
    code = np.where(tie, np.where(lo % 2 == 0, lo, hi), code)
    code = np.where(a >= 448.0, 126, code)
    sign = np.signbit(x.ravel()).astype(np.uint8) << 7
    return (code.astype(np.uint8) | sign).reshape(x.shape)


def fp8_channel(w):
    rows = w.reshape(-1, w.shape[-1]).astype(np.float32)
    amax = np.abs(rows).max(axis=1)
    s = np.where(amax > 0, amax / np.float32(448.0), np.float32(1.0)).astype(np.float32)
    scaled = (rows / s[:, None]).astype(np.float32)
    q = to_e4m3(scaled)
    # Scales stored BF16: dequantization uses the stored (rounded) scale.
    s_bf16 = np.frombuffer(bf16_bytes(s), dtype="<u2")
    s_used = (s_bf16.astype(np.uint32) << 16).view(np.float32)
    vals = E4M3[(q & 0x7F).astype(np.int64)].astype(np.float32) * np.where(q & 0x80, -1, 1).astype(np.float32)
    deq = (vals * s_used[:, None]).astype(np.float32)
    return q.reshape(w.shape), s_bf16.reshape(w.shape[:-1] + (1,)), deq.reshape(w.shape)


def mxfp4(w):
    rows = w.reshape(-1, w.shape[-1]).astype(np.float32)
    blocks = rows.reshape(rows.shape[0], -1, 32)
    amax = np.abs(blocks).max(axis=2)
    _, ex = np.frexp(amax)  # amax = m * 2^ex, m in [0.5, 1): floor(log2 amax) = ex - 1
    e = np.where(amax > 0, ex - 1 - 2 + 127, 0).clip(0, 254).astype(np.int64)
    scaled = np.ldexp(np.abs(blocks), (127 - e)[:, :, None]).astype(np.float32)
    idx = np.argmin(np.abs(scaled[..., None] - E2M1), axis=-1).astype(np.uint8)  # first minimum on ties
    nib = idx | (np.signbit(blocks).astype(np.uint8) << 3)
    flat = nib.reshape(rows.shape[0], -1)
    packed = (flat[:, 0::2] | (flat[:, 1::2] << 4)).astype(np.uint8)
    vals = E2M1[idx] * np.where(np.signbit(blocks), -1, 1).astype(np.float32)
    deq = (vals * np.ldexp(np.float32(1.0), e - 127)[:, :, None]).astype(np.float32)
    return (packed.reshape(w.shape[:-1] + (w.shape[-1] // 2,)), e.astype(np.uint8).reshape(w.shape[:-1] + (w.shape[-1] // 32,)),
            deq.reshape(w.shape))


def fnv1a64(raw):
    h = 0xCBF29CE484222325
    for b in raw:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def record(deq):
    a = np.ascontiguousarray(deq, dtype=np.float32)
    return {"fnv1a64": format(fnv1a64(a.tobytes()), "016x"), "sum": float(a.astype(np.float64).sum()),
            "first": [float(v) for v in a.ravel()[:4]]}


def is_matrix(name, w):
    """A GEMM weight: every tensor of rank >= 2 except the CCA convolutions."""
    return w.ndim >= 2 and "conv_qk" not in name


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--golden", default=os.path.join(here, "../../tests/data/golden/zaya1_like"))
    ap.add_argument("--out", default=os.path.join(here, "../../tests/data/quant"))
    args = ap.parse_args()
    weights = read_safetensors(os.path.join(args.golden, "model.safetensors"))
    config = json.load(open(os.path.join(args.golden, "config.json")))

    def group(weights_args, fmt):
        return {"quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights_args,
                                              "input_activations": None, "format": fmt}}}

    variants = {
        "fp8_experts": (group({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                               "dynamic": False, "group_size": None}, "float-quantized"),
                        lambda n, w: ".mlp.experts." in n, "fp8"),
        "mxfp4_experts": (group({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
                                 "symmetric": True, "dynamic": False, "scale_dtype": "torch.uint8",
                                 "zp_dtype": "torch.uint8"}, "mxfp4-pack-quantized"),
                          lambda n, w: ".mlp.experts." in n, "mxfp4"),
        "q8_0_all": (group({"num_bits": 8, "type": "int", "strategy": "group", "group_size": 32,
                            "symmetric": True, "dynamic": False}, "int-quantized"),
                     is_matrix, "q8_0"),
    }
    for vname, (qcfg, chosen, scheme) in variants.items():
        qcfg = dict(qcfg)
        qcfg["ignore"] = ["re:^(?!.*experts).*$"] if "experts" in vname else []
        out = os.path.join(args.out, vname)
        os.makedirs(out, exist_ok=True)
        tensors, deq = {}, {}
        for name, w in weights.items():
            if not chosen(name, w):
                if vname == "fp8_experts":  # Zyphra's: everything but the experts in bf16
                    tensors[name] = ("BF16", w.shape, bf16_bytes(w))
                else:
                    tensors[name] = ("F32", w.shape, w.astype("<f4").tobytes())
                continue
            stem = name[:-7] if name.endswith(".weight") else name
            if scheme == "fp8":
                q, s, d = fp8_channel(w)
                tensors[name] = ("F8_E4M3", q.shape, q.tobytes())
                tensors[stem + ".weight_scale"] = ("BF16", s.shape, s.astype("<u2").tobytes())
            elif scheme == "mxfp4":
                p, s, d = mxfp4(w)
                data_name = stem + (".weight_packed" if stem.endswith("gate_up_proj") else "_packed")
                tensors[data_name] = ("U8", p.shape, p.tobytes())
                tensors[stem + ".weight_scale"] = ("U8", s.shape, s.tobytes())
            else:
                q, s, d = q8_0(w)
                tensors[name] = ("I8", q.shape, q.tobytes())
                tensors[stem + ".weight_scale"] = ("F16", s.shape, s.astype("<f2").tobytes())
            deq[name] = record(d)
        write_safetensors(os.path.join(out, "model.safetensors"), tensors)
        cfg = dict(config)
        cfg["quantization_config"] = qcfg
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        with open(os.path.join(out, "dequant.json"), "w") as f:
            json.dump(deq, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"{out}: {len(deq)} quantized weights, {sum(len(t[2]) for t in tensors.values()) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()

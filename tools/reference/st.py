"""Tiny safetensors reader/writer (no `safetensors` package on this machine).

File layout: 8-byte little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
little-endian tensor bytes; offsets are relative to the end of the header. BF16 is handled through
int16 bit views so no rounding happens on load; fp32 -> bf16 on save rounds to nearest even
(torch's own conversion).
"""

import json
import struct

import numpy as np
import torch

_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
_NAMES = {v: k for k, v in _DTYPES.items()}
_NUMPY_OF = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}


class SafetensorsError(ValueError):
    pass


def read_header(path):
    """Returns (header dict without __metadata__, metadata dict, data start offset)."""
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        body = f.read(n)
        if len(body) != n:
            raise SafetensorsError(f"{path}: header length {n} exceeds the file")
    try:
        header = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not JSON: {e}")
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", {}) or {}
    return header, meta, 8 + n


def load(path):
    """Reads every tensor of a .safetensors file into an ordered dict name -> torch.Tensor (stored dtype)."""
    header, _meta, start = read_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    out = {}
    for name in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
        info = header[name]
        dtype = info.get("dtype")
        if dtype not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor {name}: unsupported dtype {dtype!r}")
        shape = [int(s) for s in info["shape"]]
        begin, end = (int(x) for x in info["data_offsets"])
        count = int(np.prod(shape)) if shape else 1
        itemsize = torch.tensor([], dtype=_DTYPES[dtype]).element_size()
        if end - begin != count * itemsize or end > len(data) or begin < 0:
            raise SafetensorsError(f"{path}: tensor {name}: data_offsets {begin},{end} do not fit shape {shape} {dtype}")
        chunk = data[begin:end]
        if dtype == "BF16":
            bits = np.frombuffer(chunk, dtype="<i2").copy()
            t = torch.from_numpy(bits).view(torch.bfloat16)
        else:
            arr = np.frombuffer(chunk, dtype=np.dtype(_NUMPY_OF[dtype]).newbyteorder("<")).copy()
            t = torch.from_numpy(arr)
        out[name] = t.reshape(shape)
    return out


def save(tensors, path, metadata=None):
    """Writes name -> tensor (any supported dtype) in name order, 8-byte aligned header like the reference writer."""
    names = sorted(tensors)
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs = []
    offset = 0
    for name in names:
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype not in _NAMES:
            raise SafetensorsError(f"tensor {name}: unsupported dtype {t.dtype}")
        if t.dtype == torch.bfloat16:
            blob = t.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            blob = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)  # pad so the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def to_bf16(tensors):
    """fp32 -> bf16 copy of every floating tensor (round to nearest even)."""
    return {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in tensors.items()}

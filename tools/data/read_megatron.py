#!/usr/bin/python3
"""Reads a zaya data prepare output the way Megatron-LM's MMapIndexedDataset (_IndexReader) does, with
numpy only, and prints its counts and first tokens: an independent cross-check of the .bin/.idx layout
(src/data/indexed_dataset.h) against `zaya data info PREFIX`.
Usage: /usr/bin/python3 tools/data/read_megatron.py PREFIX [--show N]
"""
import struct
import sys

import numpy as np

DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}


def read(prefix):
    with open(prefix + ".idx", "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00", "bad magic"
        (version,) = struct.unpack("<Q", f.read(8))
        assert version == 1, version
        (code,) = struct.unpack("<B", f.read(1))
        (seqs,) = struct.unpack("<Q", f.read(8))
        (docs,) = struct.unpack("<Q", f.read(8))
        offset = f.tell()
    idx = np.memmap(prefix + ".idx", mode="r", order="C")
    sizes = np.frombuffer(idx, dtype=np.int32, count=seqs, offset=offset)
    pointers = np.frombuffer(idx, dtype=np.int64, count=seqs, offset=offset + sizes.nbytes)
    doc_idx = np.frombuffer(idx, dtype=np.int64, count=docs, offset=offset + sizes.nbytes + pointers.nbytes)
    dtype = DTYPES[code]
    binf = np.memmap(prefix + ".bin", mode="r", order="C")
    out = [np.frombuffer(binf, dtype=dtype, count=int(sizes[i]), offset=int(pointers[i])) for i in range(seqs)]
    return code, sizes, doc_idx, out


def main():
    prefix = sys.argv[1]
    show = int(sys.argv[sys.argv.index("--show") + 1]) if "--show" in sys.argv else 3
    code, sizes, doc_idx, seqs = read(prefix)
    print(f"{prefix}: dtype {DTYPES[code].__name__} (code {code}), {len(seqs)} sequences, "
          f"{len(doc_idx) - 1} documents, {int(sizes.sum())} tokens")
    for i in range(min(show, len(seqs))):
        print(f"  [{i}] {len(seqs[i])} tokens: {seqs[i][:12].tolist()}")


if __name__ == "__main__":
    main()

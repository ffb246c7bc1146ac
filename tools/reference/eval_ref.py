"""Reference loglikelihoods for `zaya eval run`: the same requests, split and scored in Python + PyTorch.

Reads the per-request samples zaya wrote (`zaya eval run ... --log-samples SAMPLES.jsonl`: each request's context
and continuation text and zaya's loglikelihood), and for every request, independently of zaya's C++:
  1. encodes the text with a byte-level BPE written here from the tokenizer.json (GPT-2 pre-tokenization regex,
     merges by rank; no special tokens), the way lm-eval's HF backend would with that tokenizer;
  2. splits it as lm-eval does (lm_eval/api/model.py TemplateLM._encode_pair: trailing whitespace of the context
     moves to the continuation; whole = encode(context + continuation), context_enc = encode(context),
     continuation_enc = whole[len(context_enc):]; [bos] in front of the context, as zaya.cpp documents for the
     Gemma 3 convention) and truncates as lm_eval/models/huggingface.py _loglikelihood_tokens:
     (context_enc + continuation_enc)[-(max_length + 1):][:-1];
  3. runs the plain-PyTorch ZAYA1 (zaya_ref.py, fp32) on it alone and sums log_softmax (fp64) over the
     continuation; greedy = every continuation token is the argmax.
Then it checks the tokens equal zaya's, prints the largest |ll_zaya - ll_ref| and the accuracies both give, and
writes the reference (one JSON line per request) for tests/data/eval_ref.

    /usr/bin/python3 tools/reference/eval_ref.py --model DIR --tokenizer TOKENIZER.json \
        --samples SAMPLES.jsonl --context 256 --out tests/data/eval_ref/reference.jsonl

The pre-tokenization regex uses Python's `re` (letters = [^\\W\\d_], numbers = \\d): the same as GPT-2's \\p{L} /
\\p{N} on ASCII and most text; any difference would show as a token mismatch, which this script reports.
"""

import argparse
import json
import math
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zaya_ref  # noqa: E402

GPT2_PATTERN = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map (what ByteLevel pre-tokenization produces)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class ByteLevelBPE:
    def __init__(self, path):
        t = json.load(open(path, encoding="utf-8"))
        m = t["model"]
        if m["type"] != "BPE":
            raise ValueError(f"{path}: model type {m['type']}, expected BPE")
        pre = t.get("pre_tokenizer") or {}
        if pre.get("type") != "ByteLevel" or pre.get("add_prefix_space"):
            raise ValueError(f"{path}: expected a ByteLevel pre-tokenizer without add_prefix_space, got {pre}")
        self.vocab = m["vocab"]
        merges = [tuple(x.split(" ")) if isinstance(x, str) else tuple(x) for x in m["merges"]]
        self.rank = {pair: i for i, pair in enumerate(merges)}
        self.byte_char = bytes_to_unicode()
        self.added = {a["content"]: a["id"] for a in t.get("added_tokens", [])}
        self.bos = next((self.added[s] for s in ("<bos>", "<s>", "<|begin_of_text|>") if s in self.added), None)

    def _bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            best = min(range(len(parts) - 1), key=lambda i: self.rank.get((parts[i], parts[i + 1]), math.inf))
            pair = (parts[best], parts[best + 1])
            if pair not in self.rank:
                break
            merged, i = [], 0
            while i < len(parts):
                if i < len(parts) - 1 and (parts[i], parts[i + 1]) == pair:
                    merged.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return parts

    def encode(self, text):
        for special in self.added:
            if special and special in text:
                raise ValueError(f"text holds the special token {special!r}: not handled by this reference")
        ids = []
        for piece in GPT2_PATTERN.findall(text):
            word = "".join(self.byte_char[b] for b in piece.encode("utf-8"))
            ids.extend(self.vocab[p] for p in self._bpe(word))
        return ids


def encode_pair(tok, context, continuation):
    """lm-eval's _encode_pair with [bos] in front of the context."""
    n = len(context) - len(context.rstrip())
    if n > 0:
        continuation = context[-n:] + continuation
        context = context[:-n]
    whole = tok.encode(context + continuation)
    ctx = tok.encode(context)
    return [tok.bos] + ctx, whole[len(ctx):]


def score(model, tok, context, continuation, max_len):
    ctx, cont = encode_pair(tok, context, continuation)
    inp = (ctx + cont)[-(max_len + 1):][:-1]
    with torch.no_grad():
        logits = model(torch.tensor([inp], dtype=torch.int64))["logits"][0].double()
    k = len(cont)
    logp = torch.log_softmax(logits[len(inp) - k:], dim=-1)
    target = torch.tensor(cont)
    ll = float(logp[torch.arange(k), target].sum())
    greedy = bool((logp.argmax(dim=-1) == target).all())
    return inp, cont, ll, greedy


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--samples", required=True, help="zaya eval run --log-samples output")
    ap.add_argument("--context", type=int, required=True, help="the --context zaya ran with")
    ap.add_argument("--out", help="write the reference here (JSON lines)")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = zaya_ref.load_pretrained(args.model, dtype=torch.float32)
    tok = ByteLevelBPE(args.tokenizer)
    samples = [json.loads(line) for line in open(args.samples, encoding="utf-8") if line.strip()]
    out, worst, mismatches = [], 0.0, 0
    items = {}
    for s in samples:
        inp, cont, ll, greedy = score(model, tok, s["context"], s["continuation"], args.context)
        if cont != s["continuation_tokens"] or len(inp) != s["input_tokens"]:
            mismatches += 1
            print(f"token mismatch: {s['task']} item {s['item']} choice {s['choice']}: zaya "
                  f"{s['continuation_tokens']} ({s['input_tokens']} inputs), reference {cont} ({len(inp)})")
        worst = max(worst, abs(ll - s["loglikelihood"]))
        out.append({"task": s["task"], "item": s["item"], "choice": s["choice"], "input_tokens": len(inp),
                    "continuation_tokens": cont, "loglikelihood": ll, "is_greedy": greedy})
        items.setdefault((s["task"], s["item"]), []).append((s, ll))
    agree = sum(
        max(range(len(v)), key=lambda i: (v[i][0]["loglikelihood"], -i)) == max(range(len(v)), key=lambda i: (v[i][1], -i))
        for v in items.values())
    print(f"{len(samples)} requests, {len(items)} items: max |ll_zaya - ll_ref| = {worst:.3e}, "
          f"token mismatches {mismatches}, argmax agrees on {agree}/{len(items)} items")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            for r in out:
                f.write(json.dumps(r) + "\n")
    sys.exit(1 if mismatches or worst > 1e-4 else 0)


if __name__ == "__main__":
    main()

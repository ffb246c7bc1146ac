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

Generative samples (GSM8K: the lines with "generated_tokens") are regenerated from zaya's prompt tokens: greedy
argmax of the plain-PyTorch model, one full forward per step, until the stop token or max_gen_tokens; decoded
(byte-level, special tokens skipped), cut at the first stop sequence, the answers extracted with lm-eval's own
regexes (lm_eval/tasks/gsm8k/gsm8k.yaml: strict-match and flexible-extract, lm_eval/filters/extraction.py) and
scored with its exact_match normalisation; zaya's tokens must be a prefix of the reference's (zaya cancels a
sequence once its text holds a stop sequence), its cut text, answers and scores equal. --gen-out writes them.

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
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.special_ids = set(self.added.values())
        self.char_byte = {c: b for b, c in self.byte_char.items()}

    def decode(self, ids):
        """Token ids to text, special tokens skipped (the tokenizers library's ByteLevel decoder)."""
        text = "".join(self.id_to_token[i] for i in ids if i not in self.special_ids)
        return bytes(self.char_byte[c] for c in text).decode("utf-8", errors="replace")

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


def greedy_generate(model, prompt, max_tokens, stop_ids):
    """Greedy tokens after `prompt` (stop token not included), recomputing the whole sequence each step."""
    seq, out = list(prompt), []
    with torch.no_grad():
        for _ in range(max_tokens):
            logits = model(torch.tensor([seq], dtype=torch.int64))["logits"][0, -1]
            nxt = int(torch.argmax(logits))  # the first maximum, as zaya's greedy sampler
            if nxt in stop_ids:
                break
            out.append(nxt)
            seq.append(nxt)
    return out


def truncate_at_stop(text, until):
    for u in until:
        if u:
            text = text.split(u)[0]
    return text


def regex_filter(resp, pattern, group_select, fallback="[invalid]"):
    """lm_eval/filters/extraction.py RegexFilter on one response."""
    match = re.findall(pattern, resp)
    if not match:
        return fallback
    match = match[group_select]
    if isinstance(match, tuple):
        match = [m for m in match if m]
        match = match[0] if match else fallback
    return match.strip()


def exact_match(pred, ref):
    """lm_eval/api/metrics.py exact_match with gsm8k.yaml's regexes_to_ignore and ignore_case."""
    for pattern in (",", "\\$", "(?s).*#### ", "\\.$"):
        pred, ref = re.sub(pattern, "", pred), re.sub(pattern, "", ref)
    return 1.0 if pred.lower() == ref.lower() else 0.0


def check_generation(model, tok, s):
    """The reference for one generative sample, and the list of ways zaya's differs from it."""
    gen = greedy_generate(model, s["prompt_tokens"], s["max_gen_tokens"], set(s["stop_token_ids"]))
    text = truncate_at_stop(tok.decode(gen), s["until"])
    strict = regex_filter(text, r"#### (\-?[0-9\.\,]+)", 0)
    flexible = regex_filter(text, r"(-?[$0-9.,]{2,})|(-?[0-9]+)", -1)
    ref = {"task": s["task"], "item": s["item"], "prompt_tokens": s["prompt_tokens"], "generated_tokens": gen,
           "generation": text, "strict_match": strict, "flexible_extract": flexible,
           "exact_match_strict": exact_match(strict, s["reference"]),
           "exact_match_flexible": exact_match(flexible, s["reference"])}
    diffs = []
    z = s["generated_tokens"]
    if gen[:len(z)] != z:
        diffs.append(f"tokens: zaya {z}, reference {gen}")
    for key in ("generation", "strict_match", "flexible_extract", "exact_match_strict", "exact_match_flexible"):
        if ref[key] != s[key]:
            diffs.append(f"{key}: zaya {s[key]!r}, reference {ref[key]!r}")
    return ref, diffs


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--samples", required=True, help="zaya eval run --log-samples output")
    ap.add_argument("--context", type=int, required=True, help="the --context zaya ran with")
    ap.add_argument("--out", help="write the loglikelihood reference here (JSON lines)")
    ap.add_argument("--gen-out", help="write the generation reference here (JSON lines)")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = zaya_ref.load_pretrained(args.model, dtype=torch.float32)
    tok = ByteLevelBPE(args.tokenizer)
    samples = [json.loads(line) for line in open(args.samples, encoding="utf-8") if line.strip()]
    gen_samples = [s for s in samples if "generated_tokens" in s]
    samples = [s for s in samples if "generated_tokens" not in s]
    gen_out, gen_bad = [], 0
    for s in gen_samples:
        ref, diffs = check_generation(model, tok, s)
        gen_out.append(ref)
        for d in diffs:
            print(f"generation mismatch: {s['task']} item {s['item']}: {d}")
        gen_bad += bool(diffs)
    if gen_samples:
        print(f"{len(gen_samples)} generations: {len(gen_samples) - gen_bad} the same as the reference "
              f"({sum(len(r['generated_tokens']) for r in gen_out)} reference tokens)")
    if args.gen_out:
        write_jsonl(args.gen_out, gen_out)
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
        write_jsonl(args.out, out)
    sys.exit(1 if mismatches or worst > 1e-4 or gen_bad else 0)


if __name__ == "__main__":
    main()

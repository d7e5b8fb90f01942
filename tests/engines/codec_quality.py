# SPDX-License-Identifier: Apache-2.0
"""What a codec costs in quality, on a model that has learnt something
(trained_model.py): on held-out text, the continuation after a prefix
whose KV was

  recompute   computed here (the baseline),
  none        stored in kvtierd and restored exactly,
  fp8-e4m3    stored quantised and restored,
  int4        likewise,
  fp8-e4m3/scales-dropped
              the fp8 blocks as kvtierd stores them, decoded here without
              their scales: a broken codec, which the checks must catch,
  no-prefix   absent (the continuation alone): how much the model uses
              its prefix at all, so what a codec could lose,

through a real kvtierd and the transformers adapter (KvtierCache save and
restore).  For each prefix length: the continuation's perplexity
(teacher-forced), its top-1 agreement with the baseline, the relative
error ||K' - K|| / ||K|| of K and of V (per layer and overall), and
whether the bytes kvtierd holds decode, with codec_ref.py, to what the C
path restored (and how they compare with codec_ref.py's encoding).

    python codec_quality.py --json out.json      # needs KVTIERD, PYTHONPATH
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import codec_ref  # noqa: E402
import kvtd  # noqa: E402
import trained_model  # noqa: E402

BROKEN = "fp8-e4m3/scales-dropped"
NO_PREFIX = "no-prefix"
CODECS = ("none", "fp8-e4m3", "int4", BROKEN, NO_PREFIX)


def window_bytes(lengths, samples: int, new: int) -> int:
    """The held-out text windows() needs."""
    return sum((p + new + 1) * samples for p in lengths)


def windows(text: bytes, lengths, samples: int, new: int) -> dict:
    """samples windows of P + new + 1 bytes for each prefix length P, none
    overlapping another (a shared prefix would be restored, not stored)."""
    need = window_bytes(lengths, samples, new)
    if need > len(text):
        raise ValueError(f"held-out text of {len(text)} bytes is shorter than the {need} asked")
    stride = len(text) // (samples * len(lengths))
    out, k = {}, 0
    for p in lengths:
        out[p] = []
        for _ in range(samples):
            out[p].append(list(text[k * stride: k * stride + p + new + 1]))
            k += 1
    return out


def staged_cache(model, kv):
    """A DynamicCache holding a staging tensor [layers, 2, heads, T, D]."""
    from kvtier import layouts
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    for layer, (k, v) in enumerate(layouts.hf_unstack(kv, kv.shape[3])):
        cache.update(k, v, layer)
    return cache


@torch.no_grad()
def prefix_kv(model, ids):
    """The prefix's KV computed here, as a staging tensor."""
    from kvtier import layouts
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    model(torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return layouts.hf_stack(cache.layers, 0, len(ids))


@torch.no_grad()
def continuation(model, kv, ids):
    """Logits [len(ids), vocab] (f32) of ids fed after a prefix of KV kv
    (None: no prefix)."""
    cache = None if kv is None else staged_cache(model, kv)
    out = model(torch.tensor([ids]), past_key_values=cache, use_cache=kv is not None)
    return out.logits[0].float()


class Restorer:
    """Store a prefix's KV in kvtierd under a codec and restore it: the
    restored staging tensor and the stored bytes."""

    def __init__(self, model, socket: str, codec: str, block_tokens: int):
        from kvtier.hf import KvtierCache

        self.codec, self.block_tokens = codec, block_tokens
        self.kv = KvtierCache(model, socket=socket, block_tokens=block_tokens, codec=codec)
        self.model = model

    def close(self):
        self.kv.close()

    def __call__(self, ids, kv):
        """(restored staging tensor, the blocks' stored bytes)."""
        import kvtier
        from kvtier import layouts

        p = len(ids)
        saved = self.kv.save(ids, staged_cache(self.model, kv))
        assert saved == p // self.block_tokens, f"stored {saved} blocks of {p} tokens"
        cache, t = self.kv.restore(ids + [0])
        assert t == p, f"restored {t} of {p} tokens"
        restored = layouts.hf_stack(cache.layers, 0, t)
        keys = kvtier.hash_chain(ids, self.block_tokens)
        n = p // self.block_tokens
        size = self.kv.ns.info["shard_bytes"]
        L, _, H, _, D = kv.shape
        want = codec_ref.block_bytes(self.codec, L, H, self.block_tokens, D, kv.element_size())
        assert size == want, f"{self.codec}: kvtierd's blocks are {size} bytes, the format's {want}"
        blocks = [bytearray(size) for _ in range(n)]
        _, status = self.kv.ns.load(0, keys, blocks)
        assert all(s == 0 for s in status), f"raw loads: {status}"
        return restored, blocks


def decode_blocks(blocks, codec, kv_shape, dtype, block_tokens, scaled=True):
    L, _, H, _, D = kv_shape
    return torch.cat([codec_ref.decode(b, codec, L, H, block_tokens, D, dtype, scaled)
                      for b in blocks], dim=3)


class Tally:
    """One codec's sums at one prefix length."""

    def __init__(self, layers: int):
        self.nll = 0.0
        self.tokens = 0
        self.agree = 0
        self.max_logit_diff = 0.0
        self.kv_identical = True
        self.logits_identical = True
        self.ref_decode_identical = True
        # The stored blocks against codec_ref's encoding of the same K/V:
        # scale bytes that differ, codes that differ and by how many steps,
        # and of those, codes that are not the other reading's either
        # (codec_ref.encode's inverse): not a near-tie.
        self.scale_bytes = self.scale_bytes_differing = 0
        self.codes = self.codes_differing = self.codes_max_step = 0
        self.codes_not_ties = 0
        self.err2 = torch.zeros(layers, 2, dtype=torch.float64)
        self.ref2 = torch.zeros(layers, 2, dtype=torch.float64)

    def add(self, logits, base_logits, targets, kv, base_kv):
        self.nll += torch.nn.functional.cross_entropy(logits, targets, reduction="sum").item()
        self.tokens += targets.numel()
        self.agree += (logits.argmax(-1) == base_logits.argmax(-1)).sum().item()
        self.max_logit_diff = max(self.max_logit_diff, (logits - base_logits).abs().max().item())
        self.logits_identical &= torch.equal(logits, base_logits)
        if kv is None:
            self.kv_identical = False
            return
        self.kv_identical &= torch.equal(kv, base_kv)
        d = (kv.double() - base_kv.double()).pow(2).sum(dim=(2, 3, 4))
        self.err2 += d
        self.ref2 += base_kv.double().pow(2).sum(dim=(2, 3, 4))

    def compare_encoders(self, blocks, kv, codec: str, block_tokens: int):
        L, _, H, _, D = kv.shape
        for i, theirs in enumerate(blocks):
            block = kv[..., i * block_tokens:(i + 1) * block_tokens, :]
            mine = codec_ref.encode(block, codec)
            other = codec_ref.encode(block, codec, inverse=True)
            s0, c0 = codec_ref.fields(mine, codec, L, H, block_tokens, D)
            _, c2 = codec_ref.fields(other, codec, L, H, block_tokens, D)
            s1, c1 = codec_ref.fields(theirs, codec, L, H, block_tokens, D)
            step = (c0 - c1).abs()
            self.scale_bytes += s0.numel()
            self.scale_bytes_differing += (s0 != s1).sum().item()
            self.codes += c0.numel()
            self.codes_differing += (step > 0).sum().item()
            self.codes_max_step = max(self.codes_max_step, step.max().item())
            self.codes_not_ties += ((c1 != c0) & (c1 != c2)).sum().item()

    def result(self) -> dict:
        rel = (self.err2 / self.ref2).sqrt()
        overall = (self.err2.sum(0) / self.ref2.sum(0)).sqrt()
        none = not self.ref2.any()  # no prefix: no K/V to compare
        return {
            "tokens": self.tokens,
            "ppl": math.exp(self.nll / self.tokens),
            "top1_agree": self.agree / self.tokens,
            "max_logit_diff": self.max_logit_diff,
            "kv_identical": self.kv_identical,
            "logits_identical": self.logits_identical,
            "rel_err_k": None if none else overall[0].item(),
            "rel_err_v": None if none else overall[1].item(),
            "rel_err_k_layers": None if none else rel[:, 0].tolist(),
            "rel_err_v_layers": None if none else rel[:, 1].tolist(),
            "ref_decode_identical": self.ref_decode_identical,
            "ref_encode": {"scale_bytes": self.scale_bytes,
                           "scale_bytes_differing": self.scale_bytes_differing,
                           "codes": self.codes, "codes_differing": self.codes_differing,
                           "codes_max_step": self.codes_max_step,
                           "codes_not_ties": self.codes_not_ties},
        }


def evaluate(model, held_out: bytes, socket: str, lengths=(64, 256, 1024), samples: int = 16,
             new: int = 64, block_tokens: int = 16, codecs=CODECS, log=None) -> dict:
    """The figures of each codec at each prefix length (see the module's
    description); results[P][codec] is a dict of them."""
    stored = [c for c in codecs if c in ("none", "fp8-e4m3", "int4")]
    if BROKEN in codecs and "fp8-e4m3" not in stored:
        stored.append("fp8-e4m3")
    layers = model.config.num_hidden_layers
    restorers = {c: Restorer(model, socket, c, block_tokens) for c in stored}
    results = {}
    try:
        for p, wins in windows(held_out, lengths, samples, new).items():
            tallies = {c: Tally(layers) for c in ("recompute",) + tuple(codecs)}
            for ids in wins:
                prefix, cont = ids[:p], ids[p:p + new]
                targets = torch.tensor(ids[p + 1:p + new + 1])
                base_kv = prefix_kv(model, prefix)
                base = continuation(model, base_kv, cont)
                tallies["recompute"].add(base, base, targets, base_kv, base_kv)
                if NO_PREFIX in codecs:
                    tallies[NO_PREFIX].add(continuation(model, None, cont), base, targets, None,
                                           base_kv)
                for c in stored:
                    kv, blocks = restorers[c](prefix, base_kv)
                    ref = decode_blocks(blocks, c, kv.shape, kv.dtype, block_tokens)
                    if c in codecs:
                        t = tallies[c]
                        t.add(continuation(model, kv, cont), base, targets, kv, base_kv)
                        t.ref_decode_identical &= torch.equal(ref, kv)
                        if c != "none":
                            t.compare_encoders(blocks, base_kv, c, block_tokens)
                    if c == "fp8-e4m3" and BROKEN in codecs:
                        bad = decode_blocks(blocks, c, kv.shape, kv.dtype, block_tokens, False)
                        tallies[BROKEN].add(continuation(model, bad, cont), base, targets, bad,
                                            base_kv)
            results[p] = {c: t.result() for c, t in tallies.items()}
            if log:
                log(format_table({p: results[p]}))
    finally:
        for r in restorers.values():
            r.close()
    return results


def format_table(results: dict) -> str:
    rows = ["| prefix | KV from | perplexity | vs exact | top-1 agree | rel err K | rel err V |",
            "|---:|---|---:|---:|---:|---:|---:|"]
    for p, per in results.items():
        exact = per.get("none", per["recompute"])["ppl"]
        for c, r in per.items():
            errs = " | ".join("–" if e is None else f"{e:.4f}"
                              for e in (r["rel_err_k"], r["rel_err_v"]))
            rows.append(f"| {p} | {c} | {r['ppl']:.4f} | {r['ppl'] / exact:.4f} | "
                        f"{100 * r['top1_agree']:.2f} % | {errs} |")
    return "\n".join(rows)


def format_layers(results: dict, p: int) -> str:
    per = results[p]
    names = [c for c in per if c not in ("recompute", "none", NO_PREFIX)]
    layers = len(per["recompute"]["rel_err_k_layers"])
    rows = ["| layer | " + " | ".join(f"{c} K | {c} V" for c in names) + " |",
            "|---:|" + "---:|" * (2 * len(names))]
    for i in range(layers):
        rows.append(f"| {i} | " + " | ".join(
            f"{per[c]['rel_err_k_layers'][i]:.4f} | {per[c]['rel_err_v_layers'][i]:.4f}"
            for c in names) + " |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--lengths", default="64,256,1024", help="prefix lengths, tokens "
                    "(default: %(default)s)")
    ap.add_argument("--samples", type=int, default=16, help="held-out windows per length "
                    "(default: %(default)s)")
    ap.add_argument("--new", type=int, default=64,
                    help="continuation tokens (default: %(default)s)")
    ap.add_argument("--block-tokens", type=int, default=16, help="(default: %(default)s)")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"),
                    help="the model's and so its KV cache's dtype (default: %(default)s)")
    ap.add_argument("--codecs", default=",".join(CODECS), help="(default: %(default)s)")
    ap.add_argument("--model", default="long", choices=("long", "small"),
                    help="long: trained_model.SETTINGS' model, trained on first use; small: "
                    "SMALL's, kept with the tests (default: %(default)s)")
    ap.add_argument("--model-cache", default=None, help="where the long model is kept "
                    "(default: $KVT_MODEL_CACHE, else ~/.cache/kvtier/models)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON to PATH")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lengths = [int(x) for x in args.lengths.split(",")]
    err = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if args.model == "small":
        t = trained_model.kept()
    else:
        t = trained_model.trained(args.model_cache, log=err)
    model = t.load(getattr(torch, args.dtype))
    with kvtd.Daemon("[pool]\ncapacity = 1G\nextent_size = 64M\nhugepages = off\n") as d:
        res = evaluate(model, t.held_out, d.socket, lengths, args.samples, args.new,
                       args.block_tokens, args.codecs.split(","), log=err)
    rec = t.record
    print(f"model: {rec['parameters']} parameters, {model.config.num_hidden_layers} layers, "
          f"{model.config.num_key_value_heads} KV heads of {model.config.head_dim}, "
          f"KV {args.dtype}; trained {rec['settings']['steps']} steps "
          f"({rec['tokens_seen']} tokens, final loss {rec['final_loss']:.3f})")
    print(format_table(res))
    print()
    print(format_layers(res, lengths[-1]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": rec, "model_path": t.path, "dtype": args.dtype,
                       "samples": args.samples, "new": args.new,
                       "block_tokens": args.block_tokens,
                       "results": {str(p): r for p, r in res.items()}}, f, indent=1)


if __name__ == "__main__":
    main()

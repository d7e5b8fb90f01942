# SPDX-License-Identifier: Apache-2.0
"""Small Llamas that have learnt something: bytes of English text.

A random model's logits say nothing about what a lossy KV cache costs; a
model trained on real text does.  These read the plain-text documents
Debian installs under /usr/share/doc (READMEs, NEWS, .txt/.md/.rst files,
gzipped or not; changelogs and copyright files left out, being mostly
lists and licences), one byte a token (a vocabulary of 256, no tokenizer),
trained for a fixed number of steps on one CPU thread.  Two of them:

SMALL, kept with the tests (models/llama-bytes-small: its bfloat16
  weights, under 1 MiB): what test_codec_quality.py checks in every run,
  so that no run trains anything.  `python trained_model.py --small`
  trains it again from this machine's corpus (minutes) and writes it
  there; with the same corpus, torch and CPU the bytes come out the same.
SETTINGS, the larger one, trained on first use (three to five minutes on
  a quiet machine, over fifteen on a busy one) and saved under a cache
  directory in a folder named by a digest of SETTINGS and of the corpus
  (each file's path and size), so that the tests under KVT_LONG=1 and the
  benchmark that use it load it again, and a change of either trains a
  new one.

Files are split by a digest of their content, so that a document Debian
installs twice (under two packages) is never on both sides: HELD_OUT of
every 16 digests are held out, and training never reads them.  The split
depends on a document's bytes alone, so a document held out on one
machine is held out on every other: the kept model never read any text
that a test elsewhere evaluates it on.

    python trained_model.py [--cache DIR]     # trains SETTINGS if needed; prints the folder
    python trained_model.py --small [--out DIR]   # trains SMALL into DIR (default: the kept one)
"""

import argparse
import fcntl
import gzip
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time

CORPUS_ROOT = "/usr/share/doc"

#: Everything that decides the weights; part of the cache key.
SETTINGS = {
    "version": 1,
    "layers": 4,
    "hidden": 256,
    "heads": 4,
    "kv_heads": 2,
    "head_dim": 64,
    "intermediate": 688,
    "vocab": 256,
    "seq": 1152,  # the longest evaluation (1024 + continuation) stays inside
    "batch": 4,
    "steps": 300,
    "lr": 2e-3,
    "warmup": 30,
    "weight_decay": 0.1,
    "seed": 0,
    "autocast_bf16": True,
}

#: The model kept with the tests: a quarter of SETTINGS' width and half
#: its layers (the same heads of 64, so the same codec tiles), trained on
#: twice the tokens, which leaves it better at the text than SETTINGS'
#: model (docs/benchmarks.md, "Codec quality").
SMALL = {
    "version": 1,
    "layers": 2,
    "hidden": 128,
    "heads": 2,
    "kv_heads": 2,
    "head_dim": 64,
    "intermediate": 344,
    "vocab": 256,
    "seq": 1152,
    "batch": 4,
    "steps": 600,
    "lr": 3e-3,
    "warmup": 30,
    "weight_decay": 0.1,
    "seed": 0,
    "autocast_bf16": True,
}

#: Where SMALL's weights are kept, with the tests.
KEPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "llama-bytes-small")

#: Digest buckets (of 16) held out of training.
HELD_OUT = 2
#: Corpora smaller than this are not worth training on.
MIN_CORPUS_BYTES = 4 << 20
#: Bytes between two documents of a split.
SEPARATOR = b"\n\n\n"

_NAMES = (".txt", ".md", ".rst")


def _wanted(name: str) -> bool:
    low = name.lower().removesuffix(".gz")
    if "changelog" in low or "copyright" in low:
        return False
    return low.endswith(_NAMES) or low.startswith(("readme", "news"))


def corpus_files(root: str = CORPUS_ROOT) -> list[tuple[str, int]]:
    """The corpus: (path, size) of each text file under root, sorted."""
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            if _wanted(n) and os.path.isfile(p) and not os.path.islink(p):
                out.append((p, os.path.getsize(p)))
    return sorted(out)


def _read(path: str) -> bytes:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except (OSError, EOFError):
        return b""
    # Binary files (a few READMEs are images or archives) are left out.
    return b"" if b"\0" in data[:4096] else data


def is_held_out(data: bytes) -> bool:
    return hashlib.sha256(data).digest()[0] % 16 < HELD_OUT


def read_splits(files) -> tuple[bytes, bytes]:
    """(training text, held-out text), documents deduplicated by content."""
    seen, train, held = set(), [], []
    for path, _ in files:
        data = _read(path)
        digest = hashlib.sha256(data).digest()
        if not data or digest in seen:
            continue
        seen.add(digest)
        (held if is_held_out(data) else train).append(data)
    return SEPARATOR.join(train), SEPARATOR.join(held)


def cache_key(files, settings=None) -> str:
    h = hashlib.sha256(json.dumps(settings or SETTINGS, sort_keys=True).encode())
    h.update(f"held_out={HELD_OUT}/16\n".encode())
    for path, size in files:
        h.update(f"{path}\t{size}\n".encode())
    return h.hexdigest()[:16]


def default_cache() -> str:
    """$KVT_MODEL_CACHE (the build sets it to BUILD/models), else the
    user's cache directory."""
    return os.environ.get("KVT_MODEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvtier", "models")


class CorpusMissing(RuntimeError):
    """Too little text on this machine to train on."""


def config(s=None):
    from transformers import LlamaConfig

    s = s or SETTINGS
    return LlamaConfig(vocab_size=s["vocab"], hidden_size=s["hidden"],
                       intermediate_size=s["intermediate"], num_hidden_layers=s["layers"],
                       num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
                       head_dim=s["head_dim"], max_position_embeddings=s["seq"],
                       bos_token_id=None, eos_token_id=None, pad_token_id=None,
                       tie_word_embeddings=True)


def train(train_text: bytes, out_dir: str, log=print, settings=None, save_dtype=None) -> dict:
    """Train a model of settings (default SETTINGS) on train_text and save
    it in out_dir (its weights in save_dtype, default as trained: float32);
    returns the training record (also saved there as training.json)."""
    import torch
    import transformers
    from transformers import LlamaForCausalLM

    s = settings or SETTINGS
    torch.manual_seed(s["seed"])
    data = torch.frombuffer(bytearray(train_text), dtype=torch.uint8)
    model = LlamaForCausalLM(config(s))
    opt = torch.optim.AdamW(model.parameters(), lr=s["lr"], betas=(0.9, 0.95),
                            weight_decay=s["weight_decay"])
    gen = torch.Generator().manual_seed(s["seed"])
    t0, losses = time.monotonic(), []
    for step in range(s["steps"]):
        warm = min(1.0, (step + 1) / s["warmup"])
        decay = 0.5 * (1 + math.cos(math.pi * step / s["steps"]))
        for g in opt.param_groups:
            g["lr"] = s["lr"] * warm * (0.1 + 0.9 * decay)
        starts = torch.randint(0, data.numel() - s["seq"] - 1, (s["batch"],), generator=gen)
        x = torch.stack([data[i:i + s["seq"]] for i in starts.tolist()]).long()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=s["autocast_bf16"]):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if log and (step % 25 == 0 or step == s["steps"] - 1):
            log(f"step {step}: loss {loss.item():.3f} ({time.monotonic() - t0:.0f} s)")
    seconds = time.monotonic() - t0
    if save_dtype is not None:
        model = model.to(save_dtype)
    model.save_pretrained(out_dir, safe_serialization=True)
    record = {
        "settings": s,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_bytes": len(train_text),
        "train_sha256": hashlib.sha256(train_text).hexdigest(),
        "tokens_seen": s["steps"] * s["batch"] * s["seq"],
        "seconds": round(seconds, 1),
        "final_loss": sum(losses[-20:]) / len(losses[-20:]),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    with open(os.path.join(out_dir, "training.json"), "w") as f:
        json.dump(record, f, indent=1)
    return record


class Trained:
    """The trained model's folder, its training record and the held-out
    text (which training never read)."""

    def __init__(self, path: str, held_out: bytes, files: list):
        self.path = path
        self.held_out = held_out
        self.files = files
        with open(os.path.join(path, "training.json")) as f:
            self.record = json.load(f)

    def load(self, dtype):
        """The model in dtype (its KV cache is that dtype too), in eval mode."""
        from transformers import LlamaForCausalLM

        return LlamaForCausalLM.from_pretrained(self.path, dtype=dtype).eval()


def _corpus(root: str):
    """(files, training text, held-out text) of root; raises CorpusMissing
    where it holds too little text to train on."""
    files = corpus_files(root)
    if sum(size for _, size in files) < MIN_CORPUS_BYTES // 4:  # sizes are compressed
        raise CorpusMissing(f"{root} holds {len(files)} text files: too little to train on")
    train_text, held = read_splits(files)
    if len(train_text) < MIN_CORPUS_BYTES:
        raise CorpusMissing(f"{root}'s text is {len(train_text)} bytes: too little to train on")
    return files, train_text, held


def kept(root: str = CORPUS_ROOT) -> Trained:
    """SMALL's model as kept with the tests, and root's held-out text (any
    amount: the caller says what it needs)."""
    files = corpus_files(root)
    _, held = read_splits(files)
    return Trained(KEPT, held, files)


def train_small(out: str = KEPT, root: str = CORPUS_ROOT, log=print) -> Trained:
    """Train SMALL on root's text into out (replacing what is there), its
    weights in bfloat16: the dtype the tests run it in, so that they run
    exactly what was trained, rounded once."""
    import torch

    files, train_text, held = _corpus(root)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".train-", dir=parent)
    try:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        if log:
            log(f"training {out} on {len(train_text)} bytes of {root}")
        record = train(train_text, tmp, log, SMALL, torch.bfloat16)
        torch.set_num_threads(threads)
        # What the weights depend on, and nothing else (not the time it
        # took): the record is kept with them.
        if log:
            log(f"trained in {record.pop('seconds')} s")
        record["corpus"] = cache_key(files, SMALL)
        with open(os.path.join(tmp, "training.json"), "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
        os.chmod(tmp, 0o755)
        shutil.rmtree(out, ignore_errors=True)
        os.rename(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Trained(out, held, files)


def trained(cache: str | None = None, root: str = CORPUS_ROOT, log=print) -> Trained:
    """The model of SETTINGS trained on root's text: loaded from the cache,
    or trained now and cached (one process trains; others wait for it).
    Raises CorpusMissing where root holds too little text."""
    import torch

    files, train_text, held = _corpus(root)
    cache = cache or default_cache()
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, f"llama-bytes-{cache_key(files)}")
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(path, "training.json")):
            tmp = tempfile.mkdtemp(prefix=".train-", dir=cache)
            try:
                # One thread: on a busy machine, two threads that wait for
                # each other at every operation run several times slower.
                threads = torch.get_num_threads()
                torch.set_num_threads(1)
                if log:
                    log(f"training {path} on {len(train_text)} bytes of {root}")
                train(train_text, tmp, log)
                torch.set_num_threads(threads)
                os.chmod(tmp, 0o755)
                os.rename(tmp, path)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return Trained(path, held, files)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=None, help="cache directory (default: $KVT_MODEL_CACHE, "
                    "else ~/.cache/kvtier/models)")
    ap.add_argument("--root", default=CORPUS_ROOT, help="corpus root (default: %(default)s)")
    ap.add_argument("--small", action="store_true", help="train SMALL, the model kept with "
                    "the tests, into --out")
    ap.add_argument("--out", default=KEPT, help="with --small: where (default: %(default)s)")
    args = ap.parse_args()
    err = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if args.small:
        t = train_small(args.out, args.root, log=err)
    else:
        t = trained(args.cache, args.root, log=err)
    print(t.path)
    print(json.dumps(t.record, indent=1))


if __name__ == "__main__":
    main()

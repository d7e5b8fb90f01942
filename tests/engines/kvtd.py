# SPDX-License-Identifier: Apache-2.0
"""Test helpers: a real kvtierd in a private directory, and a small random
Llama with a word-level tokenizer built locally (nothing is downloaded)."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

KVTIERD = os.environ.get("KVTIERD", "kvtierd")


class Daemon:
    """kvtierd on its own socket; config is extra INI text.  Its pool
    (and those the tests configure) never takes hugetlb pages, which
    test-hugepages counts while the engine suite runs beside it."""

    def __init__(self, config: str = "", spill_mb: int = 0):
        self.dir = tempfile.mkdtemp(prefix="kvt-engines-")
        os.chmod(self.dir, 0o755)
        self.socket = os.path.join(self.dir, "kvtierd.sock")
        self.log = os.path.join(self.dir, "kvtierd.log")
        self.config = os.path.join(self.dir, "kvtierd.conf")
        text = f"[daemon]\nsocket = {self.socket}\nruntime_dir = {self.dir}\nquarantine_ms = 50\n"
        text += "[pool]\ncapacity = 256M\nextent_size = 32M\nhugepages = off\n" \
            if "[pool]" not in config else ""
        if spill_mb:
            text += f"[spill.test]\npath = {self.dir}/spill0\ncapacity = {spill_mb}M\n"
        self.text = text + config
        with open(self.config, "w") as f:
            f.write(self.text)
        self.proc = None
        self.start()

    def start(self):
        logf = open(self.log, "a")
        self.proc = subprocess.Popen([KVTIERD, "--config", self.config], stdout=logf,
                                     stderr=subprocess.STDOUT, close_fds=True)
        logf.close()
        for _ in range(1500):
            if self.proc.poll() is not None:
                raise RuntimeError(f"kvtierd exited at start:\n{self.log_text()}")
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(self.socket)
                return
            except OSError:
                time.sleep(0.02)
            finally:
                s.close()
        raise RuntimeError("kvtierd did not start listening")

    def kill(self):
        """SIGKILL, as a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def restart(self):
        self.kill()
        self.start()

    def log_text(self) -> str:
        try:
            with open(self.log) as f:
                return f.read()
        except OSError:
            return ""

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


VOCAB = 1000


def make_model(path: str, layers: int = 2, hidden: int = 128, heads: int = 4,
               kv_heads: int = 2, head_dim: int = 32, intermediate: int = 256,
               max_pos: int = 2048, seed: int = 0):
    """A random Llama saved with save_pretrained, plus its tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=intermediate,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv_heads, head_dim=head_dim,
                      max_position_embeddings=max_pos, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    # Random weights give near-uniform logits; wider ones make greedy
    # decoding decisive, so that identical tokens mean something.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    model.save_pretrained(path, safe_serialization=True)
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    vocab.update({f"w{i}": i for i in range(4, VOCAB)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>")
    fast.save_pretrained(path)
    return path


def prompt_ids(n: int, seed: int = 1) -> list[int]:
    """n random token ids that are words of the tokenizer (no specials)."""
    import random

    rng = random.Random(seed)
    return [rng.randrange(4, VOCAB) for _ in range(n)]


def prompt_text(ids) -> str:
    return " ".join(f"w{i}" for i in ids)

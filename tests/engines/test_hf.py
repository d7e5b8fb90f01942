# SPDX-License-Identifier: Apache-2.0
"""transformers through kvtierd: a restored prefix gives the same tokens as
a run without kvtier and bit-identical logits to the same cache computed
in-process; an altered block changes the output; tenants share nothing."""

import os
import pytest
import torch

import kvtd
import kvtier
from kvtier.hf import KvtierCache

BLOCK = 16
NEW = 12


def load(model_dir, dtype, device="cpu"):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).eval().to(device)


def generate(model, ids, cache=None):
    with torch.no_grad():
        return model.generate(torch.tensor([ids], device=model.device), past_key_values=cache,
                              max_new_tokens=NEW,
                              do_sample=False, return_dict_in_generate=True,
                              output_logits=True)


def prefix_cache(model, ids, n):
    """The cache of ids[:n] computed here, without kvtier."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.tensor([ids[:n]], device=model.device), past_key_values=cache, use_cache=True)
    return cache


def same_logits(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.logits, b.logits))


def gpu_ready():
    return torch.cuda.is_available() and kvtier.HAVE_CUDA


# On a GPU (tests/gpu/run.sh runs these where the packages are) the copies
# go through the library's CUDA path.
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not gpu_ready(), reason="no CUDA device, or kvtier built without CUDA"))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_restored_prefix_is_exact(daemon, model_dir, dtype, device):
    model = load(model_dir, dtype, device)
    ids = kvtd.prompt_ids(9 * BLOCK + 5)
    plain = generate(model, ids)
    with KvtierCache(model, socket=daemon.socket, block_tokens=BLOCK) as kv:
        first = kv.generate(ids, max_new_tokens=NEW, do_sample=False, output_logits=True)
        assert kv.restored_tokens == 0
        assert torch.equal(first.sequences, plain.sequences)
        again = kv.generate(ids, max_new_tokens=NEW, do_sample=False, output_logits=True)
        assert kv.restored_tokens == 9 * BLOCK
    assert torch.equal(again.sequences, plain.sequences), "tokens differ from a run without kvtier"
    ref = generate(model, ids, prefix_cache(model, ids, 9 * BLOCK))
    assert same_logits(again, ref), "logits differ from the same prefix computed in-process"


def test_prompt_covered_by_blocks_leaves_one_token(daemon, model_dir):
    model = load(model_dir, torch.float32)
    ids = kvtd.prompt_ids(4 * BLOCK, seed=5)
    with KvtierCache(model, socket=daemon.socket, block_tokens=BLOCK) as kv:
        plain = kv.generate(ids, max_new_tokens=NEW, do_sample=False)
        again = kv.generate(ids, max_new_tokens=NEW, do_sample=False)
        assert kv.restored_tokens == 3 * BLOCK  # floor((n - 1) / block) blocks
    assert torch.equal(plain.sequences, again.sequences)


def test_altered_block_changes_output(daemon, model_dir):
    """The negative control: the check above can fail."""
    model = load(model_dir, torch.float32)
    ids = kvtd.prompt_ids(6 * BLOCK + 3, seed=11)
    with KvtierCache(model, socket=daemon.socket, block_tokens=BLOCK) as kv:
        kv.generate(ids, max_new_tokens=NEW, do_sample=False)
        good = kv.generate(ids, max_new_tokens=NEW, do_sample=False, output_logits=True)
        keys = kvtier.hash_chain(ids[: 6 * BLOCK], BLOCK)
        lease = kv.ns.acquire(0, keys[2 * kvtier.KEY_BYTES: 3 * kvtier.KEY_BYTES])[0]
        assert lease["status"] == 0
        # Write into block 2 in the pool, as a buggy copy would.
        mem = kv.client.map(lease["extent_id"], lease["offset"], lease["bytes"])
        mem[: lease["bytes"] // 2] = bytes(lease["bytes"] // 2)
        kv.client.release([lease["handle"]])
        bad = kv.generate(ids, max_new_tokens=NEW, do_sample=False, output_logits=True)
        assert kv.restored_tokens == 6 * BLOCK
    assert not same_logits(good, bad), "an altered block went unnoticed"


def restore_as(uid, model, socket, ids, weights):
    """restore() in a forked child that has become uid: the tokens it finds."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgid(uid)
            os.setuid(uid)
            with KvtierCache(model, socket=socket, block_tokens=BLOCK, weights=weights) as kv:
                n = kv.restore(ids)[1]
            os.write(w, str(n).encode())
        except BaseException as e:
            os.write(w, f"error: {e!r}".encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = f.read()
    os.waitpid(pid, 0)
    assert got.isdigit(), f"the child as uid {uid} failed: {got}"
    return int(got)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another uid")
def test_tenants_share_nothing(daemon, model_dir):
    model = load(model_dir, torch.float32)
    ids = kvtd.prompt_ids(9 * BLOCK + 5)
    with KvtierCache(model, socket=daemon.socket, block_tokens=BLOCK) as kv:
        kv.generate(ids, max_new_tokens=2, do_sample=False)
        assert kv.restore(ids)[1] == 9 * BLOCK
        weights = kv.identity.weights
    # Another uid finds none of it; uid 0 from the same kind of child does.
    assert restore_as(65534, model, daemon.socket, ids, weights) == 0
    assert restore_as(0, model, daemon.socket, ids, weights) == 9 * BLOCK


def test_without_kvtierd_generation_goes_on(model_dir):
    """kvtierd absent when the cache is made: generation is the model's
    own, and once kvtierd is there the cache connects by itself."""
    import time

    model = load(model_dir, torch.float32)
    ids = kvtd.prompt_ids(5 * BLOCK + 2, seed=13)
    plain = generate(model, ids)
    d = kvtd.Daemon()
    d.stop()
    try:
        with KvtierCache(model, socket=d.socket, block_tokens=BLOCK) as kv:
            out = kv.generate(ids, max_new_tokens=NEW, do_sample=False)
            assert kv.restored_tokens == 0 and kv.ns is None
            assert torch.equal(out.sequences, plain.sequences)
            d.start()
            for _ in range(200):  # the retry comes a second after the last
                out = kv.generate(ids, max_new_tokens=NEW, do_sample=False)
                assert torch.equal(out.sequences, plain.sequences)
                if kv.restored_tokens:
                    break
                time.sleep(0.05)
            assert kv.restored_tokens == 5 * BLOCK, "never connected to kvtierd once it was there"
    finally:
        d.close()

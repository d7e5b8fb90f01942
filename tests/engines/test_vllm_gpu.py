# SPDX-License-Identifier: Apache-2.0
"""The views vLLM 0.32 allocates for its GPU backends (vllm-views.json:
every KVCacheLayout order, kernel-page split and dtype, for the
FlashAttention-family cell rule and the MLA latent rule), rebuilt without
vLLM, stored into a real kvtierd and loaded back through the layouts
kvtier.vllm derives: on a GPU through the library's CUDA path
(kvtier.CudaContext, kernel and copy-engine paths), and here on the CPU
path too, which checks the rebuilt views themselves.  kvtierd's blocks
are compared with what the backend's own split expression reads, byte
for byte, in both directions; test_layouts.py checks that the record
is what vLLM allocates."""

import pytest
import torch

import kvtier
import vllm_views

GPU = torch.cuda.is_available() and kvtier.HAVE_CUDA
CASES = vllm_views.load_fixture()
RULE_BACKEND = {"cell": "FLASH_ATTN", "latent": "FLASHMLA"}


@pytest.fixture(scope="module")
def client():
    import kvtd

    with kvtd.Daemon() as d, kvtier.Client(socket=d.socket, name="vllm-gpu-test") as c:
        yield c


def cuda_copy(ctx, ns):
    """A round trip's copies through the CUDA path, on the current
    stream, waited for."""
    def copy(load, lay, keys, idx):
        submit = ctx.load if load else ctx.store
        with submit(ns, 0, lay, keys, idx, torch.cuda.current_stream().cuda_stream) as job:
            status = job.wait()
        return sum(1 for s in status if s == 0), status
    return copy


def test_fixture_covers_the_gpu_layouts():
    """Every order unsplit for both rules and every cell dtype, splits too."""
    seen = {(c["rule"], c["order"], c["dtype"]) for c in CASES if c["kernel"] is None}
    assert len({o for _, o, _ in seen}) == 6, seen
    assert {d for r, _, d in seen if r == "cell"} == {"float16", "bfloat16", "float32",
                                                       "float8_e4m3fn"}
    assert any(c["kernel"] for c in CASES if c["rule"] == "latent")


@pytest.mark.parametrize("rule", ["cell", "latent"])
def test_recorded_views_on_the_cpu(client, rule):
    ran = 0
    for case in (c for c in CASES if c["rule"] == rule):
        layers = vllm_views.views(case, "cpu")
        vllm_views.round_trip(client, RULE_BACKEND[rule], rule, layers, case["mla"],
                              tag=(case["order"], case["kernel"], "cpu"))
        ran += 1
    assert ran >= 6, ran


@pytest.mark.skipif(not GPU, reason="needs a GPU and kvtier built with CUDA")
@pytest.mark.parametrize("path", ["kernel", "engine"])
@pytest.mark.parametrize("rule", ["cell", "latent"])
def test_recorded_views_on_the_gpu(client, rule, path):
    """The same views in device memory, through the CUDA path."""
    ran = 0
    with kvtier.CudaContext(client, torch.cuda.current_device(), copy_path=path) as ctx:
        for case in (c for c in CASES if c["rule"] == rule):
            layers = vllm_views.views(case, "cuda")
            ns = vllm_views.namespace(client, layers[0].dtype, case["mla"])
            vllm_views.round_trip(client, RULE_BACKEND[rule], rule, layers, case["mla"],
                                  copy=cuda_copy(ctx, ns),
                                  tag=(case["order"], case["kernel"], path))
            ran += 1
        stats = ctx.stats()
    assert ran >= 6, ran
    assert stats["copies_" + path] > 0, stats

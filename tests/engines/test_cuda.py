# SPDX-License-Identifier: Apache-2.0
"""kvtier.CudaContext and its load/store against a real kvtierd.

Every argument is checked before the driver is asked for anything, so the
checks run on machines without a GPU: CudaContext's options before the
context is made, load/store's on a context that was never set up (its
__init__ failed, or was not called), where an argument that passes the
checks meets the closed context (EBADF) instead.  A round trip through a
GPU runs where torch sees one."""

import ctypes
import errno
import re

import pytest
import torch

import kvtier

pytestmark = pytest.mark.skipif(not kvtier.HAVE_CUDA, reason="kvtier was built without CUDA")

GPU = torch.cuda.is_available()
L, T, H, D = 2, 16, 2, 32  # layers, tokens per page and block, heads, head bytes
PAGES = 8

# kvt_cuda_stats' fields, as in client/kvtier-cuda.h.
STATS = {"ranges", "ranges_pinned", "ranges_pending", "ranges_failed", "ranges_stale",
         "bytes_pinned", "bytes_pending", "bytes_failed", "pin_calls", "pin_failures",
         "pin_ns", "pin_max_ns", "copies_kernel", "copies_engine", "blocks_unpinned"}


def open_ns(c):
    return c.open_namespace("cuda-test", layers=L, kv_heads=H, head_bytes=D, block_tokens=T,
                            dtype=kvtier.DTYPES["float16"])


def layout(bases, n_layers=L, n_pages=PAGES, kind=kvtier.INDEX_PAGE, keep=None):
    """Pages of [n_layers][2][T][H][D bytes] at bases (one per layer)."""
    page = 2 * T * H * D
    return kvtier.Layout(n_layers, 2, H, D, T, bases, T * H * D, page, H * D, D,
                         index_kind=kind, keep=keep, n_pages=n_pages)


def unset_context(c):
    """A CudaContext whose set-up failed (no GPU) or never ran: no CUDA
    call was made for it, and every call on it ends in EBADF."""
    ctx = kvtier.CudaContext.__new__(kvtier.CudaContext)
    if not GPU:
        with pytest.raises(kvtier.Error) as e:
            ctx.__init__(c)
        assert e.value.errno == errno.ENODEV
    return ctx


def driver_loads() -> bool:
    """Whether the NVIDIA driver's library is there to load."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


# The driver each CUDA runtime needs at least (client/cuda-device.c).
DRIVER_NEEDED = {"12": "525", "13": "580"}


@pytest.mark.skipif(GPU, reason="needs a machine without a GPU")
def test_why_without_a_gpu():
    """cuda_unavailable() says what is missing: on a machine without the
    driver, that, and the driver the runtime linked in needs; with a
    driver but no GPU, that there is no device."""
    why = kvtier.cuda_unavailable()
    assert why == kvtier.cuda_unavailable(0) == kvtier.cuda_unavailable(device=7)
    if driver_loads():
        assert why.startswith("no CUDA device"), why
        return
    m = re.fullmatch(r"no NVIDIA driver \(libcuda\.so\.1 cannot be loaded\): the CUDA path "
                     r"needs one for its CUDA (\d+)\.\d+ runtime(?: \(driver (\d+) or newer\))?",
                     why)
    assert m, why
    assert m[2] == DRIVER_NEEDED.get(m[1]), why
    with pytest.raises(ValueError, match="device must be >= 0"):
        kvtier.cuda_unavailable(-1)


@pytest.mark.skipif(GPU, reason="needs a machine without a GPU")
def test_context_without_a_gpu(daemon):
    """ENODEV with the reason cuda_unavailable() gives, whatever valid
    options it was given."""
    why = kvtier.cuda_unavailable(0)
    with kvtier.Client(socket=daemon.socket) as c:
        for kw in [{}, {"copy_path": "kernel", "max_ctas": 65535, "pin_background": True},
                   {"copy_path": "engine", "max_ctas": 0}, {"copy_path": "auto"}]:
            with pytest.raises(kvtier.Error) as e:
                kvtier.CudaContext(c, 0, **kw)
            assert e.value.errno == errno.ENODEV
            assert e.value.strerror == why
            assert e.value.call == "CudaContext"


def test_context_options_checked_first(daemon):
    """Bad options are refused before a context is made (with a GPU too),
    each saying what is allowed."""
    with kvtier.Client(socket=daemon.socket) as c:
        with pytest.raises(ValueError, match="copy_path must be 'auto', 'kernel' or 'engine'"):
            kvtier.CudaContext(c, copy_path="bogus")
        with pytest.raises(TypeError, match="copy_path must be"):
            kvtier.CudaContext(c, copy_path=1)
        for bad in (-1, 65536, 1 << 40):
            with pytest.raises(ValueError, match="max_ctas must be 0 .* to 65535"):
                kvtier.CudaContext(c, max_ctas=bad)
        with pytest.raises(TypeError):  # keyword-only
            kvtier.CudaContext(c, 0, "kernel")
        with pytest.raises(TypeError):
            kvtier.CudaContext(c, copy_mode="kernel")


def test_submit_checked_before_the_context(daemon):
    """Each bad argument of load/store is a ValueError or TypeError that
    names what is allowed; each valid combination passes the checks and
    reaches the context (EBADF here, since it was never set up)."""
    with kvtier.Client(socket=daemon.socket) as c, open_ns(c) as ns:
        ctx = unset_context(c)
        keys = kvtier.hash_chain(range(3 * T), T)
        lay = layout([0x10000, 0x20000])
        assert lay.block_bytes(T) == ns.info["shard_bytes"]
        g0, g1 = layout([0x10000], n_layers=1), layout([0x20000], n_layers=1)
        slots = layout([0x10000], n_layers=1, kind=kvtier.INDEX_SLOT)
        idx = [5, 1, 6]
        bad = [
            (ValueError, "after must be 'stream', 'event' or 'none'", {"after": "later"}),
            (TypeError, "after must be", {"after": 1}),
            (ValueError, "event= needs after='event'", {"event": 0x1234}),
            (ValueError, "event= needs after='event'", {"event": 0x1234, "after": "none"}),
            (ValueError, "after='event' needs event=", {"after": "event"}),
            (ValueError, "after='event' needs event=", {"after": "event", "event": 0}),
            (TypeError, "event is a cudaEvent_t as an int", {"after": "event", "event": "e"}),
            (ValueError, "stream only applies with after='stream'",
             {"stream": 0x99, "after": "none"}),
            (ValueError, "layout and groups are exclusive", {"groups": [g0, g1]}),
            (ValueError, "groups takes 1 to 16 layouts, got 17",
             {"layout": None, "groups": [g0] * 17}),
            (ValueError, "groups takes 1 to 16 layouts, got 0", {"layout": None, "groups": []}),
            (TypeError, r"groups\[1\] must be a kvtier.Layout",
             {"layout": None, "groups": [g0, "g1"]}),
            (TypeError, "groups must be a sequence", {"layout": None, "groups": 3}),
            (TypeError, "layout must be a kvtier.Layout", {"layout": None}),
            (ValueError, "2 groups need 2 group_indices, got 1",
             {"layout": None, "indices": None, "groups": [g0, g1], "group_indices": [idx]}),
            (ValueError, r"3 keys need 3 indices in group_indices\[1\], got 2",
             {"layout": None, "indices": None, "groups": [g0, g1],
              "group_indices": [idx, [0, 1]]}),
            (ValueError, "indices and group_indices are exclusive",
             {"layout": None, "groups": [g0, g1], "group_indices": [idx, idx]}),
            (ValueError, "group_indices needs groups=", {"indices": None,
                                                         "group_indices": [idx]}),
            (TypeError, "indices are needed", {"indices": None}),
            (ValueError, "3 keys need 3 indices, got 2", {"indices": [5, 1]}),
            (ValueError, "3 keys need 48 indices, got 3",  # slot indices, one group
             {"layout": None, "groups": [slots, g1]}),
            (ValueError, "needs n_pages= .* in the layout", {"layout": layout([1, 2], n_pages=0)}),
            (ValueError, r"needs n_pages= .* in groups\[1\]",
             {"layout": None, "groups": [g0, layout([2], n_layers=1, n_pages=0)]}),
            (ValueError, "the layouts of groups make blocks of 2048 bytes; the namespace's "
             "shard has 4096", {"layout": None, "groups": [g0]}),
            (ValueError, "the layout makes blocks of 6144 bytes",
             {"layout": layout([1, 2, 3], n_layers=3)}),
        ]
        for submit in (ctx.load, ctx.store):
            for exc, msg, kw in bad:
                args = {"layout": lay, "indices": idx}
                args.update(kw)
                with pytest.raises(exc, match=msg):
                    submit(ns, 0, args.pop("layout"), keys, args.pop("indices"), **args)
            with pytest.raises(ValueError, match="keys are 32 bytes each"):
                submit(ns, 0, lay, keys[:40], idx)
            with pytest.raises(ValueError, match="shard 1 is past the namespace's 1 shards"):
                submit(ns, 1, lay, keys, idx)
        good = [
            ((lay, keys, idx), {}),
            ((lay, keys, idx, 0x99), {}),
            ((lay, keys, idx), {"after": "stream", "wait_pinned": False}),
            ((lay, keys, idx), {"after": "event", "event": 0x1234}),
            ((lay, keys, idx), {"after": "none"}),
            ((None, keys, idx), {"groups": [g0, g1]}),
            ((None, keys, None), {"groups": (g0, g1), "group_indices": [idx, [0, 2, 4]]}),
            ((None, keys, None), {"groups": [g0, g1], "group_indices": [idx, idx],
                                  "after": "event", "event": 0x1234, "wait_pinned": True}),
            ((lay, b"", []), {}),
        ]
        for submit in (ctx.load, ctx.store):
            for args, kw in good:
                with pytest.raises(kvtier.Error) as e:
                    submit(ns, 0, *args, **kw)
                assert e.value.errno == errno.EBADF, (args, kw)
                assert "CUDA context is closed" in e.value.strerror


def test_wait_pinned_and_stats_checks(daemon):
    with kvtier.Client(socket=daemon.socket) as c:
        ctx = unset_context(c)
        for bad in (-1, -0.001, float("nan"), 1e12):
            with pytest.raises(ValueError, match="timeout must be 0 to 2147483 seconds, or None"):
                ctx.wait_pinned(bad)
        with pytest.raises(TypeError, match="timeout is a number of seconds"):
            ctx.wait_pinned("1")
        for call in (lambda: ctx.wait_pinned(), lambda: ctx.wait_pinned(timeout=0.5),
                     ctx.stats):
            with pytest.raises(kvtier.Error) as e:
                call()
            assert e.value.errno == errno.EBADF


def gpu_layout(cache, groups=False):
    bases = [cache[i].data_ptr() for i in range(L)]
    if groups:
        return [layout([b], n_layers=1, keep=cache) for b in bases]
    return layout(bases, keep=cache)


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_round_trip_on_a_gpu(daemon):
    """Store after an event, load by layer groups at once: the same bytes
    in the pages asked for, nothing elsewhere; stats as the C struct."""
    dev = torch.device("cuda", 0)
    with kvtier.Client(socket=daemon.socket) as c, open_ns(c) as ns, \
            kvtier.CudaContext(c, 0, copy_path="kernel", max_ctas=4,
                               pin_background=True) as ctx:
        assert ctx.wait_pinned(timeout=60)
        keys = kvtier.hash_chain(range(3 * T), T)
        # [layer][page][plane][token][head][D bytes], as layout() describes.
        src = torch.randint(0, 256, (L, PAGES, 2, T, H, D), dtype=torch.uint8, device=dev)
        done = torch.cuda.Event()
        done.record()
        with ctx.store(ns, 0, gpu_layout(src), keys, [5, 1, 6], after="event",
                       event=done.cuda_event) as job:
            assert job.wait() == [0, 0, 0]
        out = torch.zeros_like(src)
        torch.cuda.synchronize()
        with ctx.load(ns, 0, None, keys, None, after="none", groups=gpu_layout(out, True),
                      group_indices=[[0, 2, 4], [0, 2, 4]]) as job:
            job.wait_layer(L - 1, torch.cuda.current_stream().cuda_stream)
            assert job.wait() == [0, 0, 0]
        torch.cuda.synchronize()
        for dst, s in ((0, 5), (2, 1), (4, 6)):
            assert torch.equal(out[:, dst], src[:, s])
        assert out[:, [1, 3, 5, 6, 7]].sum() == 0
        st = ctx.stats()
        assert set(st) == STATS
        assert st["copies_kernel"] > 0 and st["copies_engine"] == 0
        assert st["ranges"] > 0 and st["ranges_pending"] == 0

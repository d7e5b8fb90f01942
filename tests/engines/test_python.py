# SPDX-License-Identifier: Apache-2.0
"""The Python package against a real kvtierd: content, handles, errors,
object lifetimes, threads and a daemon restart."""

import errno
import threading
import time

import numpy as np
import pytest
import torch

import kvtier


def open_ns(c, **kw):
    args = dict(model="py-test", layers=2, kv_heads=2, head_bytes=64, block_tokens=16,
                dtype=kvtier.DTYPES["float16"])
    args.update(kw)
    return c.open_namespace(**args)


def wait_connected(c):
    """The library reconnects with backoff: ping until it is back."""
    for _ in range(1000):
        try:
            c.ping()
            return
        except kvtier.Error:
            time.sleep(0.01)
    raise AssertionError("the client did not reconnect")


def blocks(n, nbytes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, nbytes, dtype=np.uint8) for _ in range(n)]


def test_hash_chain_matches_across_inputs():
    toks = list(range(100, 164))
    a = kvtier.hash_chain(toks, 16)
    k = kvtier.split_keys(a)
    assert len(a) == 4 * kvtier.KEY_BYTES and len(k) == 4 and b"".join(k) == a
    assert kvtier.hash_chain(np.array(toks, dtype=np.uint32), 16) == a
    assert kvtier.hash_chain(torch.tensor(toks, dtype=torch.int32), 16) == a
    # Chaining: the second half from the first half's last key.
    assert kvtier.hash_chain(toks[32:], 16, parent=k[1]) == a[2 * kvtier.KEY_BYTES:]
    assert kvtier.split_keys(kvtier.hash_chain(toks, 16, extra=b"salt"))[0] != k[0]
    with pytest.raises(ValueError):
        kvtier.hash_chain([1, 2, 3], 0)


def test_store_load_bytes_numpy_torch(daemon):
    with kvtier.Client(socket=daemon.socket) as c, open_ns(c) as ns:
        nbytes = ns.info["shard_bytes"]
        keys = kvtier.hash_chain(range(16 * 6), 16)
        src = blocks(6, nbytes)
        stored, status = ns.store(0, keys, [bytes(src[0]), src[1], torch.from_numpy(src[2]),
                                            bytearray(src[3]), src[4], src[5]])
        assert stored == 6 and status == [0] * 6
        hits, states = ns.lookup(keys)
        assert hits == 6 and set(states) == {kvtier.HOST}
        dst = [np.zeros(nbytes, np.uint8) for _ in range(3)] + \
              [torch.zeros(nbytes, dtype=torch.uint8) for _ in range(3)]
        loaded, status = ns.load(0, keys, dst)
        assert loaded == 6 and status == [0] * 6
        for s, d in zip(src, dst):
            assert bytes(s) == bytes(np.asarray(d))
        miss = kvtier.hash_chain(range(1000, 1016), 16)
        buf = np.full(nbytes, 7, np.uint8)
        assert ns.load(0, miss, [buf])[0] == 0 and (buf == 7).all()
        with pytest.raises(ValueError):
            ns.load(0, keys[:kvtier.KEY_BYTES], [np.zeros(nbytes - 1, np.uint8)])
        with pytest.raises(ValueError):
            ns.lookup(b"x" * 33)


def test_reserve_commit_acquire_release_and_map(daemon):
    with kvtier.Client(socket=daemon.socket) as c, open_ns(c) as ns, \
            kvtier.Client(socket=daemon.socket, name="worker") as w:
        keys = kvtier.hash_chain(range(32), 16)
        refs = ns.reserve(0, keys)
        assert [r["status"] for r in refs] == [0, 0]
        assert ns.lookup(keys)[0] == 0  # invisible until committed
        data = blocks(2, ns.info["shard_bytes"], seed=3)
        # The worker writes through its own mapping of the same memory.
        for r, d in zip(refs, data):
            w.map(r["extent_id"], r["offset"], r["bytes"])[:] = d.tobytes()
        assert c.commit([r["handle"] for r in refs]) == [0, 0]
        assert ns.lookup(keys)[0] == 2
        leases = ns.acquire(0, keys)
        assert [bytes(r["memory"]) for r in leases] == [d.tobytes() for d in data]
        with pytest.raises(TypeError):
            leases[0]["memory"][0] = 1  # leases are read-only
        assert c.release([r["handle"] for r in leases]) == [0, 0]
        assert c.release([leases[0]["handle"]]) == [-errno.ENOENT]
        # A reservation given back unwritten leaves nothing behind.
        k2 = kvtier.hash_chain(range(500, 516), 16)
        r2 = ns.reserve(0, k2)
        assert c.abort([r2[0]["handle"]]) == [0]
        assert ns.lookup(k2)[0] == 0


def test_paged_layout_round_trip(daemon):
    # A vLLM-like paged cache: [pages, 2, page_tokens, heads, dim] per layer.
    L, P, T, H, D = 2, 8, 16, 2, 16
    cache = torch.randn(L, P, 2, T, H, D, dtype=torch.float16)
    e = cache.element_size()
    lay = kvtier.Layout(L, 2, H, D * e, T, [cache[i].data_ptr() for i in range(L)],
                        cache.stride(2) * e, cache.stride(1) * e, cache.stride(3) * e,
                        cache.stride(4) * e, keep=cache)
    with kvtier.Client(socket=daemon.socket) as c, open_ns(c, head_bytes=D * e) as ns:
        keys = kvtier.hash_chain(range(3 * T), T)
        assert ns.store_paged(0, lay, keys, [5, 1, 6])[0] == 3
        out = torch.zeros_like(cache)
        lay2 = kvtier.Layout(L, 2, H, D * e, T, [out[i].data_ptr() for i in range(L)],
                             out.stride(2) * e, out.stride(1) * e, out.stride(3) * e,
                             out.stride(4) * e, keep=out)
        assert ns.load_paged(0, lay2, keys, [0, 2, 4])[0] == 3
        assert torch.equal(out[:, 0], cache[:, 5]) and torch.equal(out[:, 2], cache[:, 1])
        assert torch.equal(out[:, 4], cache[:, 6]) and out[:, 1].abs().sum() == 0
        # The bytes in the pool are kvtier's layout [layer][plane][token][head][dim].
        got = np.zeros(ns.info["shard_bytes"], np.uint8)
        ns.load(0, keys[:kvtier.KEY_BYTES], [got])
        want = cache[:, 5].contiguous().view(torch.uint8).numpy().tobytes()
        assert got.tobytes() == want


def test_errors_carry_errno_and_reason(daemon):
    with pytest.raises(kvtier.Error) as e:
        kvtier.Client(socket=daemon.socket + ".absent")
    assert e.value.errno == errno.ENOENT and "kvtierd" in e.value.strerror
    with kvtier.Client(socket=daemon.socket) as c:
        with pytest.raises(kvtier.Error) as e:
            c.open_namespace("m", 0, 1, 64, 16, 1)
        assert e.value.errno == errno.EINVAL
        assert e.value.call == "open_namespace"


def test_close_in_any_order(daemon):
    c = kvtier.Client(socket=daemon.socket)
    ns = open_ns(c)
    keys = kvtier.hash_chain(range(16), 16)
    c.close()
    assert c.closed and not c.connected
    with pytest.raises(kvtier.Error) as e:
        ns.lookup(keys)
    assert e.value.errno == errno.ENOTCONN
    assert ns.info["block_tokens"] == 16  # still answers
    ns.close()
    ns.close()
    c.close()
    # Dropped without closing, in either order.
    c = kvtier.Client(socket=daemon.socket)
    ns = open_ns(c)
    del c
    del ns
    c = kvtier.Client(socket=daemon.socket)
    ns = open_ns(c)
    del ns
    del c


def test_threads_share_a_client(daemon):
    with kvtier.Client(socket=daemon.socket) as c, open_ns(c) as ns:
        nbytes = ns.info["shard_bytes"]
        errors = []

        def worker(i):
            try:
                for j in range(20):
                    keys = kvtier.hash_chain(range(i * 10000 + j * 16, i * 10000 + j * 16 + 16), 16)
                    data = np.full(nbytes, (i * 20 + j) % 251, np.uint8)
                    assert ns.store(0, keys, [data])[0] == 1
                    out = np.zeros(nbytes, np.uint8)
                    assert ns.load(0, keys, [out])[0] == 1
                    assert (out == data).all()
            except Exception as ex:  # reported below
                errors.append(ex)

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors


def test_close_while_another_thread_is_inside(daemon):
    """close() while a call waits in the library only marks the client: the
    waiting call finishes on live memory and the last one out frees it."""
    import signal

    for attempt in range(5):
        c = kvtier.Client(socket=daemon.socket)
        result = []

        def ping():
            try:
                c.ping()
                result.append("ok")
            except kvtier.Error as e:
                result.append(e.strerror)

        daemon.proc.send_signal(signal.SIGSTOP)  # the ping waits for an answer
        t = threading.Thread(target=ping)
        t.start()
        time.sleep(0.1 * (attempt + 1))  # let it enter the library
        c.close()
        assert c.closed
        with pytest.raises(kvtier.Error) as e:
            c.ping()  # closed for new calls at once
        assert e.value.errno == errno.ENOTCONN
        daemon.proc.send_signal(signal.SIGCONT)
        t.join()
        if result != ["the client is closed"]:  # the thread was inside
            break
    assert result == ["ok"], result


def test_identity_helpers():
    assert kvtier.dtype_code("torch.bfloat16") == kvtier.DTYPES["bfloat16"]
    assert kvtier.dtype_name("fp8") == "float8_e4m3fn"  # vLLM's cache_dtype
    with pytest.raises(ValueError):
        kvtier.dtype_code("complex64")
    from kvtier.identity import model_id

    a, b = model_id("m" * 300 + "a"), model_id("m" * 300 + "b")
    assert a != b and len(a.encode()) <= 256 and len(b.encode()) <= 256
    assert model_id("org/name/") == "org/name"


def test_daemon_restart_misses_then_hits(daemon):
    with kvtier.Client(socket=daemon.socket) as c, open_ns(c) as ns:
        keys = kvtier.hash_chain(range(64), 16)
        data = blocks(4, ns.info["shard_bytes"], seed=9)
        assert ns.store(0, keys, data)[0] == 4
        daemon.kill()
        assert ns.lookup(keys)[0] == 0
        daemon.start()
        wait_connected(c)
        assert ns.lookup(keys)[0] == 0  # a new daemon holds nothing (host tier only)
        assert ns.store(0, keys, data)[0] == 4
        out = [np.zeros_like(d) for d in data]
        assert ns.load(0, keys, out)[0] == 4
        assert all((a == b).all() for a, b in zip(out, data))


def test_stats_records(daemon):
    with kvtier.Client(socket=daemon.socket, name="stats-test") as c, open_ns(c):
        recs = c.stats()
        kinds = {r["kind"] for r in recs}
        assert {"daemon", "tenant", "namespace", "client"} <= kinds
        assert any(r.get("name") == "stats-test" for r in recs if r["kind"] == "client")


def test_pip_install_from_checkout(tmp_path):
    """`pip install .` builds the package alone (meson-python, no daemon).
    Without its CUDA path, to spare CI the kernels' second build: the
    wheel the other engine tests import is built with the same defaults
    (scripts/wheel.sh), and test_wheel.py checks its CUDA code."""
    import os
    import shutil
    import subprocess
    import sys

    uv = shutil.which("uv", path=os.path.dirname(sys.executable))
    if uv is None:
        pytest.skip("uv is not in the venv")
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    r = subprocess.run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
                        "-C", "setup-args=-Dcuda=disabled", top], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import kvtier; print(kvtier.version(), kvtier.hash_chain(range(32), 16).hex(), "
                          "kvtier.HAVE_CUDA, kvtier._kvtier.__file__.rsplit('/', 1)[1])"],
                         capture_output=True, text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [kvtier.version(), kvtier.hash_chain(range(32), 16).hex(), "0",
                                  "_kvtier.abi3.so"]


def test_admin_evict_from_host_keeps_nvme_copies():
    """ADMIN_EVICT without DROP leaves the blocks on NVMe (staged back on the
    next lookup, same bytes); with DROP nothing is left."""
    import kvtd

    cfg = "[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
    with kvtd.Daemon(cfg, spill_mb=256) as d, kvtier.Client(socket=d.socket) as c, \
            open_ns(c) as ns:
        keys = kvtier.hash_chain(range(16 * 8), 16)
        data = blocks(8, ns.info["shard_bytes"], seed=4)
        assert ns.store(0, keys, data)[0] == 8
        for _ in range(1000):  # write-back starts at once with these watermarks
            dr = [r for r in c.stats() if r["kind"] == "daemon"][0]
            if dr["nvme_blocks"] >= 8 and dr["nvme_in_flight"] == 0:
                break
            time.sleep(0.01)
        tenant = [r for r in c.stats() if r["kind"] == "tenant"][0]["id"]
        ns_id = ns.info["ns_id"]
        assert c.admin_evict(tenant, ns_id, drop=False) == 8
        hits, states = ns.lookup(keys)
        assert hits == 8 and set(states) <= {kvtier.DISK, kvtier.HOST}
        assert ns.wait_resident(keys, 10000) == 8
        out = [np.zeros_like(x) for x in data]
        assert ns.load(0, keys, out)[0] == 8
        assert all((a == b).all() for a, b in zip(out, data))
        assert c.admin_evict(tenant, ns_id, drop=True) == 8
        assert ns.lookup(keys)[0] == 0


def test_lifecycle_hints():
    """retain and end reach kvtierd: counted on the namespace, refused with
    a clear error out of range, and what was retained still loads."""
    import kvtd
    import kvtier

    with kvtd.Daemon() as d, kvtier.Client(socket=d.socket, name="hints") as c:
        ns = c.open_namespace("hints-model", layers=2, kv_heads=2, head_bytes=64,
                              block_tokens=16, dtype=kvtier.DTYPES["float16"])
        keys = kvtier.hash_chain(list(range(16 * 6)), 16)
        size = ns.info["shard_bytes"]
        bufs = [bytes([i + 1]) * size for i in range(6)]
        assert ns.store(0, keys, bufs)[0] == 6
        assert ns.retain(keys[: 2 * kvtier.KEY_BYTES], 90) == 2
        assert ns.retain(keys[2 * kvtier.KEY_BYTES: 3 * kvtier.KEY_BYTES],
                         kvtier.PRIORITY_DEFAULT, duration_s=5) == 1
        assert ns.end(keys[3 * kvtier.KEY_BYTES:], session=True) == 3
        assert ns.end(kvtier.hash_chain(list(range(1000, 1016)), 16)) == 0  # not stored
        with pytest.raises(kvtier.Error) as e:
            ns.retain(keys[:kvtier.KEY_BYTES], kvtier.PRIORITY_MAX + 1)
        assert e.value.errno == errno.EINVAL
        recs = c.stats(kvtier.STATS_NAMESPACES | kvtier.STATS_TENANTS)
        ns_rec = [r for r in recs if r.get("kind") == "namespace"][0]
        cls = [r for r in recs if r.get("kind") == "class"][0]
        assert ns_rec["hints"] == 6 and ns_rec["demotions"] == 3
        assert cls["retained"] == 2 and cls["demoted"] == 3
        out = [bytearray(size) for _ in range(2)]
        assert ns.load(0, keys[: 2 * kvtier.KEY_BYTES], out)[0] == 2
        assert [bytes(b) for b in out] == bufs[:2]
        ns.close()

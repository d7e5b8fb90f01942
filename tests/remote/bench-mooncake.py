#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The peer of bench-remote's write-back and restore: Mooncake Store.

Starts mooncake_master (metadata in the master, clients handshake peer
to peer: no etcd, no HTTP metadata server) and three clients on loopback
over the TCP transport, each a process of its own:

  store   mounts the segment that holds the objects (the OSD's part)
  writer  puts BLOCKS objects of SIZE bytes, DEPTH at a time (node A)
  reader  gets the same objects into its registered buffer, DEPTH at a
          time (node B), and checks every byte

Prints one line per figure ("mooncake put MB/s X", "mooncake get MB/s
X"); exits 77 with the reason when the package cannot run here.  Every
process it starts is stopped by its pid.

  bench-mooncake.py VENV_PYTHON MASTER BLOCKS SIZE DEPTH
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def store_new(master, segment, buffer):
    from mooncake.store import MooncakeDistributedStore
    st = MooncakeDistributedStore()
    r = st.setup("127.0.0.1", "P2PHANDSHAKE", segment, buffer, "tcp", "", master)
    if r != 0:
        raise RuntimeError(f"setup failed: {r}")
    return st


def pattern(i, size):
    # Distinct bytes per object, cheap to make and to check.
    head = i.to_bytes(4, "little") * 1024
    return (head * (size // len(head) + 1))[:size]


def role_store(master, size, blocks):
    st = store_new(master, blocks * size * 2, 16 << 20)
    print("ready", flush=True)
    sys.stdin.readline()  # until told to stop
    st.close()


def timed_batches(fn, keys, depth):
    t0 = time.perf_counter()
    for i in range(0, len(keys), depth):
        fn(i, keys[i:i + depth])
    return time.perf_counter() - t0


def role_writer(master, size, blocks, depth):
    import ctypes
    st = store_new(master, 0, blocks * size + (16 << 20))
    buf = ctypes.create_string_buffer(blocks * size)
    base = ctypes.addressof(buf)
    for i in range(blocks):
        ctypes.memmove(base + i * size, pattern(i, size), size)
    if st.register_buffer(base, blocks * size) != 0:
        raise RuntimeError("register_buffer")
    keys = [f"kvtier-bench-{i}" for i in range(blocks)]

    def put(i, ks):
        rs = st.batch_put_from(ks, [base + (i + j) * size for j in range(len(ks))],
                               [size] * len(ks))
        if any(r < 0 for r in rs):
            raise RuntimeError(f"put: {rs}")
    t = timed_batches(put, keys, depth)
    print(f"put {t:.6f}", flush=True)
    sys.stdin.readline()
    st.close()


def role_reader(master, size, blocks, depth):
    import ctypes
    st = store_new(master, 0, blocks * size + (16 << 20))
    buf = ctypes.create_string_buffer(blocks * size)
    base = ctypes.addressof(buf)
    if st.register_buffer(base, blocks * size) != 0:
        raise RuntimeError("register_buffer")
    keys = [f"kvtier-bench-{i}" for i in range(blocks)]

    def get(i, ks):
        rs = st.batch_get_into(ks, [base + (i + j) * size for j in range(len(ks))],
                               [size] * len(ks))
        if any(r != size for r in rs):
            raise RuntimeError(f"get: {rs}")
    t = timed_batches(get, keys, depth)
    for i in range(blocks):
        if ctypes.string_at(base + i * size, size) != pattern(i, size):
            raise RuntimeError(f"object {i}: wrong bytes")
    print(f"get {t:.6f}", flush=True)
    sys.stdin.readline()
    st.close()


def spawn(args, **kw):
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)


def stop(p):
    if p.poll() is None:
        try:
            p.stdin.write("\n")
            p.stdin.flush()
        except OSError:
            pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def line_of(p, what, timeout=60):
    # One line of a child's stdout, or an error saying which child failed.
    import select
    r, _, _ = select.select([p.stdout], [], [], timeout)
    line = p.stdout.readline() if r else ""
    if not line:
        raise RuntimeError(f"the {what} process gave no answer (exit status {p.poll()})")
    return line.split()


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--role":
        role, master, size, blocks = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        depth = int(sys.argv[6])
        {"store": lambda: role_store(master, size, blocks),
         "writer": lambda: role_writer(master, size, blocks, depth),
         "reader": lambda: role_reader(master, size, blocks, depth)}[role]()
        return 0
    python, master_bin, blocks, size, depth = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    if not os.access(python, os.X_OK) or not os.access(master_bin, os.X_OK):
        print(f"mooncake: not installed ({python}); scripts/mooncake-venv.sh installs it")
        return 77
    port = free_port()
    master = f"127.0.0.1:{port}"
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        log = open(os.path.join(tmp, "master.log"), "w")
        m = subprocess.Popen([master_bin, f"--rpc_port={port}", "--rpc_address=127.0.0.1",
                              f"--metrics_port={free_port()}", "--default_kv_lease_ttl=60000"],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if m.poll() is not None:
                        raise RuntimeError("mooncake_master exited")
                    time.sleep(0.1)
            me = os.path.abspath(__file__)
            role = lambda r: spawn([python, me, "--role", r, master, str(size), str(blocks),
                                    str(depth)])
            procs.append(role("store"))
            line_of(procs[-1], "store")
            procs.append(role("writer"))
            put = float(line_of(procs[-1], "writer")[1])
            procs.append(role("reader"))
            get = float(line_of(procs[-1], "reader")[1])
            print(f"mooncake put MB/s {blocks * size / put / 1e6:.1f}")
            print(f"mooncake get MB/s {blocks * size / get / 1e6:.1f}")
            print(f"mooncake pids {' '.join(str(p.pid) for p in [m] + procs)}")
        except Exception as e:  # the package cannot run here: say why
            print(f"mooncake: cannot run here: {e}")
            return 77
        finally:
            for p in reversed(procs):
                stop(p)
            if m.poll() is None:
                m.send_signal(signal.SIGTERM)
                try:
                    m.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    m.kill()
                    m.wait()
            log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: Apache-2.0
"""Time to first token in vLLM (CPU) with a prompt's prefix restored by
kvtier from host memory and from NVMe, against recomputing it and against
vLLM's own prefix cache, as ratios to recompute measured in the same run.

    build/venv/bin/python tests/bench/bench-ttft.py --build build [--lengths 256,1024,4096]

A random Llama (default 24 layers, hidden 1024, 8 KV heads of 64, ~0.4 B
parameters, fp32) is made locally.  Two engines run one after the other,
each in its own process: vLLM alone with prefix caching (recompute, then
vLLM's own hit), and vLLM with the kvtier connector and no prefix cache
(recompute while storing, the host-tier hit in a fresh engine, then the
NVMe-tier hit after kvtierd dropped the host copies).  TTFT is the time of a
generate() of one token.  Prints a markdown table.

    ... bench-ttft.py --build build --remote [--lengths 256,1024,2048]

--remote measures a hit in the remote tier instead: a single-machine Ceph
cluster (tests/ceph/cluster.sh) shared by two kvtierd as nodes A and B; an
engine on A stores each prompt (written back at once, min_reuse = 0), and
once A's statistics show every block written back, a fresh engine on B,
which never saw the prompts, runs them: the prefix comes from the cluster.
Every wait is bounded and says what it waited for when it gives up.

    ... bench-ttft.py --build build --codec fp8-e4m3 [--lengths 256,1024,2048]

--codec adds, in the same run, the local measurements again with the
connector's codec (blocks stored quantised, kvtier.CODECS) against a
kvtierd of their own: the host and NVMe hits of a quantised prefix beside
the uncoded ones and recompute.

    ... bench-ttft.py --build build --store-pairs 6 [--lengths 256,1024,2048]

--store-pairs measures only the storing request against vLLM alone (the
same engine without the connector), in alternating rounds
(measure_store_pairs).
"""

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engines"))

import kvtd  # noqa: E402

BLOCK = 32
# The most a request may take (a 2 K prompt recomputes in ~8 s here), and
# an engine's start (the first compiles kernels).
ANSWER_S = 300
START_S = 600

ENGINE = r"""
import json, os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
sys.path.insert(0, sys.argv[4])
import kvtd
from vllm import LLM, SamplingParams
model, sock, lengths = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
ktc = None if sock in ("none", "plain") else {
    "kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
    "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
    "kv_connector_extra_config": {"socket": sock, **json.loads(sys.argv[5])}}
llm = LLM(model=model, dtype="float32", block_size=32, max_model_len=max(lengths) + 64,
          enable_prefix_caching=sock == "none", kv_transfer_config=ktc, seed=0,
          gpu_memory_utilization=0.05)
sp = SamplingParams(temperature=0, max_tokens=1)
def ttft(ids):
    t = time.perf_counter()
    out = llm.generate([{"prompt_token_ids": ids}], sp, use_tqdm=False)[0]
    return time.perf_counter() - t, out.num_cached_tokens or 0
ttft(kvtd.prompt_ids(64, 999))  # warm up (kernel compilation)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    dt, cached = ttft(kvtd.prompt_ids(req["n"], req["seed"]))
    print(json.dumps({"s": dt, "cached": cached}), flush=True)
"""


class Engine:
    """One engine process; every answer is awaited for a bounded time."""

    def __init__(self, model, sock, lengths, name, extra=None, argv=None, env=None):
        """argv: another engine program's command line (bench-turns.py);
        env: its environment."""
        self.name = name
        # Its stderr, in the private TMPDIR of the run.
        self.log = log = os.path.join(os.environ["TMPDIR"], name.replace(" ", "-").replace("'", "")
                                      + ".log")
        argv = argv or [sys.executable, "-c", ENGINE, model, sock, ",".join(map(str, lengths)),
                        os.path.join(HERE, "..", "engines"), json.dumps(extra or {})]
        with open(log, "a") as err:
            self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True, stderr=err, env=env)
        self.lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.read(START_S, "its start (model load and kernel compilation)")

    def _pump(self):
        for line in self.p.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def read(self, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.p.kill()
                raise RuntimeError(f"{self.name}: no answer in {timeout} s waiting for {what}; "
                                   f"killed it (its log: {self.log})") from None
            if line is None:
                raise RuntimeError(f"{self.name} exited waiting for {what} (its log: {self.log})")
            if line.startswith("{"):
                return json.loads(line)

    def ask(self, n, seed):
        return self.send({"n": n, "seed": seed}, f"the first token of a {n}-token prompt")

    def send(self, req, what):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        return self.read(ANSWER_S, what)

    def close(self):
        self.p.stdin.close()
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def wait_for(what, check, timeout, progress=None, stall_s=60):
    """Poll check() (true, or a falsy value) every 50 ms, for at most
    timeout s, and at most stall_s s without progress() changing; the error
    says what was awaited and what detail() last showed."""
    deadline = time.monotonic() + timeout
    last, moved = None, time.monotonic()
    while True:
        ok, detail = check()
        if ok:
            return
        now = time.monotonic()
        mark = progress() if progress else None
        if mark != last:
            last, moved = mark, now
        if now >= deadline or now - moved >= stall_s:
            why = "no progress for %d s" % (now - moved) if now < deadline else \
                "gave up after %d s" % timeout
            raise RuntimeError(f"waiting for {what}: {why}; last seen: {detail}")
        time.sleep(0.05)


def wait_on_nvme(client, want):
    """Until `want` blocks are on NVMe (write-back starts at once here)."""
    def check():
        d = [r for r in client.stats() if r["kind"] == "daemon"][0]
        return (d["nvme_blocks"] >= want and d["nvme_in_flight"] == 0,
                f"{d['nvme_blocks']} blocks on NVMe, {d['nvme_in_flight']} in flight")
    wait_for(f"{want} blocks written back to NVMe", check, 300)


def remote_record(client):
    recs = [r for r in client.stats() if r["kind"] == "remote"]
    if not recs:
        raise RuntimeError("kvtierd shows no remote tier: was it built with -Drados=enabled?")
    return recs[0]


def remote_line(r):
    return (f"state {r['state']} ({r['reason'] or 'ok'}), writes {r['writes']}, reads "
            f"{r['reads']}, misses {r['misses']}, rejected {r['rejected']}, errors "
            f"{r['errors']}, skipped {r['skipped']}, in flight {r['in_flight']}")


def measure_local(model, lengths, rows, codec=None):
    """kvtier host and NVMe hits against one kvtierd; with codec, the
    connector's codec, in rows' keys ending in " CODEC"."""
    import kvtier

    extra, tag = ({"codec": codec}, f" {codec}") if codec else ({}, "")

    cfg = "[pool]\ncapacity = 3G\nextent_size = 256M\n[tenants]\ndefault_quota = 3G\n" \
          "[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
    with kvtd.Daemon(cfg, spill_mb=8192) as d, kvtier.Client(socket=d.socket) as admin:
        store = Engine(model, d.socket, lengths, "the storing engine" + tag, extra)
        stored = 0
        for i, n in enumerate(lengths):
            store.ask(n, 100 + i)
            # The warm-up's stores and their write-back are done before
            # the measured request, which is timed beside its own work
            # only, as the recompute it is compared with.
            stored += n // BLOCK
            wait_on_nvme(admin, stored)
            rows[n]["recompute + store" + tag] = store.ask(n, 200 + i)["s"]
            stored += n // BLOCK
        store.close()
        host = Engine(model, d.socket, lengths, "the restoring engine" + tag, extra)
        for i, n in enumerate(lengths):
            for seed in (100 + i, 200 + i):
                r = host.ask(n, seed)
            rows[n]["kvtier host" + tag], rows[n]["host cached" + tag] = r["s"], r["cached"]
        # Host copies dropped: the next hits come from the spill file.
        blocks = 2 * sum(n // BLOCK for n in lengths)
        wait_on_nvme(admin, blocks)
        tenants = {r["name"]: r["id"] for r in admin.stats() if r["kind"] == "tenant"}
        for r in admin.stats():
            if r["kind"] == "namespace":
                admin.admin_evict(tenants[r["tenant"]], r["id"], drop=False)
        for i, n in enumerate(lengths):
            for seed in (100 + i, 200 + i):
                r = host.ask(n, seed)
            rows[n]["kvtier nvme" + tag], rows[n]["nvme cached" + tag] = r["s"], r["cached"]
        host.close()


def measure_store_pairs(model, lengths, pairs):
    """The storing request against vLLM alone (no connector, no prefix
    cache: the same engine but kvtier), in rounds that alternate the
    contenders' order: vLLM alone; kvtier once its previous stores and
    their write-back to NVMe are done ("quiet"); kvtier right after its
    previous storing request, whose copies and write-back run beside it
    ("beside").  Returns {n: {"alone": [s], "quiet": [s], "beside": [s],
    "load": [load average at each round]}}."""
    import kvtier

    cfg = "[pool]\ncapacity = 3G\nextent_size = 256M\n[tenants]\ndefault_quota = 3G\n" \
          "[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
    out = {n: {"alone": [], "quiet": [], "beside": [], "load": [], "cpu alone": [],
               "cpu quiet": [], "cpu beside": [], "cpu kvtierd": []} for n in lengths}
    tick = os.sysconf("SC_CLK_TCK")

    def cpu(pid):
        """utime + stime of process pid (all its threads), in s."""
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    with kvtd.Daemon(cfg, spill_mb=8192) as d, kvtier.Client(socket=d.socket) as admin:
        alone = Engine(model, "plain", lengths, "vLLM alone, no prefix cache")
        store = Engine(model, d.socket, lengths, "the storing engine")
        stored, seed = 0, 1000
        for n in lengths:
            alone.ask(n, seed)  # warm-ups of the shape
            store.ask(n, seed + 1)
            stored += n // BLOCK
            seed += 2
            for k in range(pairs):
                order = ["alone", "quiet", "beside"]
                order = order[k % 3:] + order[:k % 3]
                out[n]["load"].append(os.getloadavg()[0])
                for who in order:
                    if who == "quiet":
                        wait_on_nvme(admin, stored)
                    e = alone if who == "alone" else store
                    c0, d0 = cpu(e.p.pid), cpu(d.proc.pid)
                    out[n][who].append(e.ask(n, seed)["s"])
                    if who == "quiet":  # its own stores copied and written back
                        wait_on_nvme(admin, stored + n // BLOCK)
                        out[n]["cpu kvtierd"].append(cpu(d.proc.pid) - d0)
                    out[n]["cpu " + who].append(cpu(e.p.pid) - c0)
                    seed += 1
                    if who != "alone":
                        stored += n // BLOCK
        alone.close()
        store.close()
    return out


def print_store_pairs(out):
    def med(xs):
        xs = sorted(xs)
        return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2

    print("| prompt tokens | vLLM alone s (median) | storing, quiet | storing, beside the "
          "previous store | engine CPU s: alone / quiet / beside | kvtierd CPU s | rounds | "
          "load average |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in out.items():
        cells = []
        for who in ("quiet", "beside"):
            ratios = [a / b for a, b in zip(r[who], r["alone"])]
            cells.append(f"{med(ratios):.3f} [{min(ratios):.3f}..{max(ratios):.3f}]")
        engine_cpu = " / ".join(f"{med(r['cpu ' + w]):.2f}" for w in ("alone", "quiet", "beside"))
        print(f"| {n} | {med(r['alone']):.3f} | {cells[0]} | {cells[1]} | {engine_cpu} | "
              f"{med(r['cpu kvtierd']):.3f} | {len(r['alone'])} "
              f"| {min(r['load']):.1f}..{max(r['load']):.1f} |")
    print("\nTTFT of the storing request / vLLM alone in the same round: median "
          "[lowest..highest]; quiet: its previous stores and their write-back done first; "
          "beside: right after the previous storing request. Engine CPU: the engine "
          "process's CPU time (all threads) during the request (quiet: until its stores "
          "were written back), median; kvtierd CPU: the daemon's over the same span.")


class Cluster:
    """tests/ceph/cluster.sh's cluster in dir, stopped on exit."""

    SCRIPT = os.path.join(HERE, "..", "ceph", "cluster.sh")

    def __init__(self, dir, nbytes):
        self.dir = dir
        env = dict(os.environ, KVT_CEPH_BYTES=str(nbytes))
        r = subprocess.run(["sh", self.SCRIPT, "start", dir], env=env, timeout=300)
        if r.returncode == 77:
            sys.exit("the ceph packages are not installed (scripts/deps.sh installs them)")
        if r.returncode != 0:
            raise RuntimeError(f"the cluster did not start (its logs: {dir}/log)")
        self.conf = os.path.join(dir, "ceph.conf")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        subprocess.run(["sh", self.SCRIPT, "stop", self.dir], timeout=120)


def measure_remote(model, lengths, rows, work, block_bytes):
    """Node A stores each prompt into the shared tier, node B restores it."""
    import kvtier

    blocks = 2 * sum(n // BLOCK for n in lengths)  # warm-up and measured
    data = blocks * (block_bytes + 4096)
    # memstore holds everything in the OSD's memory and hangs writes once
    # full (reference/pitfalls.md): room for all of it, twice over.
    with Cluster(os.path.join(work, "ceph"), max(2 * data, 1 << 30)) as ceph:
        cfg = (f"[pool]\ncapacity = 3G\nextent_size = 256M\n[tenant.bench]\nuids = {os.getuid()}\n"
               f"quota = 3G\n[remote.shared]\nceph_conf = {ceph.conf}\npool = kvtier\n"
               f"capacity = {2 * data}\ntimeout_ms = 10000\nmin_reuse = 0\n")
        with kvtd.Daemon(cfg) as a, kvtd.Daemon(cfg) as b, \
                kvtier.Client(socket=a.socket) as ca, kvtier.Client(socket=b.socket) as cb:
            for node, c, d in (("A", ca, a), ("B", cb, b)):
                def up(c=c):
                    r = remote_record(c)
                    return r["state"] == "up", remote_line(r)
                wait_for(f"node {node} to connect to the cluster (its log: {d.log})", up, 60)
            store = Engine(model, a.socket, lengths, "node A's engine")
            for i, n in enumerate(lengths):
                for seed in (100 + i, 200 + i):
                    rows[n]["recompute + store"] = store.ask(n, seed)["s"]
            store.close()

            def written():
                r = remote_record(ca)
                if r["errors"] or r["skipped"]:
                    raise RuntimeError(f"node A's write-back failed: {remote_line(r)} "
                                       f"(its log: {a.log})")
                return r["writes"] >= blocks and r["in_flight"] == 0, remote_line(r)
            wait_for(f"node A to write {blocks} blocks back (its log: {a.log})", written, 600,
                     lambda: remote_record(ca)["writes"])
            restore = Engine(model, b.socket, lengths, "node B's engine")
            for i, n in enumerate(lengths):
                for seed in (100 + i, 200 + i):
                    r = restore.ask(n, seed)
                rows[n]["kvtier remote"], rows[n]["remote cached"] = r["s"], r["cached"]
            restore.close()
            rb = remote_record(cb)
            print(f"Node B's remote tier: {remote_line(rb)}.\n")


def bench_model(work, layers, hidden, max_pos):
    """The benchmarks' random Llama: hidden // 64 heads and 8 KV heads of
    64, fp32, made in work/model."""
    return kvtd.make_model(os.path.join(work, "model"), layers=layers, hidden=hidden,
                           heads=hidden // 64, kv_heads=8, head_dim=64,
                           intermediate=4 * hidden, max_pos=max_pos)


def restorable(n: int) -> int:
    """The tokens of an n-token prompt kvtier restores: its full blocks (vLLM
    counts them all cached, and computes the last token of a prompt that
    ends on a block boundary again)."""
    return n // BLOCK * BLOCK


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="meson build directory (kvtierd)")
    ap.add_argument("--lengths", default="256,1024,2048,4096")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--remote", action="store_true",
                    help="a hit in the remote tier (Ceph) on a second node, not the local tiers")
    ap.add_argument("--codec", choices=("fp8-e4m3", "int4"),
                    help="the local tiers measured again with blocks stored in this codec")
    ap.add_argument("--store-pairs", type=int, metavar="ROUNDS",
                    help="only the storing request against vLLM alone, in ROUNDS "
                    "alternating rounds per length")
    args = ap.parse_args()
    if args.codec and args.remote:
        ap.error("--codec measures the local tiers; run it without --remote")
    lengths = [int(x) for x in args.lengths.split(",")]
    kvtd.KVTIERD = os.path.join(args.build, "daemon", "kvtierd")

    work = tempfile.mkdtemp(prefix="kvt-ttft-")
    os.chmod(work, 0o755)
    os.environ["TMPDIR"] = work
    model = bench_model(work, args.layers, args.hidden, max(lengths) + 64)
    nparams = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model)
                  if f.endswith(".safetensors")) // 4
    kv_bytes = 2 * args.layers * 8 * 64 * 4
    rows = {n: {} for n in lengths}
    if args.store_pairs:
        print_store_pairs(measure_store_pairs(model, lengths, args.store_pairs))
        return
    # Every measurement follows a warm-up of the same shape on another
    # prompt (seed 100+i: warm-up, 200+i: measured): vLLM compiles per shape.
    base = Engine(model, "none", lengths, "vLLM alone")
    for i, n in enumerate(lengths):
        for seed in (100 + i, 200 + i):
            rows[n]["recompute"] = base.ask(n, seed)["s"]
        for seed in (100 + i, 200 + i):
            r = base.ask(n, seed)
        rows[n]["vllm prefix cache"], rows[n]["vllm cached"] = r["s"], r["cached"]
    base.close()
    if args.remote:
        measure_remote(model, lengths, rows, work, kv_bytes * BLOCK)
    else:
        measure_local(model, lengths, rows)
        if args.codec:
            measure_local(model, lengths, rows, args.codec)
    print(f"Model: random Llama, {args.layers} layers, hidden {args.hidden}, 8 KV heads of 64, "
          f"fp32, ~{nparams / 1e9:.2f} B parameters; KV {kv_bytes // 1024} KiB/token; "
          f"block {BLOCK} tokens; {os.cpu_count()} CPUs.\n")
    # (title, the row's TTFT as a fraction of recompute); then the tokens
    # each kvtier path restored, and vLLM's own
    ratios = [("vLLM prefix cache", "vllm prefix cache")]
    if args.remote:
        ratios += [("kvtier remote (node B)", "kvtier remote"),
                   ("store overhead (node A)", "recompute + store")]
        restored, note = ("remote cached", "vllm cached"), (
            "store overhead: node A's storing request against recompute; restored tokens: "
            "kvtier remote / vLLM prefix cache.")
    else:
        ratios += [("kvtier host", "kvtier host"), ("kvtier NVMe", "kvtier nvme"),
                   ("store overhead", "recompute + store")]
        restored, note = ("host cached", "nvme cached", "vllm cached"), (
            "store overhead: the first (storing) request with kvtier against recompute; "
            "restored tokens: kvtier host / kvtier NVMe / vLLM prefix cache.")
        if args.codec:
            c = args.codec
            ratios[3:3] = [(f"kvtier host {c}", f"kvtier host {c}"),
                           (f"kvtier NVMe {c}", f"kvtier nvme {c}")]
            ratios.append((f"store overhead {c}", f"recompute + store {c}"))
            restored = ("host cached", "nvme cached", f"host cached {c}", f"nvme cached {c}",
                        "vllm cached")
            note = (f"store overhead: the first (storing) request with kvtier (with {c}) "
                    "against recompute; restored tokens: kvtier host / kvtier NVMe / kvtier "
                    f"host {c} / kvtier NVMe {c} / vLLM prefix cache.")
    print("| prompt tokens | recompute s | " + " | ".join(t for t, _ in ratios)
          + " | restored tokens |")
    print("|---:|---:|" + "---:|" * len(ratios) + "---:|")
    for n in lengths:
        r = rows[n]
        rc = r["recompute"]
        print(f"| {n} | {rc:.3f} | " + " | ".join(f"{r[k] / rc:.3f}" for _, k in ratios)
              + " | " + " / ".join(str(r[k]) for k in restored) + " |")
    print("\nColumns after the first: TTFT as a fraction of recompute (lower is better); " + note)
    # Every full block.
    bad = [n for n in lengths if any(rows[n].get(k, restorable(n)) != restorable(n)
                                     for k in ("host cached", "nvme cached", "remote cached",
                                               f"host cached {args.codec}",
                                               f"nvme cached {args.codec}"))]
    if bad:
        sys.exit(f"restored fewer tokens than the prompt's full blocks at {bad}")


if __name__ == "__main__":
    main()

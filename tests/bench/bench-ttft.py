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
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engines"))

import kvtd  # noqa: E402

BLOCK = 32

ENGINE = r"""
import json, os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
sys.path.insert(0, sys.argv[4])
import kvtd
from vllm import LLM, SamplingParams
model, sock, lengths = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
ktc = None if sock == "none" else {
    "kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
    "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
    "kv_connector_extra_config": {"socket": sock}}
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
    def __init__(self, model, sock, lengths):
        self.p = subprocess.Popen([sys.executable, "-c", ENGINE, model, sock,
                                   ",".join(map(str, lengths)), os.path.join(HERE, "..", "engines")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  stderr=subprocess.DEVNULL)
        self.read()

    def read(self):
        for line in self.p.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError("the vLLM engine exited")

    def ask(self, n, seed):
        self.p.stdin.write(json.dumps({"n": n, "seed": seed}) + "\n")
        self.p.stdin.flush()
        return self.read()

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def wait_on_nvme(client, want):
    """Until `want` blocks are on NVMe (write-back starts at once here)."""
    for _ in range(6000):
        d = [r for r in client.stats() if r["kind"] == "daemon"][0]
        if d["nvme_blocks"] >= want and d["nvme_in_flight"] == 0:
            return
        time.sleep(0.05)
    raise RuntimeError("write-back did not reach NVMe")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="meson build directory (kvtierd)")
    ap.add_argument("--lengths", default="256,1024,2048,4096")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1024)
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    kvtd.KVTIERD = os.path.join(args.build, "daemon", "kvtierd")
    import kvtier

    work = tempfile.mkdtemp(prefix="kvt-ttft-")
    os.chmod(work, 0o755)
    os.environ["TMPDIR"] = work
    model = kvtd.make_model(os.path.join(work, "model"), layers=args.layers,
                            hidden=args.hidden, heads=args.hidden // 64, kv_heads=8,
                            head_dim=64, intermediate=4 * args.hidden,
                            max_pos=max(lengths) + 64)
    nparams = sum(os.path.getsize(os.path.join(model, f)) for f in os.listdir(model)
                  if f.endswith(".safetensors")) // 4
    rows = {n: {} for n in lengths}
    # Every measurement follows a warm-up of the same shape on another
    # prompt (seed 100+i: warm-up, 200+i: measured): vLLM compiles per shape.
    base = Engine(model, "none", lengths)
    for i, n in enumerate(lengths):
        for seed in (100 + i, 200 + i):
            rows[n]["recompute"] = base.ask(n, seed)["s"]
        for seed in (100 + i, 200 + i):
            r = base.ask(n, seed)
        rows[n]["vllm prefix cache"], rows[n]["vllm cached"] = r["s"], r["cached"]
    base.close()
    cfg = "[pool]\ncapacity = 3G\nextent_size = 256M\n[tenants]\ndefault_quota = 3G\n" \
          "[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
    with kvtd.Daemon(cfg, spill_mb=8192) as d, kvtier.Client(socket=d.socket) as admin:
        store = Engine(model, d.socket, lengths)
        for i, n in enumerate(lengths):
            for seed in (100 + i, 200 + i):
                rows[n]["recompute + store"] = store.ask(n, seed)["s"]
        store.close()
        host = Engine(model, d.socket, lengths)
        for i, n in enumerate(lengths):
            for seed in (100 + i, 200 + i):
                r = host.ask(n, seed)
            rows[n]["kvtier host"], rows[n]["host cached"] = r["s"], r["cached"]
        # Host copies dropped: the next hits come from the spill file.
        blocks = 2 * sum((n - 1) // BLOCK for n in lengths)
        wait_on_nvme(admin, blocks)
        tenants = {r["name"]: r["id"] for r in admin.stats() if r["kind"] == "tenant"}
        for r in admin.stats():
            if r["kind"] == "namespace":
                admin.admin_evict(tenants[r["tenant"]], r["id"], drop=False)
        for i, n in enumerate(lengths):
            for seed in (100 + i, 200 + i):
                r = host.ask(n, seed)
            rows[n]["kvtier nvme"], rows[n]["nvme cached"] = r["s"], r["cached"]
        host.close()
    kv_bytes = 2 * args.layers * 8 * 64 * 4
    print(f"Model: random Llama, {args.layers} layers, hidden {args.hidden}, 8 KV heads of 64, "
          f"fp32, ~{nparams / 1e9:.2f} B parameters; KV {kv_bytes // 1024} KiB/token; "
          f"block {BLOCK} tokens; {os.cpu_count()} CPUs.\n")
    print("| prompt tokens | recompute s | vLLM prefix cache | kvtier host | kvtier NVMe "
          "| store overhead | restored tokens |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in lengths:
        r = rows[n]
        rc = r["recompute"]
        print(f"| {n} | {rc:.3f} | {r['vllm prefix cache'] / rc:.3f} | {r['kvtier host'] / rc:.3f} "
              f"| {r['kvtier nvme'] / rc:.3f} | {r['recompute + store'] / rc:.3f} "
              f"| {r['host cached']} / {r['nvme cached']} / {r['vllm cached']} |")
    print("\nColumns after the first: TTFT as a fraction of recompute (lower is better); "
          "store overhead: the first (storing) request with kvtier against recompute; "
          "restored tokens: kvtier host / kvtier NVMe / vLLM prefix cache.")


if __name__ == "__main__":
    main()

# SPDX-License-Identifier: Apache-2.0
"""Decode step times in vLLM (CPU) beside a request whose prefix is being
staged back from NVMe, against the same decode alone, in one engine with
the kvtier connector.

    build/venv/bin/python tests/bench/bench-stall.py --build build [--prompt 2048]

The random Llama of bench-ttft.py (24 layers, hidden 1024, fp32) is made
locally.  The engine stores a --prompt-token prompt; kvtierd writes it to
NVMe and drops its host copies (ADMIN_EVICT without DROP), so the prompt's
prefix is on NVMe only.  Then, stepping vLLM by hand, a decode of
--decode tokens runs alone (the limit), and again with the staged prompt
added at its 5th step: the connector makes it an asynchronous load, so
the decode's steps go on while kvtierd reads it back.  Prints each run's
step times (p50, p90, max) and the step that computes the staged prompt's
own last tokens (n − restored) beside the decode, which is compute, not
staging; the aim is no other step more than 10 % slower than alone.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engines"))
sys.path.insert(0, HERE)

import kvtd  # noqa: E402

BLOCK = 32

ENGINE = r"""
import json, os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
sys.path.insert(0, sys.argv[4])
import kvtd
from vllm import LLM, SamplingParams
model, sock, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ktc = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
       "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
       "kv_connector_extra_config": {"socket": sock}}
llm = LLM(model=model, dtype="float32", block_size=32, max_model_len=n + 256,
          enable_prefix_caching=False, kv_transfer_config=ktc, seed=0,
          gpu_memory_utilization=0.05)
engine = llm.llm_engine

def run(decode, staged_at=None, seed=0):
    # One decode of `decode` tokens, stepped by hand; with staged_at, the
    # staged prompt joins at that step.  Step times, and the step in which
    # the staged prompt's first token came.
    engine.add_request(f"d{seed}", {"prompt_token_ids": kvtd.prompt_ids(64, 500 + seed)},
                       SamplingParams(temperature=0, max_tokens=decode, ignore_eos=True))
    times, staged_step, step = [], None, 0
    while engine.has_unfinished_requests():
        if step == staged_at:
            engine.add_request("staged", {"prompt_token_ids": kvtd.prompt_ids(n, 7)},
                               SamplingParams(temperature=0, max_tokens=1))
        t = time.perf_counter()
        outs = engine.step()
        times.append(time.perf_counter() - t)
        for o in outs:
            if o.request_id == "staged" and o.finished:
                staged_step = step
        step += 1
    return times, staged_step

llm.generate([{"prompt_token_ids": kvtd.prompt_ids(n, 7)}], SamplingParams(max_tokens=1),
             use_tqdm=False)  # the prompt, stored
run(8, seed=99)  # warm up the decode's shapes
print(json.dumps({"stored": True}), flush=True)
sys.stdin.readline()  # its host copies dropped
alone, _ = run(int(sys.argv[5]), seed=1)
beside, staged = run(int(sys.argv[5]), staged_at=5, seed=2)
from vllm.distributed.kv_transfer import get_kv_transfer_group
print(json.dumps({"alone": alone, "beside": beside, "staged_step": staged,
                  "stats": get_kv_transfer_group().stats}), flush=True)
"""


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main():
    import kvtier
    from importlib import import_module

    ttft = import_module("bench-ttft")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="meson build directory (kvtierd)")
    ap.add_argument("--prompt", type=int, default=2048, help="tokens of the staged prompt")
    ap.add_argument("--decode", type=int, default=48, help="tokens of each decode")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=1024)
    args = ap.parse_args()
    kvtd.KVTIERD = os.path.join(args.build, "daemon", "kvtierd")
    work = tempfile.mkdtemp(prefix="kvt-stall-")
    os.chmod(work, 0o755)
    os.environ["TMPDIR"] = work
    model = ttft.bench_model(work, args.layers, args.hidden, args.prompt + 256)
    cfg = "[pool]\ncapacity = 3G\nextent_size = 256M\n[tenants]\ndefault_quota = 3G\n" \
          "[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
    with kvtd.Daemon(cfg, spill_mb=4096) as d, kvtier.Client(socket=d.socket) as admin:
        log = open(os.path.join(work, "engine.log"), "a")
        p = subprocess.Popen([sys.executable, "-c", ENGINE, model, d.socket, str(args.prompt),
                              os.path.join(HERE, "..", "engines"), str(args.decode)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                             stderr=log)

        def answer():
            for line in p.stdout:
                if line.startswith("{"):
                    return json.loads(line)
            raise RuntimeError(f"the engine exited ({p.wait()}); its log: {log.name}")

        answer()
        ttft.wait_on_nvme(admin, args.prompt // BLOCK)
        tenants = {r["name"]: r["id"] for r in admin.stats() if r["kind"] == "tenant"}
        for r in admin.stats():
            if r["kind"] == "namespace":
                admin.admin_evict(tenants[r["tenant"]], r["id"], drop=False)
        p.stdin.write("go\n")
        p.stdin.flush()
        r = answer()
        p.stdin.close()
        p.wait(timeout=120)
    alone, beside, staged = r["alone"], r["beside"], r["staged_step"]
    # Step 0 is each decode's own prefill; the staged prompt's own step
    # computes its last tokens: both are compute, not what staging costs.
    plain = alone[1:]
    others = [t for i, t in enumerate(beside) if i not in (0, staged)]
    staging = beside[5:staged] if staged is not None else beside[5:]
    ms = 1000
    print(f"Model: random Llama, {args.layers} layers, hidden {args.hidden}, fp32; staged "
          f"prompt {args.prompt} tokens ({args.prompt // BLOCK} blocks on NVMe only); "
          f"decodes of {args.decode} tokens; {os.cpu_count()} CPUs.\n")
    print("| decode steps | steps | p50 ms | p90 ms | max ms | max / alone's max |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, xs in (("alone", plain),
                     ("beside the staged prompt (its own step excluded)", others),
                     ("of those, while it was staging", staging)):
        if xs:
            print(f"| {name} | {len(xs)} | {pct(xs, 0.5) * ms:.1f} | {pct(xs, 0.9) * ms:.1f} | "
                  f"{max(xs) * ms:.1f} | {max(xs) / max(plain):.2f} |")
    if staged is not None:
        computed = args.prompt - min(ttft.restorable(args.prompt), args.prompt - 1)
        print(f"\nThe staged prompt joined at step 5 and its first token came at step {staged}; "
              f"that step, which computed its last {computed}"
              f" tokens beside the decode, took {beside[staged] * ms:.1f} ms.")
    print(f"Connector: {r['stats']}")


if __name__ == "__main__":
    main()

# SPDX-License-Identifier: Apache-2.0
"""Multi-turn conversations in vLLM (CPU): time to first token of each
turn with a KV connector against vLLM alone, in one run, the contenders
alternating request by request.

    build/venv/bin/python tests/bench/bench-turns.py --build build [--peers lmcache,mooncake]

The workload: CONVERSATIONS conversations of TURNS turns over one
SYSTEM-token system prompt; turn t's prompt is the system prompt, the
earlier turns' user messages and answers, and turn t's user message
(random tokens: user messages of --user tokens, answers of --answer).
Each engine has prefix caching on and a KV space of --kv-tokens tokens,
too small to keep the conversations, so vLLM alone recomputes most of
each turn.  The turns go round the conversations (turn 1 of each, then
turn 2 of each, ...); each request is one generate() of one token, given
to every contender in turn, the order rotating.  Then every engine is
stopped and a fresh one of each contender (its store kept: kvtierd's
blocks) runs turn TURNS+1 of each conversation.

Contenders: vLLM alone, kvtier (a kvtierd of its own, host tier), and
with --peers, peer connectors installed by this program, pinned, into a
venv of their own (BUILD/peers-venv, layered on the engine venv); a peer
that cannot be installed or started is skipped, saying why.

Prints, per contender, TTFT as a fraction of vLLM alone's in the same
run (the sum over the requests of the turns) and the tokens vLLM reports
restored per request (num_cached_tokens: its own prefix cache's and the
connector's).  With the default lengths every prompt ends on a block
boundary; --user 69 puts them off it.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from importlib import import_module

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engines"))
sys.path.insert(0, HERE)

import kvtd  # noqa: E402

ttft = import_module("bench-ttft")
BLOCK = ttft.BLOCK

ENGINE = r"""
import json, os, sys, time
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
from vllm import LLM, SamplingParams
model, ktc = sys.argv[1], json.loads(sys.argv[2])
max_len, kv_bytes = int(sys.argv[3]), int(sys.argv[4])
llm = LLM(model=model, dtype="float32", block_size=32, max_model_len=max_len,
          enable_prefix_caching=True, kv_transfer_config=ktc or None, seed=0,
          kv_cache_memory_bytes=kv_bytes)
sp = SamplingParams(temperature=0, max_tokens=1)
def ttft(ids):
    t = time.perf_counter()
    out = llm.generate([{"prompt_token_ids": ids}], sp, use_tqdm=False)[0]
    return time.perf_counter() - t, out.num_cached_tokens or 0
for n in (64, max_len // 2):  # warm up (kernel compilation), tokens no turn has
    ttft([3] * n)
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    dt, cached = ttft(json.loads(line)["ids"])
    print(json.dumps({"s": dt, "cached": cached}), flush=True)
"""

# The peers, pinned, installed without their declared dependencies (CUDA
# and cloud packages a CPU engine does not import), with those of the
# engine path the engine venv lacks.
PEERS = {
    "lmcache": ["lmcache==0.5.6", "sortedcontainers==2.4.0", "aiofile==3.12.3",
                "caio==0.12.10"],
    "mooncake": ["mooncake-transfer-engine-non-cuda==0.3.13.post1"],
}


class Conversations:
    """The workload's prompts (module docstring)."""

    def __init__(self, n, system, user, answer, seed=7):
        self.system = kvtd.prompt_ids(system, seed)
        self.n, self.user, self.answer, self.seed = n, user, answer, seed

    def prompt(self, conv: int, turn: int) -> list[int]:
        """Turn `turn` (1-based) of conversation conv."""
        ids = list(self.system)
        for t in range(1, turn + 1):
            base = self.seed * 1000 + conv * 100 + t * 2
            ids += kvtd.prompt_ids(self.user, base)
            if t < turn:
                ids += kvtd.prompt_ids(self.answer, base + 1)
        return ids


def peer_venv(build: str, peer: str) -> tuple[str | None, str]:
    """The python of a venv that has peer's packages (made on first use,
    layered on the engine venv by a .pth file), or None and why not."""
    venv = os.path.join(os.path.abspath(build), "peers-venv")
    py = os.path.join(venv, "bin", "python")
    base = os.path.dirname(os.path.dirname(sys.executable))
    stamp = os.path.join(venv, f".{peer}")
    if os.path.exists(stamp):
        return py, ""
    try:
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
            site = subprocess.run([py, "-c", "import site; print(site.getsitepackages()[0])"],
                                  check=True, capture_output=True, text=True).stdout.strip()
            base_site = subprocess.run(
                [os.path.join(base, "bin", "python"), "-c",
                 "import site; print(site.getsitepackages()[0])"],
                check=True, capture_output=True, text=True).stdout.strip()
            with open(os.path.join(site, "engine-venv.pth"), "w") as f:
                f.write(base_site + "\n")
        r = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "--no-deps", *PEERS[peer]], capture_output=True, text=True,
                           timeout=1200)
        if r.returncode:
            return None, f"pip install {' '.join(PEERS[peer])} failed: " + \
                (r.stderr.strip().splitlines() or ["?"])[-1]
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"its venv could not be made: {e}"
    open(stamp, "w").close()
    return py, ""


# What a peer's engine log says when it started without its store (it
# then runs as vLLM alone and is no contender).
PEER_FATAL = {
    "lmcache": "No supported cpu connector found",
}

def free_ports(n: int) -> list[int]:
    """n distinct TCP ports nothing listens on now (so that two runs side
    by side do not share Mooncake's services)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


MC_RPC, MC_HTTP, MC_CLIENT, MC_METRICS = free_ports(4)
_services: list = []  # the peers' processes, stopped at the end


def mooncake_services(bindir, work) -> str:
    """Mooncake Store's master (with its HTTP metadata server) and a store
    client holding a 2 GB segment, started once; "" or why not."""
    if _services:
        return ""
    logs = []
    for argv in ([os.path.join(bindir, "mooncake_master"), "-enable_http_metadata_server=true",
                  "-http_metadata_server_host=127.0.0.1",
                  f"-http_metadata_server_port={MC_HTTP}", f"-rpc_port={MC_RPC}",
                  f"-metrics_port={MC_METRICS}"],
                 [os.path.join(bindir, "mooncake_client"), "-host=127.0.0.1",
                  f"-master_server_address=127.0.0.1:{MC_RPC}",
                  f"-metadata_server=http://127.0.0.1:{MC_HTTP}/metadata", "-protocol=tcp",
                  "-global_segment_size=2GB", f"-port={MC_CLIENT}"]):
        log = os.path.join(work, os.path.basename(argv[0]) + ".log")
        logs.append(log)
        try:
            _services.append(subprocess.Popen(argv, stdout=open(log, "w"),
                                              stderr=subprocess.STDOUT))
        except OSError as e:
            return f"{argv[0]} did not start: {e}"
        ttft.wait_for(f"{argv[0]} to start", lambda log=log: (
            "Starting" in open(log).read() or "started" in open(log).read(), log), 300)
        if _services[-1].poll() is not None:
            return f"{argv[0]} exited ({_services[-1].returncode}); its log: {log}"
    return ""


def contender(name, model, work, max_len, kv_bytes, sock=None, build=None):
    """(argv, env) of an engine of contender name, or (None, why not)."""
    env = dict(os.environ)
    py = sys.executable
    if name == "vLLM alone":
        ktc = {}
    elif name == "kvtier":
        ktc = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
               "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
               "kv_connector_extra_config": {"socket": sock}}
    elif name == "lmcache":
        py, why = peer_venv(build, name)
        if py is None:
            return None, why
        # Its CPU store and a local disk (what a fresh engine finds), chunks
        # of one block.
        env.update(LMCACHE_CHUNK_SIZE=str(BLOCK), LMCACHE_LOCAL_CPU="True",
                   LMCACHE_MAX_LOCAL_CPU_SIZE="2",
                   LMCACHE_LOCAL_DISK=f"file://{work}/lmcache-disk/",
                   LMCACHE_MAX_LOCAL_DISK_SIZE="4")
        ktc = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    elif name == "mooncake":
        py, why = peer_venv(build, name)
        if py is None:
            return None, why
        why = mooncake_services(os.path.dirname(py), work)
        if why:
            return None, why
        # The engine's store client holds no segment: the blocks live in the
        # store's own client process, which outlives the engine.
        conf = os.path.join(work, "mooncake.json")
        with open(conf, "w") as f:
            json.dump({"metadata_server": f"http://127.0.0.1:{MC_HTTP}/metadata",
                       "master_server_address": f"127.0.0.1:{MC_RPC}", "protocol": "tcp",
                       "device_name": "", "mode": "standalone-store",
                       "global_segment_size": 0, "local_buffer_size": "512MB"}, f)
        env["MOONCAKE_CONFIG_PATH"] = conf
        ktc = {"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"}
    else:
        raise ValueError(name)
    return [py, "-c", ENGINE, model, json.dumps(ktc), str(max_len), str(kv_bytes)], env


def start(name, spec, model, fresh=False):
    argv, env = spec
    return ttft.Engine(model, None, [], f"{name}{' fresh' if fresh else ''}", argv=argv,
                       env=env)


def run(args, model, work, sock, names):
    conv = Conversations(args.conversations, args.system, args.user, args.answer)
    longest = len(conv.prompt(0, args.turns + 1))
    max_len = -(-(longest + 64) // BLOCK) * BLOCK
    kv_bytes = args.kv_tokens * 2 * args.layers * 8 * 64 * 4
    specs, skipped = {}, {}
    for name in names:
        spec = contender(name, model, work, max_len, kv_bytes, sock, args.build)
        if spec[0] is None:
            skipped[name] = spec[1]
        else:
            specs[name] = spec
    engines = {}
    for name in list(specs):
        try:
            engines[name] = start(name, specs[name], model)
        except RuntimeError as e:
            skipped[name] = f"its engine did not start: {e}"
            del specs[name]
            continue
        fatal = PEER_FATAL.get(name)
        if fatal and fatal in open(engines[name].log).read():
            skipped[name] = f"its engine started without its store (its log: \"{fatal}\")"
            engines.pop(name).close()
            del specs[name]
    live = list(engines)
    if "vLLM alone" not in live or len(live) < 2:
        sys.exit("nothing to compare: " + "; ".join(f"{n}: {w}" for n, w in skipped.items()))
    # res[name][turn] = [(s, cached)] in conversation order
    res = {name: {} for name in live}
    k = 0
    phases = [(t, list(range(args.conversations))) for t in range(1, args.turns + 1)]
    for turn, convs in phases + [("fresh", list(range(args.conversations)))]:
        if turn == "fresh":
            for e in engines.values():
                e.close()
            engines = {name: start(name, specs[name], model, fresh=True) for name in live}
        for c in convs:
            ids = conv.prompt(c, args.turns + 1 if turn == "fresh" else turn)
            order = live[k % len(live):] + live[:k % len(live)]
            k += 1
            for name in order:
                r = engines[name].send({"ids": ids}, f"turn {turn} of conversation {c}")
                res[name].setdefault(turn, []).append((r["s"], r["cached"], len(ids)))
    for e in engines.values():
        e.close()
    return res, skipped, max_len


def report(args, res, skipped, max_len, load):
    later = list(range(2, args.turns + 1))

    def total(name, turns):
        return sum(s for t in turns for s, _, _ in res[name][t])

    def cached(name, turn):
        xs = res[name][turn]
        return sum(c for _, c, _ in xs) / len(xs)

    lengths = sorted({n for t in res["vLLM alone"].values() for _, _, n in t})
    aligned = all(n % BLOCK == 0 for n in lengths)
    print(f"Model: random Llama, {args.layers} layers, hidden {args.hidden}, 8 KV heads of 64, "
          f"fp32; block {BLOCK}; {args.conversations} conversations x {args.turns} turns over a "
          f"{args.system}-token system prompt, user {args.user} / answer {args.answer} tokens "
          f"(prompts {lengths[0]}..{lengths[-1]} tokens, "
          f"{'all on' if aligned else 'off'} a block boundary); KV space {args.kv_tokens} "
          f"tokens; max_model_len {max_len}; {os.cpu_count()} CPUs; load average "
          f"{load[0]:.1f} at the start, {load[1]:.1f} at the end.\n")
    print(f"| contender | turn 1 | turns 2-{args.turns} | fresh engine (turn "
          f"{args.turns + 1}) | restored tokens per request, turns 1..{args.turns} | "
          "restored, fresh |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in res:
        r1 = total(name, [1]) / total("vLLM alone", [1])
        r2 = total(name, later) / total("vLLM alone", later)
        rf = total(name, ["fresh"]) / total("vLLM alone", ["fresh"])
        per = " / ".join(f"{cached(name, t):.0f}" for t in range(1, args.turns + 1))
        print(f"| {name} | {r1:.3f} | {r2:.3f} | {rf:.3f} | {per} | "
              f"{cached(name, 'fresh'):.0f} |")
    print(f"\nTTFT summed over the turns' requests, as a fraction of vLLM alone's in this run "
          f"(vLLM alone: turn 1 {total('vLLM alone', [1]):.2f} s, turns 2-{args.turns} "
          f"{total('vLLM alone', later):.2f} s, fresh {total('vLLM alone', ['fresh']):.2f} s).")
    for name, why in skipped.items():
        print(f"\nSkipped {name}: {why}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="meson build directory (kvtierd)")
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system", type=int, default=1024, help="system prompt tokens")
    ap.add_argument("--user", type=int, default=64, help="tokens of each user message")
    ap.add_argument("--answer", type=int, default=32, help="tokens of each answer")
    ap.add_argument("--kv-tokens", type=int, default=2048,
                    help="vLLM's KV space in tokens (each engine)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024, help="a multiple of 512")
    ap.add_argument("--peers", default="", help="comma-separated: " + ", ".join(PEERS))
    ap.add_argument("--start-s", type=int, default=ttft.START_S,
                    help="the most an engine's start may take, in seconds (a deep model on a "
                    "busy machine takes longer than the default)")
    args = ap.parse_args()
    ttft.START_S = args.start_s
    peers = [p for p in args.peers.split(",") if p]
    for p in peers:
        if p not in PEERS:
            ap.error(f"unknown peer {p!r}: one of {', '.join(PEERS)}")
    kvtd.KVTIERD = os.path.join(args.build, "daemon", "kvtierd")
    work = tempfile.mkdtemp(prefix="kvt-turns-")
    os.chmod(work, 0o755)
    os.environ["TMPDIR"] = work
    conv = Conversations(args.conversations, args.system, args.user, args.answer)
    max_pos = len(conv.prompt(0, args.turns + 1)) + 128
    model = ttft.bench_model(work, args.layers, args.hidden, max_pos)
    cfg = "[pool]\ncapacity = 2G\nextent_size = 256M\n[tenants]\ndefault_quota = 2G\n"
    load0 = os.getloadavg()[0]
    try:
        with kvtd.Daemon(cfg) as d:
            res, skipped, max_len = run(args, model, work, d.socket,
                                        ["vLLM alone", "kvtier", *peers])
    finally:
        for p in _services:
            p.terminate()
            p.wait()
    report(args, res, skipped, max_len, (load0, os.getloadavg()[0]))


if __name__ == "__main__":
    main()

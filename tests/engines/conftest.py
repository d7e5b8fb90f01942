# SPDX-License-Identifier: Apache-2.0
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import kvtd  # noqa: E402


@pytest.fixture
def daemon():
    with kvtd.Daemon() as d:
        yield d


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """The tests' small Llama.  Under KVT_MODEL_CACHE it is made once per
    build, at a path named after make_model's code: vLLM's compile cache is
    keyed by the model's path, so the engines of every test file share one
    compilation instead of each compiling the same graphs."""
    cache = os.environ.get("KVT_MODEL_CACHE")
    if not cache:
        path = tmp_path_factory.mktemp("model")
        os.chmod(path, 0o755)
        os.chmod(path.parent, 0o755)
        return kvtd.make_model(str(path))
    import hashlib
    import inspect
    import shutil

    key = hashlib.sha256(inspect.getsource(kvtd.make_model).encode()
                         + str(kvtd.VOCAB).encode()).hexdigest()[:16]
    path = os.path.join(cache, f"engine-model-{key}")
    if not os.path.isdir(path):
        os.makedirs(cache, mode=0o755, exist_ok=True)
        tmp = tmp_path_factory.mktemp("model")
        kvtd.make_model(str(tmp))
        try:
            os.rename(tmp, path)
        except OSError:  # made by another run meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    os.chmod(path, 0o755)
    return path

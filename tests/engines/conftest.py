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
    path = tmp_path_factory.mktemp("model")
    os.chmod(path, 0o755)
    os.chmod(path.parent, 0o755)
    return kvtd.make_model(str(path))

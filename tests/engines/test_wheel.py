# SPDX-License-Identifier: Apache-2.0
"""The wheel scripts/wheel.sh builds, as an operator's pip gets it.

Its name and tags (cp311-abi3, manylinux), what its extension needs from
the host (libc and the libcrypto it carries: no CUDA library, no
libpython), the CUDA code in it (cubins for sm_80, sm_90, sm_100 and
sm_120, PTX for newer GPUs), and, for every CPython from 3.11 on found on
this machine, a clean venv with nothing but the wheel, where kvtier
imports, stores and loads blocks through a real kvtierd and says why its
CUDA path cannot run on a machine without a GPU."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

import kvtier

WHEEL = open(os.environ["KVT_WHEEL_FILE"]).read().strip()
# scripts/wheel.sh's tools (cuobjdump) beside the wheel.
TOOLS = os.path.join(os.path.dirname(WHEEL), "tools")
CUDA_ARCHS = {"80", "90", "100", "120"}
PTX_ARCHS = {"120"}

# Run in each clean venv: import, a round trip through kvtierd, the CUDA
# path's reason; prints what the test compares.
PROBE = r"""
import errno, json, sys, kvtier
sock = sys.argv[1]
out = {"python": list(sys.version_info[:2]), "file": kvtier._kvtier.__file__,
       "version": kvtier.version(), "have_cuda": kvtier.HAVE_CUDA,
       "why": kvtier.cuda_unavailable()}
keys = kvtier.hash_chain(range(64), 16)
with kvtier.Client(socket=sock, name="wheel") as c:
    ns = c.open_namespace("wheel-test", layers=2, kv_heads=2, head_bytes=64,
                          block_tokens=16, dtype=kvtier.DTYPES["float16"])
    size = ns.info["shard_bytes"]
    data = [bytes([i + 1]) * size for i in range(4)]
    out["stored"] = ns.store(0, keys, data)[0]
    back = [bytearray(size) for _ in range(4)]
    out["loaded"] = ns.load(0, keys, back)[0]
    out["same"] = [bytes(b) for b in back] == data
    if kvtier.HAVE_CUDA and out["why"]:
        try:
            kvtier.CudaContext(c, 0)
        except kvtier.Error as e:
            out["context"] = [e.errno == errno.ENODEV, e.strerror]
    ns.close()
# The shared libraries the process loaded: none of CUDA's (the runtime is
# linked in; the driver is loaded only where there is one).
out["libs"] = sorted({l.split()[-1].rsplit("/", 1)[-1] for l in open("/proc/self/maps")
                      if ".so" in l.split()[-1]})
print(json.dumps(out))
"""


def pythons():
    """Every CPython >= 3.11 with the GIL on this machine, one per build:
    the one that runs this, those on PATH, pyenv's, Debian's."""
    cands = [sys._base_executable]
    for minor in range(11, 20):
        cands += [shutil.which(f"python3.{minor}") or "", f"/usr/bin/python3.{minor}"]
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    cands += sorted(glob.glob(os.path.join(root, "versions", "*", "bin", "python3")))
    found, seen = [], set()
    for c in cands:
        if not c or not os.access(c, os.X_OK):
            continue
        r = subprocess.run([c, "-c", "import os, sys, sysconfig; print(sys.implementation.name, "
                            "*sys.version_info[:3], sysconfig.get_config_var('Py_GIL_DISABLED') "
                            "or 0, os.path.realpath(sys.base_prefix))"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            continue  # a pyenv shim of a version not selected
        impl, major, minor, micro, nogil, prefix = r.stdout.split(maxsplit=5)
        if prefix in seen:  # the same build by another name
            continue
        seen.add(prefix)
        if impl == "cpython" and (int(major), int(minor)) >= (3, 11) and nogil == "0":
            found.append((f"{major}.{minor}.{micro}", c))
    return found


PYTHONS = pythons()


def test_name_and_tags():
    """cp311-abi3 (one wheel for every CPython from 3.11 on), manylinux,
    and metadata that says 3.11 is the floor."""
    name = os.path.basename(WHEEL)
    assert re.fullmatch(r"kvtier-[0-9.]+-cp311-abi3-manylinux_2_\d+_x86_64\.whl", name), name
    with zipfile.ZipFile(WHEEL) as z:
        names = z.namelist()
        wheel_meta = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert re.search(r"^Tag: cp311-abi3-manylinux_2_\d+_x86_64$", wheel_meta, re.M), wheel_meta
    assert "Requires-Python: >=3.11" in meta.splitlines()
    assert "kvtier/_kvtier.abi3.so" in names
    assert kvtier._kvtier.__file__.endswith("_kvtier.abi3.so")


def test_what_the_extension_needs():
    """libc and the libcrypto the wheel carries, found through its rpath:
    no CUDA library (the runtime is linked in), no libpython."""
    with zipfile.ZipFile(WHEEL) as z:
        libs = [n for n in z.namelist() if n.startswith("kvtier.libs/")]
    assert any(re.fullmatch(r"kvtier\.libs/libcrypto-[0-9a-f]+\.so\.3", n) for n in libs), libs
    dyn = subprocess.run(["readelf", "-d", kvtier._kvtier.__file__], capture_output=True,
                         text=True, check=True).stdout
    needed = set(re.findall(r"\(NEEDED\).*\[(.+)\]", dyn))
    assert {n for n in needed if not n.startswith("libcrypto-")} == {
        "libc.so.6", "ld-linux-x86-64.so.2"}, needed
    assert re.search(r"\((RPATH|RUNPATH)\).*\[\$ORIGIN/\.\./kvtier\.libs\]", dyn), dyn
    # Everything else linked in (the library, the CUDA runtime) is local.
    syms = subprocess.run(["nm", "-D", "--defined-only", kvtier._kvtier.__file__],
                          capture_output=True, text=True, check=True).stdout.split()
    assert syms[2::3] == ["PyInit__kvtier"], syms


@pytest.mark.skipif(not kvtier.HAVE_CUDA, reason="the wheel was built without nvcc")
def test_cuda_code():
    """A cubin for each architecture of every kernel file, and PTX for the
    GPUs after them, as cuobjdump lists them."""
    tool = glob.glob(os.path.join(TOOLS, "lib", "python*", "site-packages", "nvidia", "*",
                                  "bin", "cuobjdump"))
    assert tool, f"no cuobjdump under {TOOLS} (scripts/wheel.sh installs it)"
    so = kvtier._kvtier.__file__
    elf = subprocess.run([tool[0], "--list-elf", so], capture_output=True, text=True,
                         check=True).stdout
    ptx = subprocess.run([tool[0], "--list-ptx", so], capture_output=True, text=True,
                         check=True).stdout
    cubins = re.findall(r"\.sm_(\d+)\.cubin$", elf, re.M)
    ptxs = re.findall(r"\.sm_(\d+)\.ptx$", ptx, re.M)
    files = len(ptxs)  # one PTX per kernel file
    assert files >= 2, ptx
    assert sorted(cubins) == sorted(list(CUDA_ARCHS) * files), elf
    assert set(ptxs) == PTX_ARCHS, ptx


@pytest.mark.parametrize("version,python", PYTHONS, ids=[v for v, _ in PYTHONS])
def test_clean_venv(tmp_path, daemon, version, python):
    """The wheel alone in a fresh venv of this CPython, no PYTHONPATH, no
    LD_LIBRARY_PATH: blocks stored and loaded through kvtierd byte for
    byte, and no CUDA library loaded from the host (the CUDA runtime is in
    the extension), even where one is on the loader's path."""
    venv = tmp_path / "venv"
    uv = shutil.which("uv", path=os.path.dirname(sys.executable))
    if uv:
        subprocess.run([uv, "venv", "-q", "--python", python, str(venv)], check=True)
        subprocess.run([uv, "pip", "install", "-q", "--no-deps", "--offline", "--python",
                        str(venv / "bin" / "python"), WHEEL], check=True)
    else:
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-index", "--no-deps",
                        WHEEL], check=True)
    r = subprocess.run([str(venv / "bin" / "python"), "-c", PROBE, daemon.socket],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert ".".join(map(str, out["python"])) == version.rsplit(".", 1)[0]
    assert out["file"] == str(venv / "lib" / f"python{version.rsplit('.', 1)[0]}" /
                              "site-packages" / "kvtier" / "_kvtier.abi3.so")
    assert out["version"] == kvtier.version()
    assert out["have_cuda"] == kvtier.HAVE_CUDA
    assert (out["stored"], out["loaded"], out["same"]) == (4, 4, True)
    assert not [n for n in out["libs"] if n.startswith("libcudart")], out["libs"]
    # The machine is the same: so is the CUDA path's reason, and
    # CudaContext raises ENODEV with it.
    assert out["why"] == kvtier.cuda_unavailable()
    if kvtier.HAVE_CUDA and out["why"]:
        assert out["context"] == [True, out["why"]]


def test_a_newer_cpython():
    """The one wheel was tried on a CPython newer than 3.11 too."""
    newer = [v for v, _ in PYTHONS if tuple(map(int, v.split(".")[:2])) > (3, 11)]
    if not newer:
        pytest.skip("no CPython newer than 3.11 on this machine (only "
                    + ", ".join(v for v, _ in PYTHONS) + ")")
    assert newer

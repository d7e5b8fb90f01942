# SPDX-License-Identifier: Apache-2.0
"""kvtier.sglang's zero-copy page calls against a plain copy of the same
pages between two host tensors, measured side by side.

For each of SGLang's MHA host layouts, one SGLang host pool (its own class,
on the CPU) and one kvtierd: batch_set_v1 of PAGES fresh pages (kvtierd
reserves, the library gathers each page out of the host pool into the
pool's slots, commits), batch_get_v1 of them into other pages of a second
host pool (lease, scatter, release), and the limit: the same pages copied
from the first host pool's tensor into the second's by torch (one strided
copy a page, in place), which moves the same bytes in the same layouts
with no daemon and no keys; and, for scale, memcpy: torch's copy of as
many bytes between two contiguous tensors.  Each is
timed ROUNDS times, each call and the copy in turn: the medians of pages/s
and GB/s are reported, and the median of each round's ratio to the copy.

    PYTHONPATH=build/client/python build/venv/bin/python tests/bench/bench-sglang.py \\
        --build build
"""

import argparse
import hashlib
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engines"))

import kvtd  # noqa: E402
import kvtier  # noqa: E402
import sglang_pools as sp  # noqa: E402
from kvtier.identity import ModelIdentity  # noqa: E402


def limit_copy(src, dst, layout, src_pages, dst_pages):
    """The same pages from src's kv_buffer into dst's, by torch alone: one
    strided copy a page, in place (as SGLang's own page accessors index
    them)."""
    s, d, p = src.kv_buffer, dst.kv_buffer, sp.PAGE
    for a, b in zip(src_pages, dst_pages):
        if layout in ("page_first_direct", "page_head"):
            d[:, b].copy_(s[:, a])
        elif layout == "layer_first":
            d[:, :, b * p:(b + 1) * p].copy_(s[:, :, a * p:(a + 1) * p])
        else:  # page_first
            d[:, b * p:(b + 1) * p].copy_(s[:, a * p:(a + 1) * p])


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="meson build directory (kvtierd)")
    ap.add_argument("--pages", type=int, default=64, help="pages per call")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head", type=int, default=64)
    ap.add_argument("--page", type=int, default=16, help="tokens per page")
    ap.add_argument("--reuse", action="store_true",
                    help="delete each round's pages, so that the next round's stores land in "
                         "the same slots of kvtierd's pool (touched before) rather than new ones")
    args = ap.parse_args()
    kvtd.KVTIERD = os.path.join(args.build, "daemon", "kvtierd")
    sp.LAYERS, sp.HEAD, sp.PAGE = args.layers, args.head, args.page
    # The device side sized so that the host pool (twice it) holds 2 x pages.
    sp.DEVICE_TOKENS = args.pages * args.page
    n = args.pages
    page_bytes = 2 * args.layers * args.page * args.heads * args.head * 2
    pool_mb = max(256, 4 * (args.rounds + 1) * n * page_bytes >> 20)
    cfg = f"[pool]\ncapacity = {pool_mb}M\nextent_size = 64M\n[tenants]\ndefault_quota = {pool_mb}M\n"
    print(f"{n} pages of {args.page} tokens per call: {args.layers} layers, {args.heads} KV "
          f"heads of {args.head}, bf16, {page_bytes >> 10} KiB a page; median of {args.rounds} "
          f"rounds; stores into {'slots used before' if args.reuse else 'new slots'}; "
          f"{os.cpu_count()} CPUs\n")
    print("| host layout | batch_set_v1 pages/s | GB/s | × copy | batch_get_v1 pages/s | GB/s "
          "| × copy | torch copy GB/s | memcpy GB/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    flat = [torch.empty(n * page_bytes, dtype=torch.uint8) for _ in range(2)]
    flat[0].fill_(1)
    flat[1].fill_(2)
    memcpy = statistics.median(timed(lambda: flat[1].copy_(flat[0])) for _ in range(args.rounds))
    with kvtd.Daemon(cfg) as d, kvtier.Client(socket=d.socket, name="bench") as admin:
        for layout in sp.MHA_LAYOUTS:
            src = sp.host_pool(layout, heads=args.heads, seed=1)
            dst = sp.host_pool(layout, heads=args.heads, seed=2)
            bs, bd = sp.backend(src, d.socket), sp.backend(dst, d.socket)
            ns = ModelIdentity(model=sp.MODEL, layers=args.layers, kv_heads=args.heads,
                               head_size=args.head, dtype="bfloat16",
                               block_tokens=args.page).open(admin)
            src_pages, dst_pages = list(range(n)), list(range(n, 2 * n))
            sets, gets, copies = [], [], []
            for r in range(args.rounds + 1):  # the first round warms up
                keys = [hashlib.sha256(f"{layout}/{r}/{i}".encode()).hexdigest()
                        for i in range(n)]
                ok = []
                t_set = timed(lambda: ok.extend(bs.batch_set_v1(keys, sp.host_indices(src_pages))))
                got = []
                t_get = timed(lambda: got.extend(bd.batch_get_v1(keys, sp.host_indices(dst_pages))))
                if ok != [True] * n or got != [True] * n:
                    sys.exit(f"{layout}: round {r} stored {sum(ok)} and loaded {sum(got)} of {n}")
                t_copy = timed(lambda: limit_copy(src, dst, layout, src_pages, dst_pages))
                if args.reuse:  # its slots are the next round's
                    ns.delete(b"".join(bytes.fromhex(k) for k in keys))
                if r:
                    sets.append(t_set)
                    gets.append(t_get)
                    copies.append(t_copy)
            ts, tg, tc = (statistics.median(x) for x in (sets, gets, copies))
            # Each call against the copy of its own round (A B A B ...).
            rs = statistics.median(c / t for c, t in zip(copies, sets))
            rg = statistics.median(c / t for c, t in zip(copies, gets))
            gb = n * page_bytes / 1e9
            print(f"| {layout} | {n / ts:,.0f} | {gb / ts:.2f} | {rs:.2f} | {n / tg:,.0f} | "
                  f"{gb / tg:.2f} | {rg:.2f} | {gb / tc:.2f} | {gb / memcpy:.2f} |")
            ns.close()
            bs.close()
            bd.close()
    print("\n× copy: the call's rate as a fraction of torch's copy of the same pages between "
          "the two host tensors, in the same round (1.00: as fast).")


if __name__ == "__main__":
    main()

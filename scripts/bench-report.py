#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tables and plots from one run of scripts/bench.sh.

Usage: scripts/bench-report.py RESULTS_DIR

Reads host.json, nvme.json, scale.json, codec.json and restart.json (each optional: a part that was
skipped or failed is said to be so), machine.txt and timing.txt, and writes
into the same directory:

  benchmarks-section.md   markdown to paste into docs/benchmarks.md: the
                          tables, with links to the plots beside them
  *.dat, *.gp, *.png      gnuplot data, scripts and plots (PNG only when
                          gnuplot is installed)

Every ratio is the median of the pairwise ratios of a run, with the lowest
and highest pair; absolute figures are medians and are there for context.
"""
import json
import os
import shutil
import subprocess
import sys


def load(d, name):
    path = os.path.join(d, name + ".json")
    if not os.path.exists(path):
        for why in ("skipped", "failed"):
            if os.path.exists(os.path.join(d, name + "." + why)):
                return None, why
        return None, "not run"
    with open(path) as f:
        text = f.read().strip()
    if not text:
        return None, "no output"
    return json.loads(text.splitlines()[-1]), None


def kv_file(path):
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k.strip()] = v.strip()
    return out


def rng(o, key, fmt="{:.3f}"):
    """median [min..max] of a ratio (or any figure with _min and _max)."""
    return (fmt + " [" + fmt + ".." + fmt + "]").format(o[key], o[key + "_min"], o[key + "_max"])


def size_name(b):
    if b >= 1 << 30 and b % (1 << 30) == 0:
        return "%d GiB" % (b >> 30)
    return "%d MiB" % (b >> 20) if b >= 1 << 20 and b % (1 << 20) == 0 else "%d KiB" % (b >> 10)


def size_key(b):
    return "%dm" % (b >> 20) if b >= 1 << 20 and b % (1 << 20) == 0 else "%dk" % (b >> 10)


def count_md(n):
    e = 0
    v = n
    while v >= 10 and v % 10 == 0:
        v //= 10
        e += 1
    return "10<sup>%d</sup>" % e if v == 1 and e else "{:,}".format(n)


class Plots:
    """gnuplot scripts written next to their data; PNGs when gnuplot runs."""

    def __init__(self, d):
        self.d = d
        self.gnuplot = shutil.which("gnuplot")
        self.made = []

    def write(self, name, data, script):
        with open(os.path.join(self.d, name + ".dat"), "w") as f:
            f.write(data)
        head = (
            "set terminal pngcairo size 900,540 font 'sans,11'\n"
            "set output '%s.png'\n"
            "set grid\n"
            "set key top left\n" % name
        )
        with open(os.path.join(self.d, name + ".gp"), "w") as f:
            f.write(head + script)
        if not self.gnuplot:
            return False
        r = subprocess.run([self.gnuplot, name + ".gp"], cwd=self.d, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write("bench-report: gnuplot %s.gp: %s\n" % (name, r.stderr.strip()))
            return False
        self.made.append(name + ".png")
        return True

    def link(self, name, alt):
        return "![%s](%s.png)\n" % (alt, name) if name + ".png" in self.made else ""

    def ratio_bars(self, name, data, title, style, ylabel, colour, alt):
        """A bar a row of data (index, label, ..., ratio, min, max in columns 1, 2, 5, 6, 7)
        against a dashed line at 1; the markdown link to the plot."""
        self.write(
            name,
            data,
            "set title '%s'\n%s"
            "set style fill solid 0.6\nset boxwidth 0.6\nset ylabel '%s'\nset yrange [0:*]\n"
            "set xtics rotate by -25 left\nset key off\nset bmargin 7\n"
            "plot '%s.dat' using 1:5 with boxes lc '%s', "
            "'' using 1:5:6:7:xtic(2) with yerrorbars lc 'black' pt 0, 1 with lines dt 2 lc 'gray'\n"
            % (title, style, ylabel, name, colour),
        )
        return self.link(name, alt)


def host_section(h, P):
    out = []
    sizes = h.get("block_sizes", [])
    redis = "redis_version" in h
    out.append(
        "`kvt_store` then `kvt_load` of %d MiB per round, %d rounds per pair, %d pairs; the limit "
        "is `memcpy` of the same bytes twice (caller to middle, middle to caller). GB/s counts "
        "both directions.%s\n"
        % (
            h["round_bytes"] >> 20,
            h["rounds"],
            h["pairs"],
            " The peer is Redis %s on a Unix socket, no persistence, through hiredis %s: "
            "pipelined `SET` of every block, then pipelined `GET` into the caller's buffer, in "
            "the same rounds." % (h["redis_version"], h["hiredis_version"])
            if redis
            else " No Redis peer in this run.",
        )
    )
    if redis:
        out.append("| block | kvtier GB/s | Redis GB/s | memcpy GB/s | kvtier / memcpy | Redis / memcpy | kvtier / Redis |")
        out.append("|---|---|---|---|---|---|---|")
    else:
        out.append("| block | kvtier GB/s | memcpy GB/s | kvtier / memcpy |")
        out.append("|---|---|---|---|")
    data = "# block_kib kvtier memcpy redis ratio ratio_min ratio_max redis_ratio redis_min redis_max\n"
    for b in sizes:
        o = h["copy_" + size_key(b)]
        if redis:
            out.append(
                "| %s | %.2f | %.2f | %.2f | %s | %s | %s |"
                % (size_name(b), o["kvtier_gbs"], o["redis_gbs"], o["memcpy_gbs"], rng(o, "ratio"),
                   rng(o, "redis_ratio"), rng(o, "kvtier_vs_redis", "{:.2f}"))
            )
        else:
            out.append("| %s | %.2f | %.2f | %s |" % (size_name(b), o["kvtier_gbs"], o["memcpy_gbs"], rng(o, "ratio")))
        data += "%d %.3f %.3f %.3f %.4f %.4f %.4f %.4f %.4f %.4f\n" % (
            b >> 10, o["kvtier_gbs"], o["memcpy_gbs"], o.get("redis_gbs", 0), o["ratio"], o["ratio_min"],
            o["ratio_max"], o.get("redis_ratio", 0), o.get("redis_ratio_min", 0), o.get("redis_ratio_max", 0))
    out.append("")
    rplot = (
        ", 'host-tier.dat' using 1:8:9:10 with yerrorlines lw 2 pt 9 title 'Redis (hiredis) / memcpy'"
        if redis else ""
    )
    P.write(
        "host-tier",
        data,
        "set title 'Host tier: store+load against memcpy (median, min..max over pairs)'\n"
        "set logscale x 2\nset xlabel 'block (KiB)'\nset ylabel 'ratio to memcpy'\n"
        "set xtics (64, 256, 1024, 2048, 4096)\nset xrange [48:5600]\nset yrange [0:*]\n"
        "set key outside bottom center horizontal\n"
        "plot 'host-tier.dat' using 1:5:6:7 with yerrorlines lw 2 pt 7 title 'kvtier / memcpy'%s, "
        "1 with lines dt 2 lc 'gray' title 'memcpy'\n" % rplot,
    )
    out.append(P.link("host-tier", "store+load against memcpy and Redis, by block size"))
    return out


def control_section(h, P):
    out = []
    out.append(
        "The limit is a 24-byte write/read ping-pong with a forked echo process over a "
        "`socketpair`, in the same pair. Processes are pinned: everything on one CPU, then the "
        "peers on another CPU than the benchmark. An acquire + release is two round trips, so it "
        "is compared with two bare ones.\n"
    )
    out.append("| operation | placement | kvtier µs | bare µs | ratio |")
    out.append("|---|---|---|---|---|")
    data = "# index label kvtier_us bare_us ratio min max\n"
    i = 0
    for key, label in (("rtt", "ping"), ("lookup1", "lookup, 1 key"), ("acquire_release", "acquire + release, 1 block")):
        for pl, pname in (("same_cpu", "same CPU"), ("across_cpus", "across CPUs")):
            o = h.get("%s_%s" % (key, pl))
            if not o:
                continue
            bare = o["bare_us"] * (2 if key == "acquire_release" else 1)
            out.append("| %s | %s | %.2f | %.2f | %s |" % (label, pname, o["kvtier_us"], bare, rng(o, "ratio")))
            data += '%d "%s, %s" %.3f %.3f %.4f %.4f %.4f\n' % (i, label, pname, o["kvtier_us"], bare, o["ratio"],
                                                                o["ratio_min"], o["ratio_max"])
            i += 1
    out.append("")
    out.append("Batched lookups, 1024 keys per request:\n")
    out.append("| placement | hits, M keys/s | misses, M keys/s | µs per batch (hits) | bare round trip's share |")
    out.append("|---|---|---|---|---|")
    for pl, pname in (("same_cpu", "same CPU"), ("across_cpus", "across CPUs")):
        o = h.get("lookup_" + pl)
        if not o:
            continue
        out.append("| %s | %.2f | %.2f | %.1f | %.0f %% |" % (pname, o["hit_keys_s"] / 1e6, o["miss_keys_s"] / 1e6,
                                                           o["hit_us"], 100 * o["hit_bare_fraction"]))
    out.append("")
    out.append(P.ratio_bars("control-plane", data,
                            "Control plane: kvtier round trip / bare socket round trip (median, min..max)",
                            "set style data histogram\n", "ratio to the bare round trip", "steelblue",
                            "control round trips against the bare socket"))
    return out


def nvme_section(n, P):
    out = []
    out.append(
        "Sets of %d MiB (%d blocks of %d MiB), %d pairs, queue depth %d, on %s (`%s`); fio with "
        "the same engine settings (io_uring, O_DIRECT, 2 MiB, registered buffers and files: %s) "
        "on a file of its own beside the spill file.\n"
        % (n["set_bytes"] >> 20, n["set_bytes"] // n["block_bytes"], n["block_bytes"] >> 20, n["pairs"],
           n["queue_depth"], n["fs"], n["dir"], "yes" if n.get("fio_registered") else "no")
    )
    out.append("| operation | kvtier GB/s | fio GB/s | kvtier / fio | kvtierd CPU s/GB | cores at 50 GB/s "
               "| event loop's own CPU s/GB |")
    out.append("|---|---|---|---|---|---|---|")
    data = "# index label kvtier fio ratio min max\n"
    i = 0
    rows = []
    batch = n.get("restore_batch", 1)
    for eng in ("io_uring", "threads"):
        rows += [("spill_" + eng, "spill (write), " + eng),
                 ("restore_" + eng, "restore (read), %s, %d block%s a load" % (eng, batch, "s"[:batch > 1])),
                 ("restore_%s_batch1" % eng, "restore (read), %s, 1 block a load" % eng)]
    for files in (1, 2):
        jobs = "1 job" if files == 1 else "%d jobs" % files
        rows += [("spill_files_%d" % files, "spill, %d file%s (fio %s)" % (files, "s"[:files > 1], jobs)),
                 ("restore_files_%d" % files, "restore, %d file%s, %d block%s a load (fio %s)"
                  % (files, "s"[:files > 1], batch, "s"[:batch > 1], jobs)),
                 ("restore_files_%d_batch1" % files, "restore, %d file%s, 1 block a load (fio %s)"
                  % (files, "s"[:files > 1], jobs))]
    rows.append(("context", "context of %d tokens, io_uring" % n.get("context_tokens", 0)))
    for key, label in rows:
        o = n.get(key)
        if not o:
            continue
        cpu = o.get("kvtierd_cpu_s_per_gb")
        loop = o.get("loop_cpu_s_per_gb")
        out.append("| %s | %.2f | %.2f | %s | %s | %s | %s |" % (
            label, o["kvtier_gbs"], o["fio_gbs"], rng(o, "ratio"),
            "%.3f" % cpu if cpu is not None else "",
            "%.1f" % (50 * cpu) if cpu is not None else "",
            rng(o, "loop_cpu_s_per_gb", "{:.4f}") if loop is not None else ""))
        data += '%d "%s" %.3f %.3f %.4f %.4f %.4f\n' % (i, label, o["kvtier_gbs"], o["fio_gbs"], o["ratio"],
                                                         o["ratio_min"], o["ratio_max"])
        i += 1
    out.append("")
    out.append(P.ratio_bars("nvme-tier", data,
                            "NVMe tier: kvtier / fio with the same engine settings (median, min..max)",
                            "", "ratio to fio", "seagreen", "spill and restore against fio"))
    return out


def codec_section(c, P):
    out = []
    out.append(
        "A bfloat16 paged cache of Llama-3-8B's shape, %d MiB a round, %d pairs; GB/s of logical "
        "(bfloat16) bytes; ratios are medians of the pairs'.\n" % (c["mib"], c["pairs"]))
    out.append("| codec | slot bytes | store GB/s | load GB/s | store+load GB/s | vs memcpy | vs codec none |")
    out.append("|---|---|---|---|---|---|---|")
    for key, label in (("memcpy", "memcpy"), ("none", "none"), ("fp8", "fp8-e4m3"), ("int4", "int4")):
        o = c.get(key)
        if not o:
            continue
        out.append("| %s | %d | %.2f | %.2f | %.2f | %s | %s |" % (
            label, o["slot"], o["store_gbs"], o["load_gbs"], o["gbs"],
            "%.3f" % o["vs_memcpy"] if "vs_memcpy" in o else "",
            "%.3f" % o["vs_none"] if "vs_none" in o else ""))
    out.append("")
    return out


def restart_section(r, P):
    out = []
    out.append(
        "Blocks of 2 MiB stored and written back, then an upgrade in place that keeps the host tier "
        "against a restart with `keep = no` that finds them on NVMe only: the time to the first "
        "lookup answered, the share of the blocks in host memory then, and the time until every "
        "block is loaded back (every byte checked), beside memcpy of the same bytes.\n")
    out.append("| size | memcpy | kept: first answer | in host memory | all loaded | vs memcpy "
               "| NVMe: first answer | in host memory | all loaded | NVMe / kept | adoption |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for z in r["sizes"]:
        k, n = z["kept"], z["nvme"]
        out.append("| %d GiB | %.3f s | %.0f ms | %.1f %% | %.2f s | %.2f× | %.0f ms | %.1f %% | %.2f s | %.2f× | %.0f ms |" % (
            z["gib"], z["memcpy_s"], k["serve_ms"], 100 * k["host_share"], k["loaded_s"],
            k["loaded_s"] / z["memcpy_s"], n["serve_ms"], 100 * n["host_share"], n["loaded_s"],
            n["loaded_s"] / k["loaded_s"], k["adopt_ms"]))
    out.append("")
    out.append("The ledger on the store path (4 KiB blocks, %d pairs): keep = yes %.0f k stores/s, "
               "keep = no %.0f k stores/s, yes / no %s.\n" % (
                   r["pairs"], r["stores_kept"] / 1e3, r["stores_plain"] / 1e3, rng(r, "store_ratio")))
    return out


def fair_section(f, P):
    out = []
    pin = f.get("pin", "none")
    where = {
        "split": "the daemon's loop pinned to one CPU, B and A to another",
        "same": "the daemon's loop and B pinned to one CPU, A to another",
    }.get(pin, "unpinned")
    out.append(
        "Tenant B's one-key lookups alone and beside tenant A flooding the daemon with 8192-key "
        "lookups over %d blocks: %d pairs, each of %d rounds of B alone, A alone and both (forwards "
        "and backwards in turn), %d lookups of B's on each side of a pair; %s. The ratio is B's median beside "
        "over alone, pair by pair; A's rate beside B over alone, likewise.\n"
        % (f["blocks"], f["pairs"], f.get("rounds", 1), f["iters"], where))
    out.append("| A's load | B p50 alone | B p50 beside | beside / alone | pairs > 2× | B p90 alone | "
               "B p90 beside | B on the loop's CPU alone / beside | A's rate beside / alone | "
               "turns cut an A request | A's work a cut turn |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, o in f["loads"].items():
        a_ratio = rng(o, "a_ratio") if "a_ratio" in o else "-"
        cut_us = "%.1f µs" % o["cut_turn_us"] if o.get("cut_turn_us", -1) >= 0 else "-"
        cuts = "%.1f" % o["cuts_per_request"] if "cuts_per_request" in o else "-"
        out.append("| %s | %.1f µs | %.1f µs | %s | %d of %d | %.1f µs | %.1f µs | %.0f %% / %.0f %% | %s | %s | %s |" % (
            name, o["alone_p50_us"], o["beside_p50_us"], rng(o, "ratio"),
            o.get("pairs_above_2x", 0), f["pairs"], o["alone_p90_us"], o["beside_p90_us"],
            100 * o.get("same_cpu_alone", 0), 100 * o.get("same_cpu_beside", 0), a_ratio, cuts,
            cut_us))
    out.append("")
    return out


def evict_section(text):
    out = ["The default eviction policy's fraction of Belady's hits (tokens saved) against LRU's, "
           "one shared tier at each size of the working set; `below-lru` says whether the default "
           "saves fewer tokens than LRU there (`scripts/bench-evict.sh`, docs/workload.md).\n"]
    rows = [l.split() for l in text.splitlines()[1:] if l.strip()]
    out.append("| trace | size | default | of Belady | LRU of Belady | below LRU |")
    out.append("|---|---|---|---|---|---|")
    for r in rows:
        out.append("| " + " | ".join(r) + " |")
    out.append("")
    return out


def scale_section(s, P):
    out = []
    ix = s["index"]
    pts = ix["points"]
    if pts:
        out.append(
            "One namespace of 4 KiB blocks, the smallest slot the daemon has (a shard is padded to "
            "4 KiB), so that the pool stays small; all blocks in host memory (pool %s). At each "
            "size: a one-key lookup of a random stored key against `kvt_client_ping` (the same "
            "round trip without the index); 1024-key lookups of random stored keys, in ns per key "
            "beyond the round trip, against the same keys looked up in a plain open-addressing "
            "table in the benchmark's process with as many keys and slots as the daemon's index "
            "(the keys themselves in 32-byte slots, one cache line a key, looked up in batches "
            "with prefetching: the memory system's cost); and the "
            "daemon's RssAnon from `/proc/PID/status`. The pool is shared memory (RssShmem), so "
            "RssAnon is the daemon's bookkeeping; per block is its growth since before the first "
            "block (%d KiB), marginal is the growth since the size before. The daemon and the "
            "benchmark run on one CPU while lookups are timed; %d pairs.\n"
            % (size_name(ix["pool_bytes"]), ix["base_rss_anon_kib"], s["pairs"])
        )
        out.append("| blocks | lookup, 1 key, µs | ping, µs | lookup / ping | 1024 keys, M keys/s | ns per key beyond the round trip | plain table, ns per key | kvtier / plain table | RssAnon, MiB | bytes per block | marginal |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        data = "# blocks lookup1_us min max ping_us keys_s bytes_per_block marginal ratio ns_per_key plain_ns_per_key\n"
        for p in pts:
            if "skipped" in p:
                out.append("| %s | skipped: %s | | | | | | | | | |" % (count_md(p["blocks"]), p["skipped"]))
                continue
            out.append(
                "| %s | %.2f | %.2f | %s | %.2f | %.1f | %.1f | %s | %.1f | %.0f | %.0f |"
                % (count_md(p["blocks"]), p["lookup1_us"], p["ping_us"], rng(p, "lookup1_ratio"),
                   p["batch_keys_s"] / 1e6, p["ns_per_key_beyond_rtt"], p["plain_ns_per_key"],
                   rng(p, "ns_per_key_ratio"), p["rss_anon_kib"] / 1024,
                   p["bytes_per_block"], p["marginal_bytes_per_block"])
            )
            data += "%d %.3f %.3f %.3f %.3f %.0f %.1f %.1f %.4f %.2f %.2f\n" % (
                p["blocks"], p["lookup1_us"], p["lookup1_us_min"], p["lookup1_us_max"], p["ping_us"],
                p["batch_keys_s"], p["bytes_per_block"], p["marginal_bytes_per_block"], p["lookup1_ratio"],
                p["ns_per_key_beyond_rtt"], p["plain_ns_per_key"])
        out.append("")
        P.write(
            "scale-lookup",
            data,
            "set title 'Lookup latency as the index grows (4 KiB blocks, one CPU)'\n"
            "set logscale x\nset format x '10^{%L}'\nset autoscale xfix\nset offsets graph 0.05, graph 0.05, 0, 0\nset xlabel 'blocks in the index'\n"
            "set ylabel 'µs per round trip'\nset y2label 'M keys/s, 1024-key lookups'\n"
            "set yrange [0:*]\nset y2range [0:*]\nset ytics nomirror\nset y2tics\n"
            "plot 'scale-lookup.dat' using 1:2:3:4 with yerrorlines lw 2 pt 7 title 'lookup, 1 key', "
            "'' using 1:5 with linespoints lw 2 pt 5 title 'ping (limit)', "
            "'' using 1:($6/1e6) axes x1y2 with linespoints lw 2 pt 9 title '1024-key lookups (right)'\n",
        )
        P.write(
            "scale-memory",
            data,
            "set title 'Daemon memory per block (RssAnon, 4 KiB blocks)'\n"
            "set logscale x\nset format x '10^{%L}'\nset autoscale xfix\nset offsets graph 0.05, graph 0.05, 0, 0\nset xlabel 'blocks in the index'\n"
            "set ylabel 'bytes per block'\nset yrange [0:*]\nset key top right\n"
            "plot 'scale-memory.dat' using 1:7 with linespoints lw 2 pt 7 title 'growth since empty / blocks', "
            "'' using 1:8 with linespoints lw 2 pt 5 title 'marginal, since the size before'\n",
        )
        P.write(
            "scale-keys",
            data,
            "set title '1024-key lookups: ns per key, kvtier beyond the round trip and a plain table'\n"
            "set logscale x\nset format x '10^{%L}'\nset autoscale xfix\nset offsets graph 0.05, graph 0.05, 0, 0\nset xlabel 'blocks in the index'\n"
            "set ylabel 'ns per key'\nset yrange [0:*]\nset key top left\n"
            "plot 'scale-keys.dat' using 1:10 with linespoints lw 2 pt 7 title 'kvtier, beyond the round trip', "
            "'' using 1:11 with linespoints lw 2 pt 5 title 'plain table in process (limit)'\n",
        )
        out.append(P.link("scale-lookup", "lookup latency against index size"))
        out.append(P.link("scale-keys", "ns per key of batched lookups against a plain table"))
        out.append(P.link("scale-memory", "daemon memory per block against index size"))
    rc = s["recovery"]
    pts = rc["points"]
    if pts:
        out.append(
            "Recovery: a spill file of %d MiB under `%s` (%s) holding N blocks of 4 KiB (8 KiB each "
            "on disk with the slot header), written by the daemon's own write-back from a host "
            "pool of %s that holds them all; kvtierd "
            "restarted on it once per pair. The recovery time is the daemon's own (its log's "
            "\"Spill recovery\" summary, 1 ms resolution; `kvtierctl status --json` reports the "
            "same as `nvme_recovery_ms`). The limit is reading the same bytes of the file, at the "
            "same offsets and in reads of the same size (4 MiB), with O_DIRECT at the depth recovery "
            "reads at (region headers 32 ahead, eight 4 MiB reads in flight, io_uring), with the "
            "daemon stopped, right before each restart. Regions nobody "
            "wrote are read as well: recovery reads every region header. \"Listening\" is from "
            "fork to an accepting socket. Per block is RssAnon after recovery less that of a "
            "daemon on an empty file (%d KiB).\n"
            % (rc["spill_bytes"] >> 20, rc["dir"], rc["device"], size_name(rc.get("pool_bytes", 0)),
               rc["base_rss_anon_kib"])
        )
        out.append("| blocks on disk | recovery, ms | bare reads, ms | recovery / bare reads | read | listening after, ms | RssAnon per block |")
        out.append("|---|---|---|---|---|---|---|")
        data = "# blocks rec_ms min max raw_ms min max listening_ms\n"
        for p in pts:
            if "skipped" in p:
                out.append("| %s | skipped: %s | | | | | |" % (count_md(p["blocks"]), p["skipped"]))
                continue
            out.append(
                "| %s | %s | %s | %s | %.0f MiB, %d region%s | %.1f | %.0f B |"
                % (count_md(p["blocks"]), rng(p, "recovery_ms", "{:.0f}"), rng(p, "bare_read_ms", "{:.1f}"),
                   rng(p, "ratio"), p["read_bytes"] / 2**20, p["regions_bound"],
                   "" if p["regions_bound"] == 1 else "s", p["listening_ms"],
                   p["bytes_per_block"])
            )
            data += "%d %.3f %.3f %.3f %.3f %.3f %.3f %.3f\n" % (
                p["blocks"], p["recovery_ms"], p["recovery_ms_min"], p["recovery_ms_max"], p["bare_read_ms"],
                p["bare_read_ms_min"], p["bare_read_ms_max"], p["listening_ms"])
        out.append("")
        P.write(
            "scale-recovery",
            data,
            "set title 'Recovery time against blocks on disk (4 KiB blocks)'\n"
            "set logscale xy\nset format x '10^{%L}'\nset autoscale xfix\nset offsets graph 0.05, graph 0.05, 0, 0\nset xlabel 'blocks in the spill file'\n"
            "set ylabel 'ms'\n"
            "plot 'scale-recovery.dat' using 1:2:3:4 with yerrorlines lw 2 pt 7 title 'recovery (daemon log)', "
            "'' using 1:5:6:7 with yerrorlines lw 2 pt 5 title 'the same reads, bare (limit)', "
            "'' using 1:8 with linespoints lw 1 pt 1 dt 2 title 'daemon listening after start'\n",
        )
        out.append(P.link("scale-recovery", "recovery time against blocks on disk"))
    wb = s.get("writeback", {})
    pts = wb.get("points", [])
    if wb.get("spill_bytes") and pts:
        first = next(p for p in pts if "skipped" not in p)
        out.append(
            "Write-back: N dirty blocks of 4 KiB stored with write-back held off "
            "(`writeback_high = 100%%`), then let go by a reload to 0%%, %s, under `%s` (%s), "
            "queue depth %d, a fresh daemon and spill file each time. Measured while the middle "
            "80%% of the blocks were written (from a tenth on disk to nine tenths), so that what "
            "a drain costs once (the reload, its first and last turns) is left out. The limit is "
            "the same writes issued bare (each region's 8 KiB header; each block's 4 KiB slot "
            "header and 4 KiB, submitted together) with O_DIRECT through io_uring from a "
            "registered buffer, %d blocks in flight as write-back keeps, into a fresh file of the "
            "same size. The daemon's CPU time per block (all its threads, from "
            "`/proc/PID/task/*/schedstat`) is compared with the smallest point's. RssAnon per "
            "dirty block is the daemon's growth from before the blocks were stored, divided by "
            "them.\n"
            % ("policy " + wb["eviction"] if wb.get("eviction") else "the default policy",
               wb["dir"], wb["device"], wb["queue_depth"], wb["blocks_in_flight"])
        )
        out.append("| dirty blocks | write-back, blocks/s | bare writes, blocks/s | write-back / bare (time a block) | whole drain, ms (bare) | daemon CPU a block, µs | CPU / CPU at %s | RssAnon per dirty block |"
                   % count_md(first["blocks"]))
        out.append("|---|---|---|---|---|---|---|---|")
        data = "# blocks blocks_s bare_blocks_s ratio min max cpu_us cpu_ratio min max\n"
        for p in pts:
            if "skipped" in p:
                out.append("| %s | skipped: %s | | | | | | |" % (count_md(p["blocks"]), p["skipped"]))
                continue
            out.append(
                "| %s | %.0f | %.0f | %s | %.1f (%.1f) | %.2f | %s | %.0f B |"
                % (count_md(p["blocks"]), p["blocks_s"], p["bare_blocks_s"], rng(p, "ratio"),
                   p["writeback_ms"], p["bare_ms"], p["cpu_us_per_block"], rng(p, "cpu_ratio"),
                   p["rss_anon_per_dirty_block"])
            )
            data += "%d %.0f %.0f %.4f %.4f %.4f %.3f %.4f %.4f %.4f\n" % (
                p["blocks"], p["blocks_s"], p["bare_blocks_s"], p["ratio"], p["ratio_min"],
                p["ratio_max"], p["cpu_us_per_block"], p["cpu_ratio"], p["cpu_ratio_min"],
                p["cpu_ratio_max"])
        out.append("")
        P.write(
            "scale-writeback",
            data,
            "set title 'Write-back of N dirty blocks (4 KiB blocks)'\n"
            "set logscale x\nset format x '10^{%L}'\nset autoscale xfix\nset offsets graph 0.05, graph 0.05, 0, 0\nset xlabel 'dirty blocks'\n"
            "set ylabel 'ratio'\nset yrange [0:*]\nset key top left\n"
            "plot 'scale-writeback.dat' using 1:4:5:6 with yerrorlines lw 2 pt 7 title 'write-back / bare writes, time a block', "
            "'' using 1:8:9:10 with yerrorlines lw 2 pt 5 title 'daemon CPU a block / at the smallest size'\n",
        )
        out.append(P.link("scale-writeback", "write-back against the number of dirty blocks"))
    return out


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: bench-report.py RESULTS_DIR\n")
        return 2
    d = sys.argv[1]
    m = kv_file(os.path.join(d, "machine.txt"))
    timing = []
    if os.path.exists(os.path.join(d, "timing.txt")):
        with open(os.path.join(d, "timing.txt")) as f:
            timing = [l.strip() for l in f if l.strip()]
    host, hwhy = load(d, "host")
    nvme, nwhy = load(d, "nvme")
    scale, swhy = load(d, "scale")
    codec, cwhy = load(d, "codec")
    restart, rwhy = load(d, "restart")
    fair, fwhy = load(d, "fair")
    evict, ewhy = None, "not run"
    for name, why in (("evict.txt", None), ("evict.failed", "failed")):
        if os.path.exists(os.path.join(d, name)):
            with open(os.path.join(d, name)) as f:
                evict, ewhy = (f.read(), None) if why is None else (None, why)
            break
    P = Plots(d)

    mode = m.get("mode", "?")
    flag = {"quick": " --quick", "long": " --long"}.get(mode, "")
    out = ["## Comparative suite: `scripts/bench.sh%s`\n" % flag]
    out.append(
        "One run on one machine, %s, commit %s. Every ratio is the median of the pairwise ratios "
        "(the contenders alternate), with the lowest and highest pair in brackets; absolute "
        "figures are medians, for context.%s\n"
        % (m.get("date", "?"), m.get("commit", "?"),
           " A `--quick` run: fewer pairs and smaller sizes, a check that everything works rather "
           "than figures to rely on." if mode == "quick" else "")
    )
    out.append("Machine: %s, %s of memory, %s; %s. Pages: THP %s. Disk: %s. Load average before the run: %s.\n"
               % (m.get("cpu", "?"), m.get("memory", "?"), m.get("os", "?"), m.get("kernel", "?"),
                  m.get("thp", "?"), m.get("disk", "?"), m.get("load before", "?")))
    versions = ", ".join("%s %s" % (name, m[k]) for k, name in
                         (("fio", "fio"), ("redis", "Redis"), ("hiredis", "hiredis"), ("gnuplot", "gnuplot"))
                         if k in m)
    if versions:
        out.append("Software: %s.\n" % versions)
    if timing:
        out.append("Run time: " + "; ".join(timing) + ".\n")
    parts = (
        ("Host tier: kvtier and Redis against memcpy", host_section, host, hwhy),
        ("Control plane: round trips against a bare AF_UNIX ping-pong", control_section, host, hwhy),
        ("NVMe tier: spill and restore against fio", nvme_section, nvme, nwhy),
        ("Scale: the index, recovery and write-back", scale_section, scale, swhy),
        ("Codecs: fp8-e4m3 and int4 on the CPU copy path", codec_section, codec, cwhy),
        ("Restarts: the kept host tier against NVMe recovery", restart_section, restart, rwhy),
        ("Neighbours: one-key lookups beside a tenant's 8192-key lookups", fair_section, fair, fwhy),
        ("Eviction: the default policy against Belady and LRU", lambda t, P: evict_section(t), evict, ewhy),
    )
    for title, section, results, why in parts:
        out.append("### %s\n" % title)
        out += section(results, P) if results else ["Not measured (%s).\n" % why]
        out.append("")
    if not P.gnuplot:
        out.append("(No plots: gnuplot is not installed; the `.gp` scripts and `.dat` files are in the results directory.)\n")
    text = "\n".join(out).rstrip() + "\n"
    with open(os.path.join(d, "benchmarks-section.md"), "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

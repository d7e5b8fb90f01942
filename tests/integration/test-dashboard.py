#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""deploy/grafana/kvtier.json against a live kvtierd: every series its
queries name must be one the daemon's scrape endpoint serves.

A real kvtierd with a spill file and its endpoint on 127.0.0.1:0 takes a
kvt-engine workload (so that the daemon, NUMA node, tenant, block size,
namespace and NVMe series all exist), and is scraped over HTTP.  A
dashboard name of a remote tier series (kvtier_remote_*) that the scrape
lacks is checked against proto/prom.c's table instead: a remote tier needs
a Ceph cluster (tests/remote/), and its series exist only with one.  Any
other name missing from the scrape fails the test, as does a panel with no
kvtier series or a query the extraction cannot read.  The check is run
first on a copy of the dashboard with a made-up series added, which must
fail.  With DOC, every typed series of the scrape must be named there
(docs/metrics.md).

Usage: test-dashboard.py DASHBOARD PROM_C [DOC]   (KVTIERD and KVT_ENGINE set)
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

NAME = re.compile(r"\bkvtier_[A-Za-z0-9_]+")


def exprs(dashboard):
    """(panel title, expr) of every query, rows' nested panels included,
    and the template variables' queries."""
    out = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                if "expr" in t:
                    out.append((p.get("title", "?"), t["expr"]))
    walk(dashboard.get("panels", []))
    for v in dashboard.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if v.get("type") == "query" and isinstance(q, str):
            out.append(("variable " + v["name"], q))
    return out


def table_names(prom_c):
    """Names proto/prom.c's tables give out, by table."""
    src = open(prom_c, encoding="utf-8").read()
    tables = {}
    for m in re.finditer(r"static const struct metric (\w+)\[\] = \{(.*?)\n\};", src, re.S):
        tables[m.group(1)] = {"kvtier_" + n for n in
                              re.findall(r'\{"[a-z0-9_]+", "([a-z0-9_]+)", "(?:gauge|counter)"', m.group(2))}
    return tables


def check(dashboard, served, remote_table):
    """The problems, [] when every query names served series."""
    problems = []
    queries = exprs(dashboard)
    if len(queries) < 10:
        problems.append(f"only {len(queries)} queries found: the extraction lost them")
    for title, e in queries:
        names = set(NAME.findall(e))
        if not names:
            problems.append(f"panel '{title}': no kvtier series in '{e}'")
        for n in sorted(names):
            if n in served:
                continue
            if n in remote_table:
                continue
            problems.append(f"panel '{title}': {n} is not a series kvtierd exports")
    return problems


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        assert r.status == 200, r.status
        return r.read().decode("utf-8")


def main():
    dash_path, prom_c = sys.argv[1], sys.argv[2]
    kvtierd, engine = os.environ["KVTIERD"], os.environ["KVT_ENGINE"]
    d = tempfile.mkdtemp(prefix="kvt-dash-")
    sock, log = f"{d}/kvtierd.sock", f"{d}/kvtierd.log"
    with open(f"{d}/kvtierd.conf", "w") as f:
        f.write(f"[daemon]\nsocket = {sock}\nruntime_dir = {d}\n"
                "[pool]\ncapacity = 16M\nextent_size = 2M\nkeep = no\n"
                f"[spill.s]\npath = {d}/spill0\ncapacity = 64M\n"
                "[metrics]\nlisten = 127.0.0.1:0\n")
    proc = subprocess.Popen([kvtierd, "--config", f"{d}/kvtierd.conf"],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        port = None
        for _ in range(3000):  # a generous deadline, only to stop a hang
            text = open(log).read()
            m = re.search(r"Serving metrics on http://127\.0\.0\.1:(\d+)/metrics", text)
            if m and "ready" in text:
                port = int(m.group(1))
                break
            if proc.poll() is not None:
                break
            time.sleep(0.02)
        if port is None:
            print(open(log).read(), file=sys.stderr)
            print("kvtierd did not come up with its endpoint", file=sys.stderr)
            return 1
        subprocess.run([engine, "--socket", sock, "--model", "tiny", "--prefix", "256",
                        "--suffix", "0", "--name", "dashboard"], check=True,
                       stdout=subprocess.DEVNULL)
        text = scrape(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait()
    if rc != 0:
        print(open(log).read(), file=sys.stderr)
        print(f"kvtierd exited {rc}", file=sys.stderr)
        return 1
    shutil.rmtree(d)

    served = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
              if line and not line.startswith("#")}
    for must in ("kvtier_tenant_used_bytes", "kvtier_namespace_stores_total",
                 "kvtier_nvme_used_bytes", "kvtier_node_used_bytes"):
        if must not in served:
            print(f"the workload left no {must} in the scrape", file=sys.stderr)
            return 1
    tables = table_names(prom_c)
    remote_table = tables.get("remote_metrics", set())
    if not remote_table:
        print(f"no remote_metrics table in {prom_c}", file=sys.stderr)
        return 1
    dashboard = json.load(open(dash_path, encoding="utf-8"))

    # The check must see a series that does not exist.
    bogus = json.loads(json.dumps(dashboard))
    bogus["panels"].append({"title": "bogus", "targets": [{"expr": "rate(kvtier_no_such_series_total[5m])"}]})
    if not any("kvtier_no_such_series_total" in p for p in check(bogus, served, remote_table)):
        print("the check let a made-up series through", file=sys.stderr)
        return 1

    problems = check(dashboard, served, remote_table)
    if len(sys.argv) > 3:
        doc = open(sys.argv[3], encoding="utf-8").read()
        typed = re.findall(r"^# TYPE (kvtier_\w+) (?:gauge|counter)$", text, re.M)
        problems += [f"{sys.argv[3]} does not name {n}" for n in typed if f"`{n}" not in doc]
    names = {n for _, e in exprs(dashboard) for n in NAME.findall(e)}
    by_table = sorted(n for n in names if n not in served and n in remote_table)
    print(f"{len(exprs(dashboard))} queries, {len(names)} series: {len(names) - len(by_table)} "
          f"in the live scrape ({len(served)} served), {len(by_table)} remote tier series "
          f"against proto/prom.c's table: {' '.join(by_table)}")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

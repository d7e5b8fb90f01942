#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The house's layering rules, checked on the built objects.

1. No two files call each other: within each library or program, if a.c
   uses a function or variable that b.c defines, b.c uses nothing of a.c.
   (A lower part reports up through callbacks or an ops table.)
2. kernels/ and proto/ include nothing from client/ or daemon/.

Usage: layering.py SOURCE_ROOT BUILD_ROOT [--graph]
Reads the objects with nm; exits 0, 1 (with each broken rule named) or 77
when there is no nm or nothing was built.  --graph also prints, for each
target, which file calls which (docs/architecture.md is drawn from it).
"""
import os
import re
import subprocess
import sys

SKIP = 77

# Each target meson builds from our sources has its objects in a folder
# "NAME.p"; the files of one target are checked among themselves.
PARTS = ("daemon", "client", "proto", "kernels")


def targets(build):
    for part in PARTS:
        for root, dirs, _ in os.walk(os.path.join(build, part)):
            for d in sorted(dirs):
                if d.endswith(".p"):
                    yield os.path.relpath(os.path.join(root, d), build)


def symbols(obj):
    out = subprocess.run(["nm", "--defined-only", "-g", obj], capture_output=True,
                         text=True, check=True).stdout
    defined = {l.split()[-1] for l in out.splitlines() if len(l.split()) == 3}
    out = subprocess.run(["nm", "-u", obj], capture_output=True, text=True,
                         check=True).stdout
    used = {l.split()[-1] for l in out.splitlines() if l.strip()}
    return defined, used


def source_of(obj):
    # "daemon/libkvtierd.a.p/store.c.o" -> "store.c"; meson spells
    # subfolders with underscores ("ctl_main.c.o"), which names them well enough.
    return os.path.basename(obj)[:-2]


def check_calls(build, graph=False):
    errors = []
    found = 0
    for target in targets(build):
        tdir = os.path.join(build, target)
        objs = []
        for root, _, files in os.walk(tdir):
            objs += [os.path.join(root, f) for f in files if f.endswith(".o")]
        defined_by = {}
        uses = {}
        for o in objs:
            d, u = symbols(o)
            found += 1
            for s in d:
                defined_by[s] = source_of(o)
            uses[source_of(o)] = u
        edges = set()
        for src, used in uses.items():
            for s in used:
                dst = defined_by.get(s)
                if dst and dst != src:
                    edges.add((src, dst))
        if graph:
            print(f"{target}:")
            for src in sorted(uses):
                dsts = sorted(b for a, b in edges if a == src)
                print(f"  {src} -> {', '.join(dsts) if dsts else '(none)'}")
        for a, b in sorted(edges):
            if a < b and (b, a) in edges:
                ab = sorted(s for s in uses[a] if defined_by.get(s) == b)
                ba = sorted(s for s in uses[b] if defined_by.get(s) == a)
                errors.append(f"{target}: {a} and {b} call each other "
                              f"({a} uses {', '.join(ab[:4])}; {b} uses {', '.join(ba[:4])})")
    return found, errors


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def check_includes(src):
    errors = []
    upper = set()
    for part in ("client", "daemon"):
        for root, _, files in os.walk(os.path.join(src, part)):
            upper |= {f for f in files if f.endswith(".h")}
    lower = set()
    for part in ("kernels", "proto"):
        for root, _, files in os.walk(os.path.join(src, part)):
            lower |= {f for f in files if f.endswith(".h")}
    for part in ("kernels", "proto"):
        for root, _, files in os.walk(os.path.join(src, part)):
            for f in files:
                if not f.endswith((".c", ".h", ".cu", ".cuh")):
                    continue
                path = os.path.join(root, f)
                with open(path, encoding="utf-8") as fh:
                    for inc in INCLUDE.findall(fh.read()):
                        name = os.path.basename(inc)
                        if name in upper and name not in lower:
                            errors.append(f"{os.path.relpath(path, src)} includes {inc}, "
                                          f"a header of client/ or daemon/")
    return errors


def main():
    args = [a for a in sys.argv[1:] if a != "--graph"]
    if len(args) != 2:
        print("usage: layering.py SOURCE_ROOT BUILD_ROOT [--graph]", file=sys.stderr)
        return 2
    src, build = args
    try:
        found, errors = check_calls(build, "--graph" in sys.argv)
    except FileNotFoundError:
        print("skipped: no nm (binutils)")
        return SKIP
    if not found:
        print(f"skipped: no objects under {build}")
        return SKIP
    errors += check_includes(src)
    for e in errors:
        print(e)
    print(f"{found} objects read; {len(errors)} broken rule(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The house's layering rules, checked on the built objects.

1. Calls run one way between files: within each program or library, the
   graph of "a.c uses a function or variable that b.c defines" has no
   cycle, of two files or of more.  (A lower part reports up through
   callbacks or an ops table.)
2. The same between the daemon's modules.  A file's module is its name up
   to the first '-': store.c and store-ops.c are the store,
   evict/evict-lru.c is evict, spill-*.c is spill.  The graph of modules
   drawn from the files' has no cycle either, so a module never reaches
   back into one that calls it through a third.
3. kernels/ and proto/ include nothing from client/ or daemon/.
4. With --doc FILE: the graphs of 1 and 2 are FILE's section "Which may
   call which", arrow for arrow (see check_doc()).

Usage: layering.py SOURCE_ROOT BUILD_ROOT [--graph] [--doc FILE]
Reads the objects with nm; exits 0, 1 (with each broken rule named) or 77
when there is no nm or nothing was built.  --graph prints the graphs as
the documentation holds them.
"""
import json
import os
import re
import subprocess
import sys

SKIP = 77

# Each target meson builds from our sources has its objects in a folder
# "NAME.p"; the files of one target are checked among themselves.
PARTS = ("daemon", "client", "proto", "kernels")

# kvtierd is main.c linked with libkvtierd: one graph, named for the program.
MERGED = {"daemon/kvtierd.p": ("daemon/libkvtierd.a.p", "kvtierd")}

# Targets built from a subset of another's files, for tests: their arrows
# must be the other's, and the documentation does not repeat them.
SUBSET_OF = {"libkvtierd-core": "kvtierd"}

# Where rule 2 holds: the daemon's modules, as docs/architecture.md draws
# them.  (kvtierctl's plan-math.c, which usage.c calls, is not "plan" in
# this sense: plan.c calls usage.c.)
MODULE_UNITS = ("kvtierd", "libkvtierd-core")

SECTION = "Which may call which"


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


def object_sources(src, build):
    """Each object's source, relative to SOURCE_ROOT, from meson's
    compile_commands.json (empty when there is none)."""
    try:
        with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as fh:
            entries = json.load(fh)
    except (OSError, ValueError):
        return {}
    srcroot = os.path.realpath(src)
    out = {}
    for e in entries:
        path = os.path.realpath(os.path.join(e["directory"], e["file"]))
        obj = os.path.normpath(os.path.relpath(os.path.join(e["directory"], e["output"]),
                                               build))
        out[obj] = os.path.relpath(path, srcroot)
    return out


class Unit:
    """The files of one program or library and which uses which."""

    def __init__(self, name, tdirs):
        self.name = name
        self.tdirs = tdirs
        self.files = set()
        self.edges = set()
        self.why = {}   # (a, b) -> the symbols of b that a uses
        self.srcdir = ""  # the folder the file names are relative to

    def module_edges(self):
        return {(module(a), module(b)) for a, b in self.edges if module(a) != module(b)}


def module(f):
    base = os.path.basename(f)
    return base.split("-")[0].split(".")[0]


def build_units(src, build):
    sources = object_sources(src, build)
    groups = {}
    for t in targets(build):
        into, name = MERGED.get(t, (t, None))
        if name is None:
            name = os.path.basename(t).split(".")[0]
        g = groups.setdefault(into, [None, []])
        if t in MERGED or g[0] is None:
            g[0] = name
        g[1].append(t)
    units, found = [], 0
    for into, (name, tdirs) in sorted(groups.items()):
        u = Unit(name, tdirs)
        objs = []
        for t in tdirs:
            for root, _, files in os.walk(os.path.join(build, t)):
                objs += [os.path.join(root, f) for f in files if f.endswith(".o")]
        paths = {}
        for o in objs:
            rel = os.path.normpath(os.path.relpath(o, build))
            # meson spells subfolders with underscores ("ctl_main.c.o")
            paths[o] = sources.get(rel, os.path.basename(o)[:-2])
        common = os.path.commonpath([os.path.dirname(p) or "." for p in paths.values()]) \
            if paths else ""
        u.srcdir = "" if common == "." else common
        defined_by, uses = {}, {}
        for o in objs:
            d, used = symbols(o)
            found += 1
            f = os.path.relpath(paths[o], u.srcdir) if u.srcdir else paths[o]
            u.files.add(f)
            for s in d:
                defined_by[s] = f
            uses.setdefault(f, set()).update(used)
        for f, used in uses.items():
            for s in used:
                g = defined_by.get(s)
                if g and g != f:
                    u.edges.add((f, g))
                    u.why.setdefault((f, g), set()).add(s)
        units.append(u)
    return units, found


def sccs(nodes, edges):
    """Strongly connected components of more than one node (Tarjan)."""
    succ = {n: sorted(b for a, b in edges if a == n) for n in nodes}
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(1000, 4 * len(nodes) + 100))
    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return out


def a_cycle(comp, edges):
    """One cycle through the component's first node, shortest first."""
    comp = set(comp)
    start = min(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for a in frontier:
            for x, b in sorted(edges):
                if x != a or b not in comp:
                    continue
                if b == start:
                    path = [a]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if b not in prev:
                    prev[b] = a
                    nxt.append(b)
        frontier = nxt
    return [start]


def check_cycles(units):
    errors = []
    for u in units:
        for comp in sccs(u.files, u.edges):
            cyc = a_cycle(comp, u.edges)
            steps = []
            for a, b in zip(cyc, cyc[1:]):
                steps.append(f"{a} uses {', '.join(sorted(u.why[(a, b)])[:3])} of {b}")
            errors.append(f"{u.name}: files call in a cycle: {' -> '.join(cyc)} "
                          f"({'; '.join(steps)})")
        if u.name not in MODULE_UNITS:
            continue
        medges = u.module_edges()
        for comp in sccs({module(f) for f in u.files}, medges):
            cyc = a_cycle(comp, medges)
            steps = []
            for ma, mb in zip(cyc, cyc[1:]):
                a, b = min((a, b) for a, b in u.edges if module(a) == ma and module(b) == mb)
                steps.append(f"{a} -> {b}")
            errors.append(f"{u.name}: modules call in a cycle: {' -> '.join(cyc)} "
                          f"({'; '.join(steps)})")
    return errors


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


# ---- the documentation ------------------------------------------------

def graph_lines(nodes, edges, width=88):
    lines = []
    for n in sorted(nodes):
        dsts = sorted(b for a, b in edges if a == n)
        head = f"{n} -> "
        words = dsts or ["(none)"]
        line = head
        for i, w in enumerate(words):
            piece = w + ("," if i + 1 < len(words) else "")
            if line != head and len(line) + len(piece) > width:
                lines.append(line.rstrip())
                line = " " * len(head)
            line += piece + " "
        lines.append(line.rstrip())
    return lines


def print_graphs(units):
    for u in units:
        if u.name in SUBSET_OF:
            continue
        print("```")
        print(f"files of {u.name}:")
        print("\n".join(graph_lines(u.files, u.edges)))
        print("```")
        if u.name in MODULE_UNITS:
            mods = {module(f) for f in u.files}
            print("```")
            print(f"modules of {u.name}:")
            print("\n".join(graph_lines(mods, u.module_edges())))
            print("```")


HEADER = re.compile(r"^(files|modules) of (\S+):$")


def doc_graphs(path):
    """The graph blocks of the section: {(kind, unit): (nodes, edges)}."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    m = re.search(r"^## " + re.escape(SECTION) + r"\s*$", text, re.M)
    if not m:
        return None
    end = re.search(r"^## ", text[m.end():], re.M)
    section = text[m.end():m.end() + end.start() if end else len(text)]
    graphs = {}
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", section, re.M | re.S):
        lines = [l for l in block.splitlines() if l.strip()]
        h = HEADER.match(lines[0].strip()) if lines else None
        if not h:
            continue
        nodes, edges, src = set(), set(), None
        for l in lines[1:]:
            if "->" in l:
                src, rest = (x.strip() for x in l.split("->", 1))
                nodes.add(src)
            else:
                rest = l.strip()
            for d in (x.strip() for x in rest.split(",")):
                if d and d != "(none)":
                    edges.add((src, d))
        graphs[(h.group(1), h.group(2))] = (nodes, edges)
    return graphs


def compare(what, built_nodes, built_edges, doc_nodes, doc_edges, exists):
    """The differences between a built graph and the documented one.  A
    node the documentation names that this build did not compile (the CUDA
    or Python parts, a tier built only with its library) is left out, if
    it exists; a full build checks it."""
    errors = []
    for n in sorted(built_nodes - doc_nodes):
        errors.append(f"{what}: {n} is built but has no line")
    for n in sorted(doc_nodes - built_nodes):
        if not exists(n):
            errors.append(f"{what}: names {n}, which is not in the source tree")
    for a, b in sorted(doc_edges):
        if a not in built_nodes:
            continue
        if b not in built_nodes and not exists(b):
            errors.append(f"{what}: {a} -> {b}, which is not in the source tree")
        elif b in built_nodes and (a, b) not in built_edges:
            errors.append(f"{what}: says {a} -> {b}, which the objects do not")
    for a, b in sorted(built_edges - doc_edges):
        if a in doc_nodes:
            errors.append(f"{what}: lacks {a} -> {b}")
    return errors


def check_doc(src, units, path):
    graphs = doc_graphs(path)
    if graphs is None:
        return [f"{path}: no section '## {SECTION}'"]
    errors = []
    byname = {u.name: u for u in units}
    for u in units:
        if u.name in SUBSET_OF:
            big = byname.get(SUBSET_OF[u.name])
            if big:
                for a, b in sorted(u.edges - big.edges):
                    errors.append(f"{u.name}: {a} -> {b}, which {big.name} does not have")
            continue
        root = os.path.join(src, u.srcdir)

        def file_exists(n):
            return os.path.exists(os.path.join(root, n))

        def module_exists(n):
            return any(module(f) == n for _, _, fs in os.walk(root) for f in fs)

        doc = graphs.get(("files", u.name))
        if doc is None:
            errors.append(f"{path}: no graph 'files of {u.name}:' in '{SECTION}'")
        else:
            errors += compare(f"{path}, files of {u.name}", u.files, u.edges, *doc, file_exists)
        mods = {module(f) for f in u.files}
        doc = graphs.get(("modules", u.name))
        if doc is None and u.name in MODULE_UNITS:
            errors.append(f"{path}: no graph 'modules of {u.name}:' in '{SECTION}'")
        elif doc is not None:
            errors += compare(f"{path}, modules of {u.name}", mods, u.module_edges(), *doc,
                              module_exists)
    return errors


def main():
    argv = sys.argv[1:]
    graph = "--graph" in argv
    doc = None
    if "--doc" in argv:
        i = argv.index("--doc")
        if i + 1 >= len(argv):
            print("usage: --doc FILE", file=sys.stderr)
            return 2
        doc = argv[i + 1]
        del argv[i:i + 2]
    args = [a for a in argv if a != "--graph"]
    if len(args) != 2:
        print("usage: layering.py SOURCE_ROOT BUILD_ROOT [--graph] [--doc FILE]",
              file=sys.stderr)
        return 2
    src, build = args
    try:
        units, found = build_units(src, build)
    except FileNotFoundError:
        print("skipped: no nm (binutils)")
        return SKIP
    if not found:
        print(f"skipped: no objects under {build}")
        return SKIP
    if graph:
        print_graphs(units)
        return 0
    if doc:
        errors = check_doc(src, units, doc)
    else:
        errors = check_cycles(units) + check_includes(src)
    for e in errors:
        print(e)
    print(f"{found} objects read; {len(errors)} broken rule(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

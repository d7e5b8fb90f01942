# SPDX-License-Identifier: Apache-2.0
"""What kvtier's Python package takes from vLLM, checked against a vLLM
source tree without importing it (a GPU build of vLLM does not import
without a GPU): every ``from vllm... import NAME`` of the package names a
module of that tree defining NAME, and KvtierConnector implements every
abstract method of that tree's KVConnectorBase_V1 and overrides its
methods with parameters the base's callers can pass.

    python vllm_api.py PACKAGE_DIR VLLM_ROOT   (VLLM_ROOT holds vllm/)

Prints one line per problem and exits 1 if there is any."""

import ast
import os
import sys

BASE = "vllm/distributed/kv_transfer/kv_connector/v1/base.py"


def module_file(root: str, module: str) -> str | None:
    path = os.path.join(root, *module.split("."))
    for f in (path + ".py", os.path.join(path, "__init__.py")):
        if os.path.isfile(f):
            return f
    return None


def top_level_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level (under if/try too)."""
    names: set[str] = set()

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name):
                            names.add(n.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    names.add((a.asname or a.name).split(".")[0])
            elif isinstance(node, (ast.If, ast.Try, ast.With)):
                visit(node.body)
                for h in getattr(node, "handlers", []):
                    visit(h.body)
                visit(getattr(node, "orelse", []))
                visit(getattr(node, "finalbody", []))

    visit(tree.body)
    return names


def parse(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def package_files(package_dir: str) -> list[str]:
    out = []
    for d, _, files in os.walk(package_dir):
        out += [os.path.join(d, f) for f in files if f.endswith(".py")]
    return sorted(out)


def check_imports(package_dir: str, root: str) -> list[str]:
    problems = []
    for path in package_files(package_dir):
        for node in ast.walk(parse(path)):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("vllm"):
                continue
            where = f"{os.path.relpath(path, package_dir)}:{node.lineno}"
            f = module_file(root, node.module)
            if f is None:
                problems.append(f"{where}: no module {node.module}")
                continue
            defined = top_level_names(parse(f))
            for a in node.names:
                if a.name not in defined and module_file(root, f"{node.module}.{a.name}") is None:
                    problems.append(f"{where}: {node.module} has no {a.name}")
    return problems


def methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def find_class(tree: ast.Module, name: str) -> ast.ClassDef:
    for n in tree.body:
        if isinstance(n, ast.ClassDef) and n.name == name:
            return n
    raise LookupError(name)


def is_abstract(f: ast.FunctionDef) -> bool:
    return any((isinstance(d, ast.Name) and d.id == "abstractmethod") or
               (isinstance(d, ast.Attribute) and d.attr == "abstractmethod")
               for d in f.decorator_list)


def accepts(ours: ast.FunctionDef, base: ast.FunctionDef) -> str | None:
    """Why a call the base's signature allows would fail on ours, or None."""
    a, b = ours.args, base.args
    if a.vararg and a.kwarg:
        return None
    pos_a = [x.arg for x in a.posonlyargs + a.args]
    pos_b = [x.arg for x in b.posonlyargs + b.args]
    if len(pos_a) < len(pos_b) and not a.vararg:
        return f"takes {len(pos_a)} positional parameters, the base {len(pos_b)}"
    # Callers may name any of the base's parameters.
    named_a = set(pos_a[len(a.posonlyargs):]) | {x.arg for x in a.kwonlyargs}
    for name in pos_b[len(b.posonlyargs):] + [x.arg for x in b.kwonlyargs]:
        if name not in named_a and not a.kwarg:
            return f"has no parameter {name!r}"
    # Ours may not require more than the base gives.
    required = len(pos_a) - len(a.defaults)
    if required > len(pos_b) and not b.vararg:
        return f"requires {required} positional parameters, the base gives {len(pos_b)}"
    for x, d in zip(a.kwonlyargs, a.kw_defaults):
        if d is None and x.arg not in {y.arg for y in b.kwonlyargs}:
            return f"requires keyword {x.arg!r}, which the base does not pass"
    if b.kwarg and not a.kwarg:
        return "takes no **kwargs, the base does"
    return None


def check_connector(package_dir: str, root: str) -> list[str]:
    base = find_class(parse(os.path.join(root, BASE)), "KVConnectorBase_V1")
    ours = methods(find_class(parse(os.path.join(package_dir, "vllm", "__init__.py")),
                              "KvtierConnector"))
    problems = []
    for name, f in methods(base).items():
        if name not in ours:
            if is_abstract(f):
                problems.append(f"KvtierConnector does not implement {name}, abstract in {BASE}")
            continue
        why = accepts(ours[name], f)
        if why is not None:
            problems.append(f"KvtierConnector.{name} {why} ({BASE}:{f.lineno})")
    return problems


def check(package_dir: str, root: str) -> list[str]:
    return check_imports(package_dir, root) + check_connector(package_dir, root)


if __name__ == "__main__":
    found = check(sys.argv[1], sys.argv[2])
    for line in found:
        print(line)
    sys.exit(1 if found else 0)

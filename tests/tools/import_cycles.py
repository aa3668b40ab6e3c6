"""Import cycles and layer order in a package tree, counting every import (deferred ones too).

Adapted from the project's shared ``import_cycles.py`` so the test suite does not depend on a
path outside the clone. An import inside the body of ``if TYPE_CHECKING:`` is not counted (it
never runs); one in its ``else:`` branch is (it runs at import time).
A *unit* is a top-level module or subpackage of the package (``wirepipe.codecs``,
``wirepipe.core.batch``); the package's own ``__init__`` is not a unit (its names are lazy).

    python tests/tools/import_cycles.py src wirepipe   # prints each cycle; exit 1 if any
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Iterable


def modules(src: str, pkg: str) -> dict[str, str]:
    """Dotted module name -> file path, for every ``.py`` file of ``src/pkg``."""
    out: dict[str, str] = {}
    for folder, _, files in os.walk(os.path.join(src, pkg)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, src)[:-3].replace(os.sep, ".")
                out[dotted.removesuffix(".__init__")] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING`` (any module's attribute of that name)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """The lines that never run: the body of ``if TYPE_CHECKING:``, the ``else`` of ``if not TYPE_CHECKING:``.

    Only that branch: the other one (an ``else:``, an ``elif``) runs at import time and its
    imports count. A test that merely mentions the name (``if TYPE_CHECKING or x:``) excepts nothing.
    """
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        test = node.test
        if _is_type_checking(test):
            branch = node.body
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_type_checking(test.operand):
            branch = node.orelse
        else:
            continue
        lines.update(n.lineno for stmt in branch for n in ast.walk(stmt) if hasattr(n, "lineno"))
    return lines


def _targets(mods: dict[str, str], mod: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    base = mod if mods[mod].endswith("__init__.py") else mod.rsplit(".", 1)[0]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = base.split(".")
            parts = parts[: len(parts) - (node.level - 1)]
            target = ".".join(parts + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [f"{target}.{a.name}" for a in node.names] + [target]
    else:
        names = [a.name for a in node.names]
    out = set()
    for name in names:
        while name and name not in mods:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        if name:
            out.add(name)
    return out


def file_graph(src: str, pkg: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in the file, TYPE_CHECKING excepted)."""
    mods = modules(src, pkg)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        skip = _type_checking_lines(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno not in skip:
                edges[mod] |= {t for t in _targets(mods, mod, node) if t != mod and not mod.startswith(t + ".")}
    return edges


def unit(mod: str) -> str:
    """``wirepipe.codecs.chain`` -> ``wirepipe.codecs``."""
    return ".".join(mod.split(".")[:2])


def unit_graph(edges: dict[str, set[str]], pkg: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for mod, targets in edges.items():
        for t in targets:
            if unit(mod) != unit(t) and unit(t) != pkg and unit(mod) != pkg:
                out.setdefault(unit(mod), set()).add(unit(t))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(iter(children), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def report(src: str, pkg: str) -> list[str]:
    """One line per unit cycle and per file cycle; empty when there are none."""
    edges = file_graph(src, pkg)
    lines = [f"unit cycle: {' <-> '.join(c)}" for c in cycles(unit_graph(edges, pkg))]
    lines += [f"file cycle: {' <-> '.join(c)}" for c in cycles(edges)]
    return lines


if __name__ == "__main__":
    problems = report(sys.argv[1], sys.argv[2])
    print("\n".join([*problems, f"{len(problems)} cycles"]))
    sys.exit(1 if problems else 0)

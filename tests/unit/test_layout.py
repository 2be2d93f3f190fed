"""The package's layout: modules import one another without circles, and stay small.

An import circle, even through a ``TYPE_CHECKING`` import, means "to read
this module you must read that one, and that one needs this one": the
engine should read top-down. So the graph is built from every ``import``
statement in the source (``TYPE_CHECKING`` blocks and imports inside
functions included), not from what Python happens to execute. A package's
``__init__`` importing its own modules counts too: a face that re-exports a
module which imports the face back is a circle like any other (to read the
module you must read the face, which needs the module).

Size: no module over 800 lines; over 600 only when it is one cohesive thing
and its docstring says so in a paragraph starting "Kept whole:".
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: (package name, its folder): everything the wheel ships
PACKAGES = [("durable", ROOT / "durable"),
            ("durable_sqlite", ROOT / "drivers" / "durable_sqlite"),
            ("durable_postgres", ROOT / "drivers" / "durable_postgres"),
            ("durable_mariadb", ROOT / "drivers" / "durable_mariadb")]

MAX_LINES = 800
LONG_LINES = 600
LONG_MARK = "Kept whole:"


@functools.cache
def modules() -> dict[str, Path]:
    """Every module by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package, folder in PACKAGES:
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of ours that the module `name` imports, anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            # `from pkg import mod` imports the module pkg.mod; `from mod import X` mod
            targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in known
                       else module for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


@functools.cache
def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(_imported(name, path, known)) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_graph_sees_type_checking_and_relative_imports() -> None:
    """The checker itself: what it must count, it counts."""
    graph = import_graph()
    assert "durable.store" in graph["durable.client"]  # a plain relative import
    assert "durable.store.records" in graph["durable.driver"]  # under TYPE_CHECKING
    assert "durable.wakes" in graph["durable_postgres.listener"]  # an absolute one
    assert "durable.testing.crashes" in graph["durable.testing"]  # a face's re-export
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: Circles still being taken apart (issue 22); each removed one leaves this list.
KNOWN_CIRCLES: list[list[str]] = []


def test_no_module_imports_its_way_back_to_itself() -> None:
    assert circles(import_graph()) == sorted(KNOWN_CIRCLES)


#: Modules over the limits without a "Kept whole:" reason: none (issue 22 split the
#: last four); a module that grows past them is split along its concepts, or says why not.
KNOWN_LONG: set[str] = set()


def test_modules_stay_small_unless_they_are_one_thing() -> None:
    too_long: list[str] = []
    for name, path in modules().items():
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n")
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if lines > MAX_LINES or (lines > LONG_LINES and LONG_MARK not in docstring):
            too_long.append(name)
    assert sorted(too_long) == sorted(KNOWN_LONG), (
        f"over {MAX_LINES} lines, or over {LONG_LINES} without a '{LONG_MARK}' paragraph in "
        "the module docstring saying why it is one thing")

"""The layer order of docs/architecture.md holds for every import of src/kpdoctor, and nothing
imports in a circle (inside functions too: a function-level import must not hide a cycle)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the module imported
    line: int
    typing_only: bool  # under `if TYPE_CHECKING:`: never runs


def modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "kpdoctor").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def layers() -> list[tuple[str, list[str]]]:
    """The layers of docs/architecture.md, lowest first."""
    block = re.search(r"```layers\n(.*?)```", DOC.read_text(), re.S)
    assert block, "docs/architecture.md has no ```layers block"
    out = []
    for line in block.group(1).splitlines():
        name, _, names = line.partition(":")
        if names.strip():
            out.append((name.strip(), names.split()))
    return out


def layer_of(module: str, table: list[tuple[str, list[str]]]) -> int:
    """The layer whose longest name the module starts with."""
    best, rank = -1, -1
    for i, (_, names) in enumerate(table):
        for n in names:
            if (module == n or module.startswith(n + ".")) and len(n) > best:
                best, rank = len(n), i
    return rank


def _typing_guard(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(known: dict[str, Path]) -> list[Import]:
    """Every import statement's targets among kpdoctor's modules (``from a import b`` is module
    ``a.b`` when that is a module, else ``a``)."""
    out: list[Import] = []
    for mod, path in known.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(), str(path))
        guarded: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _typing_guard(node):
                guarded.update(id(n) for child in node.body for n in ast.walk(child))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for t in targets:
                if t in known and t != mod:
                    out.append(Import(mod, t, node.lineno, id(node) in guarded))
    return out


def test_every_module_has_a_layer() -> None:
    table = layers()
    lost = sorted(m for m in modules() if layer_of(m, table) < 0)
    assert lost == [], f"modules in no layer of docs/architecture.md: {lost}"


def test_no_import_goes_against_the_layer_order() -> None:
    table = layers()
    wrong = []
    for imp in imports(modules()):
        a, b = layer_of(imp.source, table), layer_of(imp.target, table)
        if b > a:
            wrong.append(f"{imp.source}:{imp.line} ({table[a][0]}) imports {imp.target} ({table[b][0]})")
    assert wrong == [], "\n".join(wrong)


def test_nothing_imports_in_a_circle() -> None:
    graph: dict[str, set[str]] = {m: set() for m in modules()}
    for imp in imports(modules()):
        if not imp.typing_only:
            graph[imp.source].add(imp.target)
    circles = strongly_connected(graph)
    assert circles == [], "import circles:\n" + "\n".join(" -> ".join(sorted(c)) for c in circles)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(comp)
    return found


@pytest.mark.parametrize(
    ("graph", "circles"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
    ],
)
def test_the_circle_finder_finds_circles(graph: dict[str, set[str]], circles: list[list[str]]) -> None:
    assert sorted(sorted(c) for c in strongly_connected(graph)) == circles


def test_the_import_walker_sees_imports_inside_functions(tmp_path: Path) -> None:
    """What hid the old circle: ``import kpdoctor.checks`` inside a function of parse/logscan."""
    found = [i for i in imports(modules()) if i.source == "kpdoctor.cli" and i.target == "kpdoctor.dataplane.session"]
    assert found, "cli imports the dataplane session inside its trace command"
    table = layers()
    assert layer_of("kpdoctor.bundle.artifacts", table) < layer_of("kpdoctor.parse.logscan", table)
    assert layer_of("kpdoctor.bundle.loader", table) > layer_of("kpdoctor.parse.logscan", table)

"""No import cycle runs through ``experiments.validation`` or ``experiments.cli``, and the
validation package leaves typer and rich to the CLI.

Read from the source (nothing is imported), counting imports inside functions too: a
lazy import that closes a cycle still ties the modules together. ``if TYPE_CHECKING:``
blocks are skipped, they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FIRST_PARTY = ("experiments", "metrics", "steering", "judges")
CHECKED = ("experiments.validation", "experiments.cli")


def module_file(name: str) -> Path | None:
    base = REPO.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str) -> set[str]:
    """First-party modules ``name`` imports anywhere in its body."""
    path = module_file(name)
    assert path is not None, name
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if module_file(sub) else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {m for m in found if m.split(".")[0] in FIRST_PARTY and module_file(m)}


def import_graph() -> dict[str, set[str]]:
    start = [
        module_name(p)
        for package in CHECKED
        for p in sorted(module_file(package).parent.rglob("*.py"))  # type: ignore[union-attr]
    ]
    graph: dict[str, set[str]] = {}
    todo = list(start)
    while todo:
        name = todo.pop()
        if name in graph:
            continue
        graph[name] = imports_of(name)
        todo.extend(graph[name] - set(graph))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_no_import_cycle_through_validation_or_cli():
    graph = import_graph()
    assert "experiments.validation.human.importer" in graph
    assert "experiments.cli.human" in graph
    bad = [c for c in cycles(graph) if any(m.startswith(CHECKED) for m in c)]
    assert not bad, f"import cycles: {bad}"


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_only_the_cli_imports_typer_and_rich():
    package = module_file("experiments.validation").parent  # type: ignore[union-attr]
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert name.split(".")[0] not in ("typer", "rich"), f"{path}: imports {name}"

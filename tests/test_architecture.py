"""The package structure: ARCHITECTURE.md's import tables, no import cycles, small
experiment modules, a fast CLI.

Import edges are read from the source (every ``import`` statement, lazy ones inside
functions included), so a cycle is caught even when it only bites at run time.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# steer_eval: the Python API in front of the others (its own row; nothing imports it)
PACKAGES = ("experiments", "steering", "metrics", "judges", "steer_eval")
MAX_LINES = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def our_modules() -> dict[str, Path]:
    return {
        module_name(p): p
        for package in PACKAGES
        for p in (REPO / package).rglob("*.py")
        if "__pycache__" not in p.parts
    }


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The modules of ours that ``path`` imports (resolved to the deepest known module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for candidate in candidates:
            parts = candidate.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts:
                target = ".".join(parts)
                # A package's own __init__ importing its submodules is not a cycle.
                if target != name and not (is_package and target.startswith(name + ".")):
                    targets.add(target)
                break
    return targets


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def import_graph() -> dict[str, set[str]]:
    modules = our_modules()
    known = set(modules)
    return {name: imports_of(path, name, known) for name, path in modules.items()}


def _table(text: str, heading: str) -> list[list[str]]:
    """The rows (cells) of the first markdown table after the line starting ``heading``."""
    lines = text[text.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _names(cell: str) -> list[str]:
    """The module names a cell lists in backticks (``steering/`` is ``steering``)."""
    return [name.rstrip("/") for name in re.findall(r"`([\w./]+)`", cell)]


def allowed_imports() -> tuple[dict[str, list[str]], dict[str, int]]:
    """ARCHITECTURE.md's rules: what each package may import, and each experiments
    module's layer."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    packages = {_names(row[0])[0]: _names(row[2]) for row in _table(text, "| package")}
    layers = {name: int(row[0]) for row in _table(text, "| layer") for name in _names(row[1])}
    return packages, layers


def _owner(module: str, names) -> str | None:
    """The longest listed name that ``module`` is or lies under."""
    found = [n for n in names if module == n or module.startswith(n + ".")]
    return max(found, key=len) if found else None


def broken_rules(graph: dict[str, set[str]]) -> list[str]:
    packages, layers = allowed_imports()
    out = []
    for source, targets in graph.items():
        package = source.split(".")[0]
        for target in targets:
            other = target.split(".")[0]
            if other != package:
                if _owner(target, packages[package]) is None:
                    out.append(f"{source} -> {target} ({package} may import {packages[package]})")
                continue
            if package != "experiments" or target == package:  # the package's own path
                continue
            mine, theirs = _owner(source, layers), _owner(target, layers)
            if mine is None or theirs is None:
                out.append(f"{source} or {target} has no layer in ARCHITECTURE.md")
            elif layers[theirs] > layers[mine]:
                out.append(f"{source} (layer {layers[mine]}) -> {target} (layer {layers[theirs]})")
    return sorted(out)


def test_the_rule_checker_finds_planted_breaks():
    planted = {
        "steering.models": {"experiments.config"},
        "judges.llama": {"steering.assets", "steering.models"},
        "experiments.execution.local": {"experiments.phase5.timer"},
        "experiments.phase5.run": {"experiments.execution", "judges.base"},
        "experiments.kernel.vectors": {"experiments.strength.sweep"},
    }
    assert broken_rules(planted) == [
        "experiments.execution.local (layer 2) -> experiments.phase5.timer (layer 4)",
        "experiments.kernel.vectors (layer 3) -> experiments.strength.sweep (layer 5)",
        "judges.llama -> steering.models (judges may import "
        "['metrics', 'steering.assets', 'steering.registry', 'steering.files'])",
        "steering.models -> experiments.config (steering may import [])",
    ]


def test_the_python_api_imports_experiments_and_nothing_imports_it():
    planted = {
        "experiments.phase5.run": {"steer_eval.api"},
        "steer_eval.api": {"experiments.phase5.run", "experiments.cli.strength", "metrics.text"},
        "steer_eval.vectors": {"steering.vector_files"},
    }
    assert broken_rules(planted) == [
        "experiments.phase5.run -> steer_eval.api (experiments may import "
        "['steering', 'metrics', 'judges'])",
        "steer_eval.api -> metrics.text (steer_eval may import ['experiments', "
        "'experiments.cli.strength', 'steering'])",
    ]


def test_imports_follow_the_architecture_tables():
    broken = broken_rules(import_graph())
    assert not broken, "imports ARCHITECTURE.md does not allow:\n" + "\n".join(broken)


def test_the_cycle_finder_finds_a_planted_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycles_between_our_modules():
    graph = import_graph()
    assert "experiments.phase5.run" in graph["experiments.cli.main"] or any(
        "experiments.phase5" in t for t in graph["experiments.cli.main"]
    )
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_experiment_modules_stay_small_or_say_why():
    too_long = []
    for name, path in our_modules().items():
        if not name.startswith("experiments"):
            continue
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "longer than" not in doc.lower():
                too_long.append(f"{name} ({text.count(chr(10))} lines)")
    assert not too_long, "modules over ~500 lines without a stated reason: " + ", ".join(too_long)


def test_only_the_cli_imports_typer_and_rich():
    offenders = []
    modules = our_modules()
    for name, path in modules.items():
        if name.startswith("experiments.cli"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n.split(".")[0] in ("typer", "rich") for n in names):
                offenders.append(name)
    assert not offenders, f"typer/rich imported outside experiments.cli: {sorted(set(offenders))}"


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"]])
def test_help_does_not_import_torch(argv):
    code = (
        "import sys; from experiments.cli import app\n"
        f"try:\n    app({argv!r})\nexcept SystemExit:\n    pass\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert out.stdout.strip().endswith("NO-TORCH"), out.stdout[-500:] + out.stderr[-2000:]


def top_level_imports() -> set[str]:
    """Every top-level module our code imports (lazy imports included)."""
    found: set[str] = set()
    for path in our_modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module.split(".")[0])
    return found


def declared_dependencies() -> dict[str, str]:
    """pyproject's dependencies: distribution name -> the comment lines just above it."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    block = text[text.index("dependencies = [") : text.index("]", text.index("dependencies = ["))]
    out, comment = {}, []
    for line in block.splitlines()[1:]:
        line = line.strip()
        if line.startswith("#"):
            comment.append(line)
        elif line.startswith('"'):
            out[re.split(r"[<>=\[;]", line.strip('",'))[0].lower()] = " ".join(comment)
            comment = []
    return out


def test_every_declared_dependency_is_imported_or_says_why():
    """A dependency our code never imports (a library needs it at run time) carries a
    comment in pyproject saying why; one that is neither was dropped (httpx, tqdm)."""
    from importlib.metadata import packages_distributions

    modules_of: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(dist.lower().replace("_", "-"), set()).add(module)
    imported = top_level_imports()
    unexplained = [
        dist
        for dist, why in declared_dependencies().items()
        if not (modules_of.get(dist.replace("_", "-"), set()) & imported) and not why
    ]
    assert not unexplained, f"declared, never imported, no reason given: {unexplained}"


def test_one_progress_library():
    """Progress is drawn by the command line (rich); the library code only reports it."""
    assert "tqdm" not in top_level_imports()


# Calls that open or close an MLflow run (the tracking wrappers, MLflow's own client and
# fluent API). Runs are opened and closed only by the kernel (its runner, the session and
# the publisher) over the wrappers of experiments/tracking/__init__.py; the tracking
# package's other modules (traces, evaluation, ...) write into runs they are handed.
RUN_LIFECYCLE = {"start_run", "tracked_run", "create_run", "end_run", "set_terminated"}


def opens_runs(module: str) -> bool:
    return module == "experiments.tracking" or module.startswith("experiments.kernel")


def run_lifecycle_calls(source: str) -> list[str]:
    """Each call in ``source`` to one of ``RUN_LIFECYCLE`` (``tracking.start_run(...)``,
    ``client.set_terminated(...)``, ``mlflow.start_run()``, a bare imported name), and
    each such name imported, as ``line: name``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        elif isinstance(node, ast.ImportFrom):
            name = next((a.name for a in node.names if a.name in RUN_LIFECYCLE), None)
        if name in RUN_LIFECYCLE:
            found.append((node.lineno, name))
    return [f"{line}: {name}" for line, name in sorted(found)]


def test_the_run_lifecycle_finder_finds_planted_calls():
    planted = (
        "import mlflow\n"
        "from experiments import tracking\n"
        "from experiments.tracking import tracked_run\n"
        "run = tracking.start_run('e', 'n')\n"
        "tracking.client().set_terminated(run, status='FINISHED')\n"
        "with mlflow.start_run():\n"
        "    pass\n"
        "tracking.log_metrics(run, {})\n"
    )
    assert run_lifecycle_calls(planted) == [
        "3: tracked_run",
        "4: start_run",
        "5: set_terminated",
        "6: start_run",
    ]


def test_only_the_kernel_opens_or_closes_mlflow_runs():
    """ARCHITECTURE.md: runs are opened only by the kernel's runner and publisher; a
    phase's child runs go through ``kernel/publisher`` (``child_run``, ``append_child``,
    ``open_child`` / ``close_child``)."""
    offenders = [
        f"{name}:{call}"
        for name, path in our_modules().items()
        if not opens_runs(name)
        for call in run_lifecycle_calls(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, f"MLflow runs opened or closed outside the kernel: {offenders}"

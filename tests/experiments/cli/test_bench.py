"""experiments.cli.bench: the command, its tables, and a --help that stays light."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from experiments.cli.bench import render_tables, sections_option

REPO = Path(__file__).resolve().parents[3]


def test_cli_has_a_bench_command():
    from experiments.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["bench", "--help"])
    assert result.exit_code == 0 and "--per-sample-limit" in result.output
    bad = runner.invoke(app, ["bench", "--only", "speed"])
    assert bad.exit_code == 2


def test_unknown_section_is_a_usage_error():
    with pytest.raises(typer.BadParameter, match="unknown bench section"):
        sections_option("batched,speed", None)
    assert sections_option("llama,batched", None) == ("batched", "llama")


def test_tables_render_a_full_results_file():
    path = REPO / "bench/results.json"
    if not path.exists():
        pytest.skip("no committed bench/results.json")
    console = Console(record=True, width=200)
    for table in render_tables(json.loads(path.read_text())):
        console.print(table)
    text = console.export_text()
    assert "make run" in text and "batched vs per-sample" in text
    assert "[green]" not in text  # markup rendered, not printed


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    return set(out.stdout.split())


def test_cli_import_does_not_import_torch():
    """``steer-eval --help`` imports every command module: none may pull in torch."""
    loaded = _modules_after("import experiments.cli")
    assert "experiments.cli.bench" in loaded
    assert "torch" not in loaded


def test_bench_package_imports_neither_typer_nor_rich():
    """Only the CLI renders: the bench modules return plain data. (Third-party libraries
    such as huggingface_hub may import rich themselves, so the source is what is checked.)"""
    import ast

    files = sorted((REPO / "experiments/bench").rglob("*.py"))
    assert len(files) >= 10
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not [n for n in names if n.split(".")[0] in ("typer", "rich")], path.name

"""A command that needs an optional extra says so before it loads anything (issue 64,
item 5): one line that names the extra and the command that installs it, exit 2.

Each command runs in a process of its own in which the extra's module is made
unimportable (``sys.modules[name] = None``: ``import name`` then fails as it does when the
package is not installed), against a store that does not exist: a command that read a
run, a config's model or the store before checking would say something else. The process
also reports whether torch, transformers or mlflow were imported by then.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
HIDDEN = """
import sys
sys.modules[sys.argv[1]] = None  # as if the extra were not installed
from experiments.cli import app
try:
    app(sys.argv[2:], prog_name="steer-eval")
finally:
    heavy = [m for m in ("torch", "transformers", "mlflow") if m in sys.modules]
    print("IMPORTED", *heavy, file=sys.stderr)
"""
JUDGE = "llama-cpp-python (the judge extra), which is not installed"
RAY = "Ray (the ray extra), which is not installed"


def without(module: str, *args: str, tmp_path: Path) -> tuple[int, list[str], list[str]]:
    """(exit code, the lines the command printed on stderr, the heavy modules imported)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'absent.db'}"}
    env.pop("MLFLOW_ARTIFACT_ROOT", None)
    done = subprocess.run(
        [sys.executable, "-c", HIDDEN, module, *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    imported = next(line for line in lines if line.startswith("IMPORTED")).split()[1:]
    return done.returncode, [line for line in lines if not line.startswith("IMPORTED")], imported


@pytest.mark.parametrize(
    ("module", "args", "said"),
    [
        ("llama_cpp", ["export", "latest", "--check"], f"export --check needs {JUDGE}"),
        (
            "llama_cpp",
            ["panel", "--dry-run", "--judge", "llama/embedded"],
            f"panel's local judge llama/embedded needs {JUDGE}",
        ),
        (
            "llama_cpp",
            ["panel", "--dry-run", "--rubric", "axbench"],
            f"panel's local judge llama/embedded (a default judge) needs {JUDGE}",
        ),
        ("ray", ["run", "--executor", "ray", "--dry-run"], f"--executor ray needs {RAY}"),
        ("ray", ["run", "--set", "execution.executor=ray"], f"--executor ray needs {RAY}"),
        (
            "ray",
            ["calibrate", "--quick", "--set", "execution.executor=ray"],
            f"execution.executor ray needs {RAY}",
        ),
    ],
)
def test_a_missing_extra_is_one_line_with_its_install_command_before_anything_loads(
    module, args, said, tmp_path
):
    code, lines, imported = without(module, *args, tmp_path=tmp_path)
    assert code == 2, lines
    assert len(lines) == 1, lines  # one line, no traceback
    assert lines[0].startswith(f"error: {said} (") and module in lines[0]  # import's error
    install = "make setup-judge" if module == "llama_cpp" else "make setup-ray"
    assert (
        install in lines[0]
        and f"pip install -e '.[{'judge' if install.endswith('judge') else 'ray'}]'" in lines[0]
    )
    assert imported == [], f"loaded {imported} before saying the extra is missing"
    assert not (tmp_path / "absent.db").exists()  # the store was not even opened


def test_a_panel_of_api_judges_does_not_need_the_local_judge(tmp_path):
    """Without llama-cpp-python, a panel that names no local judge goes on to its run
    (here: no store, so the error is about that)."""
    code, lines, _ = without(
        "llama_cpp", "panel", "--dry-run", "--judge", "openai/gpt-4o-mini", tmp_path=tmp_path
    )
    assert code == 2 and "llama-cpp-python" not in " ".join(lines)
    assert "no MLflow store" in " ".join(lines)

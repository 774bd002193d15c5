"""The smaller defects of issue 64, each held to what a user sees: the generation bar's
clock, ``--help`` without ``<bool>``, ``make help``'s port, the UI's port in printed
addresses, ``samples`` on one line with ``n`` the texts chosen, ``--sign pos`` and a
concept by the start of its synset, a Phase 4 run given to ``samples``, ``rescore`` or
``export``, and the export's file modes (tiny random Gemma, real MLflow store)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import typer
from rich.progress import Progress, TimeElapsedColumn
from typer.testing import CliRunner

from experiments import tracking
from experiments.cli import app
from experiments.cli.common import generation_bars
from experiments.phase5.publish import PHASE4_TAG
from experiments.phase5.run import run_phase5
from experiments.tracking.store import served_ui, ui_file, write_ui
from steering.files import file_mode

REPO = Path(__file__).resolve().parents[3]
runner = CliRunner()
EXPERIMENT = "smaller-cli"


def _said(out) -> str:
    return " ".join((out.stdout + out.stderr).split())


def test_the_generation_bar_is_timed_from_the_first_token_not_from_the_run():
    """100 s of loading and classifier training before the first token, then 73 s of
    generating (texts and their perplexity): the bar says 73 s."""
    now = [0.0]
    progress = Progress(get_time=lambda: now[0], disable=True)
    on_batch, on_step = generation_bars(progress)
    now[0] = 100.0  # the model loaded, the classifiers trained, the vectors made
    on_step(0, 6)
    now[0] = 140.0
    on_batch(8, 16)
    now[0] = 173.0
    on_batch(16, 16)
    generations, tokens = progress.tasks
    shown = TimeElapsedColumn()  # the bar's time column (cli/common.progress_display)
    assert generations.finished and str(shown.render(generations)) == "0:01:13"
    assert "perplexity" in generations.description
    now[0] = 300.0  # scoring and publishing after: the finished bar keeps its time
    assert str(shown.render(generations)) == "0:01:13"
    assert tokens.start_time == pytest.approx(100.0)


def _every_command() -> list[list[str]]:
    group = typer.main.get_command(app)
    names: list[list[str]] = [[]]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        subs = getattr(command, "commands", None)
        names += [[name], *([name, sub] for sub in subs)] if subs else [[name]]
    return names


def test_no_help_shows_a_type_beside_a_flag():
    for argv in _every_command():
        out = runner.invoke(app, [*argv, "--help"])
        assert out.exit_code == 0, (argv, out.output)
        assert "<bool>" not in out.output, argv
        assert "--help" in out.output
    out = runner.invoke(app, ["run", "--help"])
    assert "--traces" in out.output and "<int>" in out.output  # valued options keep theirs


def test_make_help_names_the_port_it_would_use():
    said = subprocess.run(
        ["make", "help", "PORT=5055"], cwd=REPO, capture_output=True, text=True, timeout=60
    ).stdout
    assert "$(PORT)" not in said
    assert "http://127.0.0.1:5055" in said and "MLFLOW_TRACKING_URI=http://127.0.0.1:5055" in said


def test_printed_addresses_use_the_port_the_ui_serves_on(mlflow_store, monkeypatch):
    """While ``steer-eval ui --port 5123`` serves the store (its file beside the store,
    written by the serving process), every address printed for it names that port; a
    file left by a UI that is gone is not believed."""
    monkeypatch.delenv("MLFLOW_UI_URL", raising=False)
    db = tracking.sqlite_path()
    assert db is not None
    assert tracking.ui_base() == tracking.DEFAULT_UI_URL
    try:
        write_ui(db, "http://127.0.0.1:5123")
        assert served_ui(db) == "http://127.0.0.1:5123" == tracking.ui_base()
        run_id = tracking.start_run("ui-port", "r", tags={"phase": "5"})
        tracking.end_run(run_id)
        assert tracking.run_ui_url(run_id).startswith("http://127.0.0.1:5123/#/experiments/")
        gone = subprocess.Popen(["true"])  # a UI that has stopped without its cleanup
        gone.wait()
        ui_file(db).write_text(json.dumps({"url": "http://127.0.0.1:5124", "pid": gone.pid}))
        assert served_ui(db) is None and tracking.ui_base() == tracking.DEFAULT_UI_URL
    finally:
        ui_file(db).unlink(missing_ok=True)


@pytest.mark.parametrize("command", ["samples", "rescore", "export"])
def test_a_phase4_run_is_named_with_what_takes_it(mlflow_store, command):
    """A Phase 4 run given where a Phase 5 run is wanted: what it is, and the command
    that works: on the newest Phase 5 run that steered with its classifiers, or
    ``steer-eval run`` when none did (never ``rescore``, which cannot make texts)."""
    run_id = tracking.start_run("smaller-phase4", "classifiers", tags={"phase": "4"})
    tracking.end_run(run_id)
    out = runner.invoke(app, [command, run_id])
    assert out.exit_code == 2
    said = _said(out)
    assert f"run {run_id} is a Phase 4 (classifiers) run, not a Phase 5 run" in said
    assert "`steer-eval run` steers with its classifiers" in said
    assert "`steer-eval runs` lists" in said and "`steer-eval rescore" not in said
    tags = {"phase": "5", PHASE4_TAG: run_id}
    older = tracking.start_run("smaller-phase4-use", "older", tags=tags)
    newer = tracking.start_run("smaller-phase4-use", "newer", tags=tags)
    out = runner.invoke(app, [command, run_id])
    assert f"`steer-eval {command} {newer}` takes the newest Phase 5 run" in _said(out)
    assert "(2 did)" in _said(out) and older not in _said(out)


def test_a_child_run_is_named_with_its_parent(mlflow_store):
    parent = tracking.start_run("smaller-child", "parent", tags={"phase": "5"})
    child = tracking.start_run("smaller-child", "cell", tags={"phase": "5"}, parent_run_id=parent)
    out = runner.invoke(app, ["samples", child])
    assert out.exit_code == 2
    assert f"run {child} is a child run of {parent}" in _said(out)
    assert f"`steer-eval samples {parent}`" in _said(out)


@pytest.fixture(scope="module")
def run(tmp_path_factory, mlflow_store, tiny_lm, embedder, single_threaded, tiny_phase5_config):
    tmp = tmp_path_factory.mktemp("smaller")
    config = tiny_phase5_config(tmp).model_copy(deep=True)
    config.tracking.experiment = EXPERIMENT
    with single_threaded():
        result = run_phase5(config, lm=tiny_lm, embedder=embedder)
    return result, tmp


def _json(*args: str) -> dict:
    out = runner.invoke(app, ["samples", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_samples_n_is_what_the_filters_chose(run):
    result, _ = run
    everything = _json(result.run_id)
    assert everything["n"] == everything["total"] == len(everything["samples"])
    concept = everything["samples"][0]["concept"]
    mine = [s for s in everything["samples"] if s["concept"] == concept and s["sign"] == "s > 0"]
    chosen = _json(result.run_id, "--concept", concept, "--sign", "pos", "--limit", "1")
    assert chosen["n"] == len(mine) and chosen["total"] == everything["total"]
    assert len(chosen["samples"]) == 1 and chosen["samples"][0] == mine[0]
    out = runner.invoke(app, ["samples", result.run_id, "--concept", concept, "--sign", "+"])
    assert f"{len(mine)} of {everything['total']} samples ({len(mine)} matching)" in _said(out)


@pytest.mark.parametrize(
    ("given", "sign"), [("pos", "s > 0"), ("+", "s > 0"), ("neg", "s < 0"), ("-", "s < 0")]
)
def test_samples_sign_takes_pos_neg_and_the_symbols(run, given, sign):
    result, _ = run
    chosen = _json(result.run_id, "--sign", given)["samples"]
    assert chosen and {s["sign"] for s in chosen} == {sign}


def test_samples_concept_takes_the_start_of_one_synset(run):
    result, _ = run
    concepts = sorted({s["concept"] for s in _json(result.run_id)["samples"]})
    first = concepts[0]
    start = first.split(".")[0]
    assert sum(c.startswith(start) for c in concepts) == 1  # unambiguous in this run
    by_start = _json(result.run_id, "--concept", start)
    assert {s["concept"] for s in by_start["samples"]} == {first}
    assert by_start["n"] == _json(result.run_id, "--concept", first)["n"]
    out = runner.invoke(app, ["samples", result.run_id, "--concept", ""])  # starts every one
    assert out.exit_code == 2 and f"starts {len(concepts)} of this run's concepts" in _said(out)


def test_samples_oneline_prints_a_line_per_text(run):
    result, _ = run
    data = _json(result.run_id)
    out = runner.invoke(app, ["samples", result.run_id, "--oneline"])
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert len(lines) == data["n"]
    for line, sample in zip(lines, data["samples"], strict=True):
        assert line.startswith(("+ s=", "- s=")) and sample["concept"] in line
        assert len(line) <= 120  # cut at the width, never wrapped
        words = " ".join(str(sample["text"]).split())
        assert line.split(" │ ", 1)[1].rstrip("…") in words


def test_the_exported_files_have_the_mode_open_gives(run, tmp_path):
    result, tmp = run
    out = runner.invoke(
        app,
        [
            "export",
            result.run_id,
            "--out",
            str(tmp_path / "out"),
            "--results-dir",
            str(tmp / "res"),
        ],
    )
    assert out.exit_code == 0, out.output
    files = sorted((tmp_path / "out").iterdir())
    assert "directions.safetensors" in {f.name for f in files}
    for path in files:  # 0600 from safetensors before: nobody else could read the vectors
        assert stat.S_IMODE(os.stat(path).st_mode) == file_mode(), path.name

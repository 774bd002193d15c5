"""``steer-eval samples [RUN]``: the texts behind a run's verdicts in the terminal, text
first, each beside its twins; filters by concept, sign and gate; ``--json``; a clear exit
2 for a run that is not there, a concept not in the run and a run without the table; and
``rescore`` giving an old run the repetition measure and gate (tiny random Gemma, real
MLflow store)."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from experiments.cli import app
from experiments.config import load_config
from experiments.phase5.run import run_phase5
from experiments.phase5.samples import COLUMNS, read_samples
from experiments.rundir import RunDir, read_jsonl

runner = CliRunner()


def _said(out) -> str:
    return " ".join((out.stdout + out.stderr).split())


@pytest.fixture(scope="module")
def run(tmp_path_factory, mlflow_store, tiny_lm, embedder, single_threaded):
    tmp = tmp_path_factory.mktemp("samples-cli")
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "generation.max_new_tokens=6",
            "generation.batch_size=16",
            "layer=2",
            "controls.random_directions=1",
            "criteria.n_boot=100",
            "tracking.experiment=samples-cli",
            f"classifier.dir={tmp / 'cls'}",
            f"tracking.results_dir={tmp / 'res'}",
        ],
    )
    with single_threaded():
        result = run_phase5(config, lm=tiny_lm, embedder=embedder)
    return result, RunDir(result.results_dir.parent, result.run_id)


def _json(*args: str) -> dict:
    out = runner.invoke(app, ["samples", *args, "--json"])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_every_sample_prints_text_first_with_its_twins_after_it(run):
    result, folder = run
    table = read_samples(folder)
    out = runner.invoke(app, ["samples", result.run_id])
    assert out.exit_code == 0, out.output
    said = out.stdout
    for row in table.itertuples():
        head = said.index(f"key {row.key}")  # the block's last line
        block = said[: head + 1]
        start = block.rfind("╭")  # the block's first line
        assert start >= 0
        text_at = block.find(" ".join(row.text.split()[:2]), start) if row.text else start
        assert start <= text_at < block.index("unsteered:", start) < block.index("random:", start)
    assert f"{len(table)} of {len(table)} samples of run {result.run_id}" in _said(out)


def test_a_long_text_is_wrapped_not_cut():
    from rich.console import Console

    from experiments.cli.samples import _sample

    text = " ".join(f"word{i}" for i in range(60)) + " [bold]not markup[/]"
    console = Console(width=50, record=True)
    console.print(_sample({"text": text, "concept": "a.n.01", "key": "k", "gate": "pass"}))
    lines = console.export_text().splitlines()
    shown = " ".join(" ".join(lines).replace("│", " ").split())
    assert " ".join(text.split()) in shown  # every word, in order, markup as text
    assert len(lines) > 8 and max(len(line) for line in lines) <= 50


def test_each_twin_shows_what_the_gate_read_of_it():
    """The random twin (what the null is made of) with its perplexity ratio, repetition
    and share of alphabetic words; the unsteered twin's share; the steered text's own."""
    from rich.console import Console

    from experiments.cli.samples import _sample

    console = Console(width=200, record=True)
    console.print(
        _sample(
            {
                "text": "Birds sing.", "concept": "a.n.01", "key": "k", "gate": "pass",
                "perplexity_ratio": 2.0, "repetition": 1.0, "alphabetic_share": 1.0,
                "text_unsteered": "A bird.", "delta_0": 0.1, "gate_unsteered": "pass",
                "alphabetic_share_unsteered": 0.9,
                "text_random": "Nutt65れい35 CFA666", "delta_random": -0.2,
                "gate_random": "fail", "effect_random": -0.3,
                "gate_reason_random": "non-language: alphabetic words 0.0 < 0.672",
                "perplexity_ratio_random": 3.24, "repetition_random": 1.4,
                "alphabetic_share_random": 0.0,
            }
        )
    )  # fmt: skip
    lines = [
        " ".join(line.replace("│", " ").split()) for line in console.export_text().splitlines()
    ]
    random = lines[next(i for i, line in enumerate(lines) if line.startswith("random:")) + 1]
    assert random == (
        "Δ -0.200 · gate fail (non-language: alphabetic words 0.0 < 0.672) · e -0.300 · "
        "perplexity ×3.2 · repetition 1.4 · alphabetic words 0%"
    )
    unsteered = lines[next(i for i, line in enumerate(lines) if line.startswith("unsteered:")) + 1]
    assert unsteered == "Δ0 +0.100 · gate pass · alphabetic words 90%"
    assert "repetition 1.0 · alphabetic words 100% · key k" in lines[-2]


def test_json_filters_by_concept_sign_gate_and_limit(run):
    result, folder = run
    data = _json(result.run_id)
    assert data["run_id"] == result.run_id and data["n"] == len(data["samples"]) > 0
    assert list(data["samples"][0]) == list(COLUMNS)
    concept = data["samples"][0]["concept"]
    mine = _json(result.run_id, "--concept", concept, "--sign", "-")
    assert mine["samples"] and all(
        s["concept"] == concept and s["sign"] == "s < 0" for s in mine["samples"]
    )
    assert len(_json(result.run_id, "--concept", concept, "--limit", "1")["samples"]) == 1
    failed = _json(result.run_id, "--gated")["samples"]
    passed = _json(result.run_id, "--measured")["samples"]
    assert all(s["gate"] == "fail" and s["gate_reason"] for s in failed)
    assert all(s["gate"] == "pass" and s["gate_reason"] is None for s in passed)
    assert len(failed) + len(passed) == data["n"]
    generations = {g["key"]: g for g in read_jsonl(folder.file(RunDir.GENERATIONS))}
    for s in data["samples"]:  # the model's texts, as written
        assert s["text"] == generations[s["key"]]["text"]
        assert s["text_random"] == generations[s["key_random"]]["text"]


def test_latest_is_the_newest_run_of_the_experiment(run):
    result, _folder = run
    assert _json("latest", "--experiment", "samples-cli")["run_id"] == result.run_id


def test_a_run_or_concept_that_is_not_there_is_refused(run, mlflow_store):
    result, _folder = run
    out = runner.invoke(app, ["samples", "no-such-run"])
    assert out.exit_code == 2 and "no MLflow run 'no-such-run'" in _said(out)
    concept = _json(result.run_id)["samples"][0]["concept"]
    misspelt = concept + "x"
    out = runner.invoke(app, ["samples", result.run_id, "--concept", misspelt])
    assert out.exit_code == 2
    assert f"concept {misspelt!r} is not in this run (did you mean {concept!r}?)" in _said(out)
    out = runner.invoke(app, ["samples", result.run_id, "--sign", "up"])
    assert out.exit_code == 2


def test_rescore_gives_an_old_run_repetition_and_its_samples(run, monkeypatch):
    """A run scored before the repetition measure (no column, no gate fields in its
    config, no samples.csv) gets them from ``steer-eval rescore``; texts and Δ stay, Δ to
    its last bits: the rescore embeds on the run's recorded thread count (1), not the
    process's (2 here)."""
    result, folder = run
    scores = folder.file(RunDir.SCORES)
    old = read_jsonl(scores)
    scores.write_text(
        "".join(json.dumps({k: v for k, v in s.items() if k != "repetition"}) + "\n" for s in old)
    )
    folder.file(RunDir.SAMPLES).unlink()
    out = runner.invoke(app, ["samples", result.run_id])
    assert out.exit_code == 2 and f"`steer-eval rescore {result.run_id}` writes it" in _said(out)
    for name in ("STEER_EVAL_THREADS", "OMP_NUM_THREADS"):  # they would come first
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = runner.invoke(app, ["rescore", result.run_id, "--json"])
    finally:
        torch.set_num_threads(before)
    assert out.exit_code == 0, out.output
    new = {s["key"]: s for s in read_jsonl(scores)}
    assert all(new[s["key"]]["repetition"] == pytest.approx(s["repetition"]) for s in old)
    assert all(new[s["key"]]["delta"] == s["delta"] for s in old)
    samples = _json(result.run_id)["samples"]
    assert samples and all(s["repetition"] >= 1.0 for s in samples)

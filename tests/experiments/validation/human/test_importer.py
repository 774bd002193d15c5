"""Import: validation changes nothing, spreadsheet quirks pass, re-import replaces."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments import tracking
from experiments.concepts import DEFAULT_PATH
from experiments.rundir import restore
from experiments.validation.errors import ValidationInputError
from experiments.validation.human.answer_key import KEY_NAME, key_samples, load_answer_key
from experiments.validation.human.csvio import CSV_COLUMNS
from experiments.validation.human.export import export_samples
from experiments.validation.human.importer import RESULT_NAME, import_ratings
from metrics.stats import pearson


def test_import_validation_errors_change_nothing(exported, tmp_path, kit):
    from experiments.cli import app

    run_id, result, key, _ = exported
    folder = result.csv_path.parent
    good = kit.rated_rows(result.csv_path, key, lambda s: round(5 + 10 * s["delta"]))
    before = kit.snapshot(run_id, folder)
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    shutil.copy(result.key_path, bad_dir / KEY_NAME)

    def attempt(name: str, rows=None, raw: bytes | None = None, **kwargs) -> str:
        path = bad_dir / name
        if raw is not None:
            path.write_bytes(raw)
        else:
            kit.write_rated(path, rows)
        with pytest.raises(ValidationInputError) as info:
            import_ratings(path, kwargs.pop("run", run_id), **kwargs)
        assert kit.snapshot(run_id, folder) == before, name
        return str(info.value)

    # Missing column.
    rows = [{k: v for k, v in r.items() if k != "human_rating"} for r in good]
    assert "missing column(s) ['human_rating']" in attempt("missing.csv", rows)
    # Bad encoding (Latin-1 bytes).
    text = "sample_id,concept,generated_text,human_rating\n001,REDACTED,caf\xe9,5\n"
    assert "not UTF-8" in attempt("latin1.csv", raw=text.encode("latin-1"))
    # Malformed quoting.
    assert "malformed CSV" in attempt(
        "quotes.csv", raw=b'sample_id,concept,generated_text,human_rating\n001,x,"open,5\n'
    )
    # Out of range, negative, non-numeric, fractional: every row named.
    rows = [dict(r) for r in good]
    for i, value in ((2, "11"), (4, "-1"), (6, "abc"), (8, "7.5")):
        rows[i]["human_rating"] = value
    message = attempt("range.csv", rows)
    assert "4 problem(s)" in message
    for i, value in ((2, "11"), (4, "-1"), (6, "abc"), (8, "7.5")):
        assert f"row {i + 1} (line " in message
        assert f"sample_id '{rows[i]['sample_id']}'): rating {value!r}" in message
    # Duplicate and unknown ids.
    rows = [dict(r) for r in good]
    rows[5]["sample_id"] = rows[4]["sample_id"]
    rows[7]["sample_id"] = "999"
    message = attempt("ids.csv", rows)
    assert "duplicate sample_id" in message and "unknown sample_id '999'" in message
    # Text that is not the exported text (edited, or a CSV from another export).
    rows = [dict(r) for r in good]
    rows[0]["generated_text"] = "something else entirely"
    assert "differs from the exported text" in attempt("text.csv", rows)
    # A tampered answer key.
    tampered = json.loads(result.key_path.read_text())
    tampered["samples"][0]["delta"] = 0.99
    (bad_dir / "tampered.json").write_text(json.dumps(tampered))
    assert "hash check" in attempt("t.csv", good, key_path=bad_dir / "tampered.json")
    # An answer key from another run.
    other_id, _ = kit.make_run(tmp_path / "other", kit.synthetic_records(seed=1))
    other = export_samples(other_id, n=50, seed=3)
    assert f"belongs to run {other_id}" in attempt("o.csv", good, key_path=other.key_path)
    # A run id that does not exist.
    assert "no MLflow run" in attempt("n.csv", good, run="f" * 32)
    # Too few ratings.
    rows = [dict(r, human_rating="") if i >= 10 else r for i, r in enumerate(good)]
    assert "10 sample(s) rated; at least 20" in attempt("few.csv", rows)

    # Through the CLI: exit code 2 and a message, no traceback.
    rows = [dict(r) for r in good]
    rows[3]["human_rating"] = "eleven"
    path = kit.write_rated(bad_dir / "cli.csv", rows)
    out = CliRunner().invoke(app, ["human", "import", str(path), "--run", run_id])
    assert out.exit_code == 2 and "error:" in out.output and "'eleven'" in out.output
    assert "Traceback" not in out.output
    assert kit.snapshot(run_id, folder) == before


def test_import_accepts_spreadsheet_quirks_and_partial_ratings(exported, tmp_path, kit):
    run_id, result, key, _ = exported
    rows = kit.rated_rows(
        result.csv_path,
        key,
        lambda s: None if s["sample_id"] in ("010", "020") else round(5 + 10 * s["delta"]),
    )
    for row in rows:
        row["sample_id"] = str(int(row["sample_id"]))  # leading zeros dropped
        row["generated_text"] = restore(row["generated_text"])  # ' prefix swallowed
        if row["human_rating"]:
            row["human_rating"] += ".0"  # numbers written as floats
    rows.pop()  # one row deleted
    path = kit.write_rated(tmp_path / "sheet.csv", rows, [*CSV_COLUMNS, "notes"])
    res = import_ratings(path, run_id, key_path=result.key_path)
    assert res.n_rated == 47 and res.n_samples == 50
    assert any("missing from the file" in w for w in res.warnings)
    assert any("only 47 of 50" in w for w in res.warnings)
    assert any("extra column" in w for w in res.warnings)


def test_import_logs_child_run_criterion_and_reimport_replaces(exported, tmp_path, kit):
    from experiments.cli import app

    run_id, result, key, _ = exported
    c = tracking.client()
    guesses = {"bird_genus.n.01": "birds", "herb.n.01": "plants", "person.n.01": "weather"}

    def import_with(ratings: dict[str, int], name: str):
        rows = kit.read_export(result.csv_path)
        samples = key_samples(key)
        for row in rows:
            row["human_rating"] = str(ratings[row["sample_id"]])
            row["topic_guess"] = guesses.get(samples[row["sample_id"]]["concept"], "")
        path = kit.write_rated(tmp_path / name, rows)
        return CliRunner().invoke(app, ["human", "import", str(path), "--run", run_id])

    high = kit.ratings_with_r(key, 0.85, 0.95)
    out = import_with(high, "high.csv")
    assert out.exit_code == 0, out.output
    assert "pass" in out.output and "topic-guess accuracy" in out.output
    (child,) = kit.human_children(run_id)
    data = c.get_run(child.info.run_id).data
    expected_r = pearson(
        [high[s["sample_id"]] for s in key["samples"]], [s["delta"] for s in key["samples"]]
    )
    assert data.metrics["human_r"] == pytest.approx(expected_r.r)
    assert data.metrics["human_r_ci_low"] < expected_r.r < data.metrics["human_r_ci_high"]
    assert data.metrics["n_rated"] == 50 and "human_spearman" in data.metrics
    n_guessed = sum(1 for s in key["samples"] if s["concept"] in guesses)
    n_right = sum(1 for s in key["samples"] if s["concept"] in ("bird_genus.n.01", "herb.n.01"))
    assert data.metrics["guess_accuracy"] == pytest.approx(n_right / n_guessed)
    assert data.tags["mlflow.parentRunId"] == run_id and data.tags["phase"] == "5B"
    assert c.get_run(child.info.run_id).info.run_name == "human-validation"
    parent = tracking.get_run(run_id).data.tags
    assert (
        parent["criterion.c4_human"] == "pass" and parent["criterion.c4_human_or_panel"] == "pass"
    )
    artifacts = {f.path for f in c.list_artifacts(child.info.run_id)}
    assert {"human_ratings.json", "human_validation_result.json", "plots"} <= artifacts
    assert [f.path for f in c.list_artifacts(child.info.run_id, "plots")] == [
        "plots/human_vs_delta.png"
    ]
    assert (result.csv_path.parent / RESULT_NAME).exists()

    # Re-import a corrected file: the same child run, new figures, table replaced.
    for low, high_r, status in ((-0.2, 0.3, "panel_required"), (0.55, 0.65, "inconclusive")):
        ratings = kit.ratings_with_r(key, low, high_r)
        out = import_with(ratings, f"{status}.csv")
        assert out.exit_code == 0, out.output
        (again,) = kit.human_children(run_id)
        assert again.info.run_id == child.info.run_id
        expected = pearson(
            [ratings[s["sample_id"]] for s in key["samples"]],
            [s["delta"] for s in key["samples"]],
        )
        latest = c.get_run(child.info.run_id).data.metrics
        assert latest["human_r"] == pytest.approx(expected.r)
        assert tracking.get_run(run_id).data.tags["criterion.c4_human"] == status
        table = pd.read_json(
            c.download_artifacts(child.info.run_id, "human_ratings.json", str(tmp_path)),
            orient="split",
            dtype=False,
        )
        assert len(table) == 50
        assert dict(zip(table["sample_id"], table["human_rating"], strict=True)) == ratings
    history = c.get_metric_history(child.info.run_id, "human_r")
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert len(kit.human_children(run_id)) == 1


# --------------------------------------------------------------------------- real run


@pytest.fixture(scope="module")
def real_run(mlflow_store, embedded_lm, embedder, tmp_path_factory):
    from experiments.config import load_config
    from experiments.phase5.run import run_phase5

    root = tmp_path_factory.mktemp("phase5_human")
    cfg = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=2",
            "generation.max_new_tokens=6",
            'generation.prompts=["Tell me about {concept}.", "Here is a story:"]',
            f"classifier.dir={root / 'cls'}",
            f"tracking.results_dir={root / 'res'}",
        ],
    )
    return run_phase5(cfg, lm=embedded_lm, embedder=embedder)


def load_helper(name: str):
    """A helper module of this folder, by path (tests are not a package)."""
    import importlib.util
    import sys

    module_name = f"steer_eval_tests_human_{name.removesuffix('.py')}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, Path(__file__).with_name(name))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


@pytest.mark.integration
def test_real_phase5_run_export_scripted_rate_import(real_run, kit):
    from experiments.concepts import load_concepts
    from experiments.config import load_config

    scripted_rate = load_helper("scripted_rater.py").scripted_rate

    run_id = real_run.run_id
    result = export_samples(run_id, n=9, seed=0)  # 12 generations in 6 cells
    assert result.csv_path.parent == real_run.results_dir / "human"
    assert len(result.cells) == 6 and set(result.cells.values()) == {1, 2}
    for strength in ("-1.000", "+0.000", "+1.000"):
        assert sum(v for k, v in result.cells.items() if k.endswith(strength)) == 3
    key = load_answer_key(result.key_path, run_id)
    children = {
        r.data.tags["cell"]: r.info.run_id
        for r in tracking.child_runs(run_id, load_config("configs/phase5.yaml").tracking.experiment)
        if "cell" in r.data.tags
    }
    by_key = real_run.records.set_index("key")
    for entry in key["samples"]:
        assert children[entry["cell"]] == entry["child_run_id"]
        assert by_key.loc[entry["generation_key"], "delta"] == pytest.approx(entry["delta"])
    graph = load_concepts(DEFAULT_PATH)
    concepts = {c.synset: c for c in graph.concepts}
    path = scripted_rate(result.csv_path, key, concepts)
    res = import_ratings(path, run_id, min_rated=5)
    assert res.n_rated == 9
    assert res.criterion.status in {"pass", "inconclusive", "panel_required", "not_evaluable"}
    assert tracking.get_run(run_id).data.tags["criterion.c4_human"] == res.criterion.status
    assert len(kit.human_children(run_id)) == 1


def test_import_judges_with_the_thresholds_stored_with_the_run(exported, tmp_path, kit):
    """human_r_pass comes from the run record, not the 0.7 in the run's parameters."""
    from experiments.record import RunRecord
    from experiments.validation.runs import phase5_parent

    run_id, result, key, _ = exported
    folder = phase5_parent(run_id).folder
    config = kit.run_config(folder.root, ["criteria.human_r_pass=0.95"])
    folder.write_record(
        RunRecord(
            run_id=run_id,
            experiment=kit.EXPERIMENT,
            config=config,
            model_id="tiny",
            layer=1,
            alpha=1.0,
            beta=0.2,
        )
    )
    ratings = kit.ratings_with_r(key, 0.85, 0.93)
    rows = kit.rated_rows(result.csv_path, key, lambda s: ratings[s["sample_id"]])
    res = import_ratings(kit.write_rated(tmp_path / "r.csv", rows), run_id)
    assert res.criterion.status == "inconclusive" and res.criterion.threshold == 0.95
    assert folder.read_record().criterion("c4_human").status == "inconclusive"

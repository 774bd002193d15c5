"""``--json`` and the panel's dry run on a synthetic Phase 5 run (nothing is sent)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from experiments.cli import app
from experiments.validation.human.answer_key import key_samples

runner = CliRunner()


def test_human_import_json_is_the_result_on_stdout(exported, tmp_path, kit):
    run_id, result, key, _ = exported
    ratings = kit.ratings_with_r(key, 0.85, 0.95)
    rows = kit.read_export(result.csv_path)
    for row in rows:
        row["human_rating"] = str(ratings[row["sample_id"]])
    path = kit.write_rated(tmp_path / "rated.csv", rows)
    out = runner.invoke(app, ["human", "import", str(path), "--run", run_id, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["run_id"] == run_id and data["n_rated"] == len(key_samples(key))
    assert 0.85 <= data["pearson"]["r"] <= 0.95
    assert data["criterion"]["status"] == "pass"
    # The synthetic run has no traces: every rating is counted, none attached.
    assert data["trace_feedback"]["untraced"] == data["n_rated"]


def test_panel_dry_run_counts_calls_and_sends_nothing(mlflow_store, tmp_path, kit, monkeypatch):
    run_id, _ = kit.make_run(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-dry-run")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    args = ["panel", "--run", run_id, "--when", "always", "--judge", "openai/gpt-4o-mini"]
    out = runner.invoke(app, [*args, "--dry-run", "--limit", "7", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["dry_run"] and data["would_run"] and data["samples"] == 7
    assert data["calls"] == 7 and data["cost_usd_max"] > 0 and data["fits_budget"] is True
    table = runner.invoke(app, [*args, "--dry-run"])
    assert table.exit_code == 0 and "worst-case cost" in table.stdout
    assert "nothing was sent" in table.stderr
    skipped = runner.invoke(app, ["panel", "--run", run_id, "--dry-run", "--json"])
    assert json.loads(skipped.stdout)["would_run"] is False  # auto: no human ratings yet


def test_panel_dry_run_prices_a_judge_whose_key_is_not_set(
    mlflow_store, tmp_path, kit, monkeypatch
):
    """The dry run exists to cost a study before its keys do: a judge without its key is
    priced from the table and flagged, never skipped; nothing is sent."""
    run_id, _ = kit.make_run(tmp_path)
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    name = "anthropic/claude-haiku-4-5"
    args = ["panel", "--run", run_id, "--rubric", "axbench", "--when", "always"]
    args += ["--judge", name, "--dry-run", "--limit", "5"]
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    said = " ".join(table.stderr.split())  # rich wraps long lines
    assert "would skip" not in said
    assert f"no key {name}: $ANTHROPIC_API_KEY is not set" in said
    assert "would cost once the key is set" in said
    assert "worst-case cost" in table.stdout and "$0.0000" not in table.stdout
    assert "no key" in table.stdout  # the row itself is marked too
    data = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert data["calls"] == 5 and data["cost_usd_max"] > 0 and data["skipped"] == {}
    assert data["missing_keys"] == {name: "ANTHROPIC_API_KEY"}
    (judge,) = data["judges"]
    assert judge["missing_key"] == "ANTHROPIC_API_KEY" and judge["calls"] == 5
    assert judge["cost_usd_max"] == data["cost_usd_max"]

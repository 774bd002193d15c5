"""Export: stratified, blind, formula-safe, logged, and careful with earlier exports."""

from __future__ import annotations

import pytest

from experiments import tracking
from experiments.rundir import FORMULA_TRIGGERS, restore
from experiments.validation.errors import ValidationInputError
from experiments.validation.human.csvio import (
    CSV_COLUMNS,
    canonical_text,
)
from experiments.validation.human.export import export_samples
from experiments.validation.human.rater import prepare_ratings_file
from experiments.validation.runs import phase5_parent


def test_export_is_stratified_blind_and_logged(exported, kit):
    run_id, result, key, records = exported
    assert result.n == 50 and result.csv_path.parent == result.key_path.parent
    assert result.csv_path.parent.name == "human" and result.csv_path.parent.parent.name == run_id
    counts = result.cells
    assert len(counts) == 12 and set(counts.values()) == {4, 5}  # 50 over 12 cells
    per_concept = [sum(v for k, v in counts.items() if k.startswith(c)) for c, _ in kit.CONCEPTS]
    assert max(per_concept) - min(per_concept) <= 1

    rows = kit.read_export(result.csv_path)
    raw = result.csv_path.read_text(encoding="utf-8-sig")
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert len(rows) == 50 and {r["concept"] for r in rows} == {"REDACTED"}
    assert {r["human_rating"] for r in rows} == {""}
    for synset, name in kit.CONCEPTS:
        assert synset not in raw and f"about {name}" not in raw
    for token in ("+1.000", "-1.000", "delta", "strength", "Tell me about"):
        assert token not in raw
    # Order carries no information: ids follow a shuffled, not a grouped, cell order.
    cells_in_order = [s["cell"] for s in key["samples"]]
    assert cells_in_order != sorted(cells_in_order)
    # The key maps every sample back to its real child run, Δ and generation.
    children = phase5_parent(run_id).cell_runs()
    by_key = {r["key"]: r for r in records}
    for entry in key["samples"]:
        assert children[entry["cell"]] == entry["child_run_id"]
        assert by_key[entry["generation_key"]]["delta"] == entry["delta"]
        assert entry["prompt"] and entry["concept_name"]
    # Logged as artefacts of the parent run.
    listed = {f.path for f in tracking.client().list_artifacts(run_id, "human")}
    assert listed == {"human/human_validation.csv", "human/answer_key.json"}
    # Same seed: same bytes; a different sample refuses to overwrite without --force.
    before = result.csv_path.read_bytes()
    assert export_samples(run_id, n=50, seed=3).csv_path.read_bytes() == before
    with pytest.raises(ValidationInputError, match="different export"):
        export_samples(run_id, n=50, seed=4)
    assert result.csv_path.read_bytes() == before

    prepare_ratings_file(result.csv_path, key)  # ratings in progress are never lost
    forced = export_samples(run_id, n=50, seed=4, force=True)
    assert result.csv_path.read_bytes() != before
    kept = result.csv_path.parent / f"human_ratings.{key['key_hash'][:12]}.csv"
    assert kept.exists() and "kept" in forced.warnings[0]


def test_export_neutralises_formula_cells(mlflow_store, tmp_path, kit):
    run_id, records = kit.make_run(tmp_path)
    result = export_samples(run_id, n=1000, seed=0, out=tmp_path / "all")
    assert result.n == len(records) and "exporting all" in result.warnings[0]
    rows = kit.read_export(result.csv_path)
    texts = {r["text"] for r in records}
    assert len(rows) == len(records)
    for row in rows:
        for cell in row.values():
            assert cell[:1] not in FORMULA_TRIGGERS, cell
        text = row["generated_text"]
        original = restore(text)
        assert text.startswith("'") == (original[:1] in FORMULA_TRIGGERS)
        assert "\x1b" not in text
    # Commas, quotes and newlines survive quoting intact.
    assert any(r["generated_text"].startswith('a comma, a "quote" and\na newline') for r in rows)
    assert {canonical_text(r["generated_text"]) for r in rows} == {canonical_text(t) for t in texts}
    # Every cell is quoted on disk.
    first_data_line = result.csv_path.read_text(encoding="utf-8-sig").splitlines()[1]
    assert first_data_line.startswith('"') and first_data_line.endswith('"')


def test_export_errors(mlflow_store, tmp_path, kit):
    with pytest.raises(ValidationInputError, match="no MLflow run"):
        export_samples("0" * 32)
    run_id, _ = kit.make_run(tmp_path)
    child = phase5_parent(run_id).cell_runs()["person.n.01|+1.000"]
    with pytest.raises(ValidationInputError, match="not a Phase 5 parent"):
        export_samples(child)
    with pytest.raises(ValidationInputError, match="at least 1"):
        export_samples(run_id, n=0)

"""Records of an earlier version read as the current one: identify's and calibration's
version 1 (loose [low, high] lists and numbers) as Intervals, every number kept; identify's
curve rows (loose ends until version 2) too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.record import CalibrationRecord, IdentifyRecord
from experiments.record.base import RecordError

ROOT = Path(__file__).resolve().parents[2]
IDENTIFY_V1 = ROOT / "bench/identify_dev_v3/analysis.json"  # v3's development run
# `steer-eval calibrate --quick` at 8e69960 (the release before version 2)
CALIBRATION_V1 = Path(__file__).parent / "calibration/record_v1.json"


def test_an_identify_version_1_record_reads_its_terms_as_intervals():
    old = json.loads(IDENTIFY_V1.read_text())
    assert old["version"] == 1
    record = IdentifyRecord.parse(IDENTIFY_V1.read_text(), str(IDENTIFY_V1))
    assert record.version == 3
    fz, was = record.between_concepts.fisher_z, old["between_concepts"]["fisher_z"]
    assert fz is not None
    assert (fz.estimate, [fz.low, fz.high], fz.n_clusters) == (
        was["r"], was["interval"], was["n_concepts"],
    )  # fmt: skip
    for name, result in record.manipulations.items():
        stored = old["manipulations"][name]["mediation"]
        for term in ("total_auroc", "direct_auroc", "cos_ref", "share_via_cos"):
            if stored.get(term) is None:
                continue
            read = getattr(result.mediation, term)
            assert [read.estimate, read.low, read.high] == [
                stored[term]["estimate"], *stored[term]["interval"],
            ]  # fmt: skip
        # a curve row's AUROC and effect: the mean and its concept-level ends, one Interval
        for row, was in zip(result.curve, old["manipulations"][name]["curve"], strict=True):
            for column in ("auroc", "effect"):
                got = getattr(row, column)
                ends = [was.get(column), was.get(f"{column}_low"), was.get(f"{column}_high")]
                assert ([got.estimate, got.low, got.high] if got else [None] * 3) == ends
            assert (row.level, row.kl, row.cos_ref) == (was["level"], was.get("kl"),
                                                        was.get("cos_ref"))  # fmt: skip
        for level, was in zip(
            result.minimum_effective, old["manipulations"][name]["minimum_effective"], strict=True
        ):
            numbers = [was.get(k) for k in ("level", "low", "high")]
            got = level.level
            assert ([got.estimate, got.low, got.high] if got else [None] * 3) == numbers
            assert (level.status, level.low_open, level.high_open) == (
                was["status"], was.get("low_open", False), was.get("high_open", False),
            )  # fmt: skip


def test_a_block_key_no_version_declares_fails_rather_than_reading_as_none():
    data = json.loads(IDENTIFY_V1.read_text())
    data["between_concepts"]["fisher_z_typo"] = 1.0
    with pytest.raises(RecordError, match="fisher_z_typo"):
        IdentifyRecord.parse(json.dumps(data))


def test_a_calibration_version_1_record_reads_its_numbers_as_intervals():
    old = json.loads(CALIBRATION_V1.read_text())
    assert old["version"] == 1
    record = CalibrationRecord.parse(CALIBRATION_V1.read_text())
    assert record.version == 2 and len(record.results) == len(old["results"])
    for fit, was in zip(record.results, old["results"], strict=True):
        mm, before = fit.mixed_model, was["mixed_model"]
        assert mm.evaluable == before["evaluable"]
        assert [mm.estimate, mm.low, mm.high] == [before.get(k) for k in ("slope", "low", "high")]
        assert mm.n_clusters == (before.get("n_concepts") or 0) and mm.n == before["n"]
        for level, row in zip(fit.levels, was["levels"], strict=True):
            assert [level.level.estimate, level.level.low, level.level.high] == [
                row["level"], row["level_low"], row["level_high"],
            ]  # fmt: skip
            assert [level.effect.estimate, level.effect.low, level.effect.high] == [
                row["effect"], row["effect_low"], row["effect_high"],
            ]  # fmt: skip
        least, stored = fit.minimum_effective, was["minimum_effective"]
        assert least.status == stored["status"]
        if least.level is not None:
            assert [least.level.estimate, least.level.low, least.level.high] == [
                stored["level"], stored["low"], stored["high"],
            ]  # fmt: skip


@pytest.mark.parametrize("study", ["phase6-identify-v3", "phase6-identify-v4"])
def test_the_committed_pooled_answers_read_typed_and_render_as_committed(study):
    """v3's and v4's pooled scorings (written before the pool was a run) read as the
    typed PooledRecord, the pooled answer renders from it byte for byte, and the record
    written back is the committed file's content; their exploratory passes read typed and
    render their summary."""
    from experiments.identify.heldout.shards import pooled_markdown
    from experiments.identify.pooled_exploratory import exploratory_markdown
    from experiments.record import PooledRecord
    from experiments.record.pooled import ExploratoryRecord

    folder = ROOT / "results-heldout" / study / "pooled"
    text = (folder / "pooled.json").read_text()
    record = PooledRecord.model_validate_json(text)
    assert record.primary.verdict == "supported" and not record.forced
    assert pooled_markdown(record) == (folder / "answer.md").read_text()
    assert record.model_dump(mode="json", exclude_unset=True) == json.loads(text)
    explored = ExploratoryRecord.model_validate_json((folder / "exploratory.json").read_text())
    assert explored.primary_scored.slope == record.primary.slope
    assert "| practitioner_equal_norm |" in exploratory_markdown(explored)

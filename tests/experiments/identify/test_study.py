"""``steer-eval identify`` end to end on the tiny random Gemma (the ``--quick`` shape):
the run folder, MLflow parent and children, resume, and the held-out protocol."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments import tracking
from experiments.config import load_config
from experiments.identify import QUICK
from experiments.identify.answer import PRIMARY_STATUS, answer_of
from experiments.identify.heldout.prereg import (
    PreregistrationError,
    load_preregistration,
    study_hash,
)
from experiments.identify.study import run_identify
from experiments.record import IdentifyRecord
from experiments.rundir import RunDir, read_jsonl


def binding(tmp, *extra: str):
    """The study hash the module's pre-registrations bind: the held-out test config's
    (``config_for``, with ``extra`` overrides), as a function of the pre-registration's
    path (for ``bound_preregistration``, whose repository's code, ``experiments/code.py``,
    stays as it is unless a test changes it)."""
    return lambda path: study_hash(config_for(tmp, path, *extra))


@pytest.fixture(scope="module")
def prereg(tmp_path_factory, bound_preregistration):
    """The pre-registration of the module's runs (see ``binding``)."""
    return bound_preregistration(
        tmp_path_factory.mktemp("prereg"), binding(tmp_path_factory.getbasetemp())
    )


def config_for(tmp, prereg, *extra):
    return load_config(
        "configs/identify.yaml",
        [
            "layer=2",
            "identify.limit=3",
            # development concepts with non-taxonomic names (person, change, shrub): the
            # name-free texts drop Latin taxa, so genera get none
            "identify.split_seed=4",
            "generation.max_new_tokens=4",
            "criteria.n_boot=100",
            f"identify.preregistration={prereg}",
            f"identify.results_dir={tmp / 'res'}",
            "identify.isocos_degrees=[45, 90]",  # the iso-cos design, two nuisances
            "identify.isocos_nuisances=[0, 1]",
            "identify.strengths=[1.0, 2.0]",  # the dose varied; the primary is at 1.0
            "identify.subset_concepts=2",  # doses matched and every direction generated
            "identify.name_free=true",  # detection and the subset's outcome without names
            "identify.subset_prompts=['Yesterday, at the market,']",  # one more report prompt
            *extra,
        ],
        overlays=[QUICK],
    )


@pytest.fixture(scope="module")
def study(tmp_path_factory, mlflow_store, tiny_lm, embedder, prereg, single_threaded):
    tmp = tmp_path_factory.mktemp("identify")
    config = config_for(tmp, prereg)
    with single_threaded():
        return config, tmp, run_identify(config, lm=tiny_lm, embedder=embedder)


def test_every_concept_gets_every_direction_scored_and_measured(study):
    _, _, result = study
    frame = result.directions
    assert frame["concept"].nunique() == 3
    per_concept = frame.groupby("concept")["direction"].nunique()
    assert (per_concept == per_concept.iloc[0]).all() and per_concept.iloc[0] >= 10
    assert (
        frame[["auroc", "ap", "f1_calibrated", "cos_ref", "lens", "kl", "effect"]]
        .notna()
        .all()
        .all()
    )
    assert frame["auroc"].between(0, 1).all()
    ref = frame[frame["direction"] == "reference"]
    assert (ref["cos_ref"].round(9) == 1).all()
    rot = frame[frame["direction"] == "rotation:pc:45"]
    assert rot["cos_ref"].round(9).eq(round(2**-0.5, 9)).all()
    assert set(frame["manipulation"]) >= {
        "rotation:isotropic",
        "rotation:pc",
        "rotation:other",
        "noise",
        "logistic",
        "shrinkage",
        "size",
    }


def test_the_development_run_uses_development_concepts_only(study):
    config, _, result = study
    split = RunDir(config.identify.results_dir, result.run_id)
    import json

    data = json.loads(split.file(RunDir.CONCEPT_SPLIT).read_text())
    assert set(data["concepts"]) <= set(data["development"])
    assert not set(data["concepts"]) & set(data["heldout"])
    assert result.record.label.startswith("exploratory")


def test_the_record_covers_every_manipulation_and_the_primary(study):
    config, _, result = study
    record = result.record
    assert set(record.manipulations) == set(result.directions["manipulation"]) - {
        "reference",
        "null",
    }
    # the primary's rows: every manipulation and v*, no null (rotation:isotropic:90 is
    # orthogonal to v*: it is the null's, not a point of the primary)
    assert record.primary is not None
    assert record.primary.manipulations == sorted({*record.manipulations, "reference"})
    nulls = {d for d in result.directions["direction"] if d.startswith("null:")}
    assert nulls and record.primary.left_out == sorted({*nulls, "rotation:isotropic:90"})
    summary = RunDir(config.identify.results_dir, result.run_id).file(RunDir.SUMMARY)
    assert "nulls left out: " + ", ".join(record.primary.left_out) in summary.read_text()
    for r in record.manipulations.values():
        assert r.curve and r.partial.auroc is not None
        assert {m.fraction for m in r.minimum_effective} == {0.5, 1.0}
    assert record.primary is not None
    assert record.primary.verdict in PRIMARY_STATUS
    assert record.preregistration and record.preregistration["commit"]
    assert (record.resources.wall_seconds or 0) > 0 and (record.resources.peak_rss_mib or 0) > 0
    folder = RunDir(config.identify.results_dir, result.run_id)
    assert IdentifyRecord.parse(folder.file(RunDir.ANALYSIS).read_text()) == record


def test_the_record_carries_the_v2_estimator_and_the_iso_cos_design(study):
    _, _, result = study
    frame = result.directions
    iso = frame[frame["manipulation"] == "isocos"]
    assert sorted(iso["level"].unique()) == [45.0, 90.0]
    at_45 = iso[iso["level"] == 45.0]
    assert np.allclose(at_45["cos_ref"], np.cos(np.pi / 4))  # equal geometry, by design
    ident = result.record.identified
    assert ident is not None
    assert set(ident.flexible) == {"auroc", "probit_auroc"}
    assert ident.flexible["auroc"].n_clusters == 3
    assert "45" in ident.iso_cos.angles
    assert ident.iso_cos.covariates[0] == "nuisance_effect"
    het = ident.heterogeneity_given_cos
    assert het.F is not None or not het.evaluable
    # the effect is the pre-registered strength's; each strength has its own column
    np.testing.assert_allclose(frame["effect"], frame["effect_at_1"])
    assert not np.allclose(frame["effect_at_2"], frame["effect_at_1"])
    assert set(ident.by_strength) == {"1", "2"}
    keys = [v.key for v in answer_of(result.record).verdicts]
    assert "identified/flexible/auroc" in keys and keys[0] == "primary"
    # every estimand under its own name, with its question; the unbuilt ones say why
    estimands = result.record.estimands
    assert set(estimands) == {
        "practitioner_equal_norm", "practitioner_full_data", "practitioner_within_family",
        "equal_geometry", "equal_geometry_uncorrected",
        "equal_geometry_nonadditive", "equal_norm", "equal_norm_cos_per_concept",
        "equal_norm_dose_adjusted", "equal_dose", "practitioner",
    }  # fmt: skip
    assert estimands["equal_geometry"].status == "estimated"
    assert estimands["equal_geometry"].fit is not None
    assert estimands["equal_geometry"].fit.n_clusters == 3
    assert estimands["practitioner"].status == "not_measured"
    assert estimands["practitioner"].reason
    assert {f"estimand/{n}" for n in estimands} <= set(keys)
    rel = result.record.outcome_reliability
    assert {"effect_good_directions", "auroc_good_directions"} <= set(rel)
    assert "effect_equal_geometry_cells" in rel
    assert {"effect_practitioner_directions", "auroc_practitioner_directions"} <= set(rel)
    built = estimands["practitioner_equal_norm"]  # v*, the logistic and shrinkage paths
    assert built.status == "estimated" and built.fit is not None
    assert built.fit.n_clusters == 3 and "restricted" in built.fit.method
    for r in rel.values():
        assert (r.estimate is None and r.reason) or (r.estimate is not None and r.estimate <= 1)


def test_the_subset_holds_the_dose_and_generates_from_every_direction(study):
    config, _, result = study
    frame = result.directions
    folder = RunDir(config.identify.results_dir, result.run_id)
    import json

    subset = json.loads(folder.file(RunDir.SUBSET).read_text())["concepts"]
    assert len(subset) == 2 and set(subset) <= set(frame["concept"])
    inside = frame["concept"].isin(subset)
    for column in ("dose_effect_0.5x", "dose_effect_2x", "dose_effect_matched", "gen_effect"):
        assert frame.loc[inside, column].notna().all(), column
    for column in ("dose_effect_0.5x", "dose_effect_2x", "dose_effect_matched"):
        assert frame.loc[~inside, column].isna().all(), column
    # off the subset only the validating directions are generated from
    outside = frame.loc[~inside & frame["gen_effect"].notna(), "direction"]
    assert 0 < outside.nunique() <= len(config.identify.generated)
    # v* is matched to itself: its multiplier is 1 (within the bisection's resolution)
    ref = frame[inside & (frame["direction"] == "reference")]
    np.testing.assert_allclose(ref["dose_multiplier"], 1.0, rtol=0.03)
    # a direction that moves the next token more than v* is steered more gently
    mult = frame.loc[inside, "dose_multiplier"].to_numpy()
    ratio = frame.loc[inside, "kl"].to_numpy() / np.repeat(ref["kl"].to_numpy(), len(mult) // 2)
    assert np.corrcoef(np.log(mult), np.log(ratio))[0, 1] < -0.5
    half, double = frame.loc[inside, "dose_effect_0.5x"], frame.loc[inside, "dose_effect_2x"]
    assert not np.allclose(half, double)
    block = result.record.identified.subset
    assert block.concepts == sorted(subset)
    assert set(block.dose) == {"0.5x", "2x", "matched"}
    assert block.matched_share is not None and 0 <= block.matched_share <= 1
    generated = block.outcomes["generated"]  # a declared outcome (identify/measures.py)
    assert generated.slopes["auroc"] is not None and generated.given_dose is not None
    assert generated.agreement is not None and generated.agreement.good_n > 0
    rows = read_jsonl(folder.file(RunDir.DOSE))
    assert {r["dose"] for r in rows} == {"0.5x", "2x", "matched"}
    assert "arm" not in rows[0] and {"direction", "multiplier", "kl", "kl_target"} <= set(rows[0])
    assert {"dose", "name_free"} <= set(result.record.timings)
    # the subset also generates on the extra report prompt; nobody else does
    n = len(config.generation.prompts)
    extra = [g for g in folder.read_generations() if g["prompt_index"] >= n]
    assert extra and {g["concept"] for g in extra} <= set(subset)
    assert all("Yesterday, at the market," in g["prompt"] for g in extra)
    # name-free: AUROC for every direction, the outcome on the subset
    assert frame["auroc_name_free"].between(0, 1).all()
    assert frame.loc[inside, "effect_name_free"].notna().all()
    assert frame.loc[~inside, "effect_name_free"].isna().all()
    assert set(block.outcomes["name_free"].slopes) == {"auroc", "auroc_name_free"}
    name_free = result.record.identified.name_free
    assert name_free is not None and name_free.auroc_name_free is not None
    texts = json.loads(folder.file(RunDir.NAME_FREE_TEXTS).read_text())
    assert set(texts["on"]) == set(subset)
    keys = [v.key for v in answer_of(result.record).verdicts]
    assert {
        "identified/subset/matched",
        "identified/subset/generated",
        "identified/subset/name_free",
        "identified/name_free/auroc",
    } <= set(keys)
    summary = folder.file(RunDir.SUMMARY).read_text(encoding="utf-8")
    assert "- Subset of 2 concepts" in summary
    assert "- Name-free outcome on the subset" in summary and "- Generated outcome" in summary
    # each declared outcome's slopes as metrics where the 2-concept subset estimates one
    # (test_matched holds a subset large enough to estimate them)
    metrics = tracking.get_run(result.run_id).data.metrics
    finite = {
        f"subset/{key}/{d}"
        for key, slopes in block.outcomes.items()
        for d, fit in slopes.slopes.items()
        if fit.estimate is not None
    }
    assert finite <= set(metrics)


def test_the_answer_leads_with_the_primary_analysis_in_the_common_words(study):
    config, _, result = study
    answer = answer_of(result.record)
    primary = answer.verdicts[0]
    assert primary.key == "primary" and primary.claim
    assert primary.status == PRIMARY_STATUS[result.record.primary.verdict]
    assert primary.reason == result.record.primary.verdict
    assert any(v.key == "prompt_baseline" for v in answer.verdicts)
    folder = RunDir(config.identify.results_dir, result.run_id)
    text = folder.file(RunDir.ANSWER).read_text(encoding="utf-8")
    assert text.startswith(f"## The answer (run `{result.run_id}`)")
    assert f"{primary.claim}: {primary.status}" in text
    assert "primary" in folder.file(RunDir.CRITERIA).read_text()
    assert tracking.run_ui_url(result.run_id).endswith(
        "/artifacts/answer.md?workflowType=machine_learning"
    )


def test_the_parent_and_one_child_per_manipulation_are_in_mlflow(study):
    config, _, result = study
    run = tracking.get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["phase"] == "6-identify"
    assert run.data.tags["mlflow.note.content"].startswith("## The answer")
    assert any(k.startswith("rotation_isotropic/slope_auroc") for k in run.data.metrics)
    children = tracking.child_runs(result.run_id, config.identify.experiment)
    assert {c.data.tags["identify.manipulation"] for c in children} == set(
        result.record.manipulations
    )
    artifacts = {a.path for a in tracking.client().list_artifacts(result.run_id)}
    assert {"analysis.json", "summary.md", "directions.csv", "plots"} <= artifacts
    child_artifacts = {a.path for a in tracking.client().list_artifacts(children[0].info.run_id)}
    assert {"curve.json", "cells.json"} <= child_artifacts


def test_a_resume_does_not_score_again(study, tiny_lm, embedder):
    import torch

    config, _, result = study
    run_dir = RunDir(config.identify.results_dir, result.run_id)
    lines = len(read_jsonl(run_dir.file(RunDir.LIKELIHOOD)))
    doses = len(read_jsonl(run_dir.file(RunDir.DOSE)))
    generations = len(run_dir.read_generations())
    torch.set_num_threads(1)
    again = run_identify(config, lm=tiny_lm, embedder=embedder, resume=result.run_id)
    assert again.run_id == result.run_id
    assert len(read_jsonl(run_dir.file(RunDir.LIKELIHOOD))) == lines
    assert len(read_jsonl(run_dir.file(RunDir.DOSE))) == doses
    assert len(run_dir.read_generations()) == generations
    assert again.record.pooled.slope_auroc == result.record.pooled.slope_auroc
    children = tracking.child_runs(result.run_id, config.identify.experiment)
    assert len(children) == len(result.record.manipulations)


def test_the_heldout_set_is_scored_once_unless_forced(study, tiny_lm, embedder, prereg, tmp_path):
    import torch

    torch.set_num_threads(1)
    config = config_for(tmp_path, prereg, "identify.concept_set=heldout", "identify.limit=3")
    first = run_identify(config, lm=tiny_lm, embedder=embedder)
    assert first.record.label.startswith("confirmatory")
    held = set(first.directions["concept"])
    _, _, dev = study
    assert not held & set(dev.directions["concept"])
    with pytest.raises(PreregistrationError, match="already scored"):
        run_identify(config, lm=tiny_lm, embedder=embedder)
    forced = run_identify(config, lm=tiny_lm, embedder=embedder, force=True)
    assert "not confirmatory" in forced.record.label
    assert tracking.get_run(forced.run_id).data.tags["identify.forced"] == "true"
    ledger = read_jsonl(tmp_path / "res" / "heldout_ledger.jsonl")
    # the intent to score is written before any held-out cell, the scoring after it
    assert [(e["status"], e["forced"]) for e in ledger] == [
        ("started", False),
        ("scored", False),
        ("started", True),
        ("scored", True),
    ]
    assert ledger[0]["run_id"] == ledger[1]["run_id"] == first.run_id
    assert ledger[0]["binding"] == {
        "config_hash": study_hash(config),
        "code_commit": load_preregistration(prereg).primary.code_commit,
    }
    # each run's entries are on its MLflow run too: a tag per status, the artefact whole
    for run_id, entries in ((first.run_id, ledger[:2]), (forced.run_id, ledger[2:])):
        tags = tracking.get_run(run_id).data.tags
        assert json.loads(tags["steer_eval.ledger.started"]) == entries[0]
        assert json.loads(tags["steer_eval.ledger.scored"]) == entries[1]
        assert mirrored_ledger(run_id, tmp_path / run_id) == entries

    # a resume of the forced scoring stays forced: its label, tags and ledger say so
    again = run_identify(config, lm=tiny_lm, embedder=embedder, resume=forced.run_id)
    assert "not confirmatory" in again.record.label
    tags = tracking.get_run(forced.run_id).data.tags
    assert tags["identify.label"] == "exploratory" and tags["identify.forced"] == "true"
    resumed = read_jsonl(tmp_path / "res" / "heldout_ledger.jsonl")[4]
    assert (resumed["status"], resumed["forced"], resumed["run_id"]) == (
        "resumed", True, forced.run_id,
    )  # fmt: skip


def mirrored_ledger(run_id: str, into) -> list[dict]:
    """The ``ledger.jsonl`` artefact of a run, read back."""
    into.mkdir(parents=True, exist_ok=True)
    path = tracking.client().download_artifacts(run_id, "ledger.jsonl", str(into))
    return read_jsonl(Path(path))


def test_a_heldout_resume_is_checked_again_and_refused_on_a_changed_binding(
    study, tiny_lm, embedder, tmp_path, git, bound_preregistration
):
    """A resume of a held-out run passes the checks of a new run again: the
    pre-registration it started under, committed unchanged, and the code and config it is
    bound to. Unchanged, it proceeds (and says so in the ledger); changed, it is refused
    before the run is reopened."""
    import torch

    torch.set_num_threads(1)
    repo = tmp_path / "repo"
    path = bound_preregistration(repo, binding(tmp_path))
    config = config_for(tmp_path, path, "identify.concept_set=heldout", "identify.limit=3")
    ledger = tmp_path / "res" / "heldout_ledger.jsonl"
    first = run_identify(config, lm=tiny_lm, embedder=embedder)

    again = run_identify(config, lm=tiny_lm, embedder=embedder, resume=first.run_id)
    assert again.record.label.startswith("confirmatory")
    entries = read_jsonl(ledger)
    assert [e["status"] for e in entries] == ["started", "scored", "resumed", "scored"]
    bound = {"config_hash": study_hash(config), "code_commit": git(repo, "rev-parse", "HEAD~1")}
    assert entries[2]["binding"] == bound and entries[2]["forced"] is False
    tags = tracking.get_run(first.run_id).data.tags
    assert json.loads(tags["steer_eval.ledger.resumed"]) == entries[2]
    assert mirrored_ledger(first.run_id, tmp_path / "mirror") == entries

    def refused(match: str) -> None:
        with pytest.raises(PreregistrationError, match=match):
            run_identify(config, lm=tiny_lm, embedder=embedder, resume=first.run_id)
        assert len(read_jsonl(ledger)) == len(entries)  # no entry: nothing was resumed
        assert tracking.get_run(first.run_id).info.status == "FINISHED"  # not reopened

    path.write_text(path.read_text() + "\nH6: added after the run started\n")
    refused(f"cannot resume held-out run {first.run_id}: the pre-registration .* changed since")
    git(repo, "checkout", "--", "prereg.md")
    (repo / "experiments" / "code.py").write_text("x = 2\n")  # the code moves on
    git(repo, "commit", "-qam", "change")
    refused(f"cannot resume held-out run {first.run_id}: the code changed since code_commit")


def test_a_heldout_shard_is_scored_once_kept_resumed_and_pooled(
    tiny_lm, embedder, tmp_path, mlflow_store, bound_preregistration
):
    """A shard is one complete held-out run with its own ledger entries (its number and
    device), copied on finish to its committed folder with the sums the reliability floor
    needs; it scores and prints no primary (only the pool does); scored once; resumable;
    and the pool scores the primary on the shards' table."""
    import torch

    from experiments.identify.study import pool_heldout

    torch.set_num_threads(1)
    repo = tmp_path / "repo"
    sharded = ("identify.shard_size=3", f"identify.shards_dir={tmp_path / 'committed'}")
    path = bound_preregistration(repo, binding(tmp_path, *sharded))
    config = config_for(tmp_path, path, "identify.concept_set=heldout", *sharded)
    shard = config_for(tmp_path, path, "identify.concept_set=heldout", "identify.shard=0", *sharded)
    first = run_identify(shard, lm=tiny_lm, embedder=embedder)
    assert first.record.label.startswith("confirmatory")
    assert first.record.primary is None  # a shard reads no verdict: the pool does
    assert tracking.get_run(first.run_id).data.tags["identify.shard"] == "0"
    folder = tmp_path / "committed" / config.experiment / "shard-0"
    kept = read_jsonl(folder / "heldout_ledger.jsonl")
    assert [(e["status"], e["shard"], e["device"]) for e in kept] == [
        ("started", 0, "cpu/float32"),
        ("scored", 0, "cpu/float32"),
    ]
    assert (folder / "directions.csv").read_text() == (first.run_dir / "directions.csv").read_text()
    # the record's outcome reliabilities travel with it (their per-pair rows do not)
    kept_reliability = json.loads((folder / "reliability.json").read_text())
    assert set(kept_reliability) == set(first.record.outcome_reliability)
    assert all(e.get("primary") is None for e in kept)
    with np.load(folder / "reliability_sums.npz") as sums:
        names = set(sums.files)
        assert {n.split("|")[0] for n in names} == {"practitioner", "practitioner_full_data"}
        assert all(sums[n].shape == (50, 3) for n in names)
    with pytest.raises(PreregistrationError, match="shard 0 of the held-out concepts was already"):
        run_identify(shard, lm=tiny_lm, embedder=embedder)

    again = run_identify(shard, lm=tiny_lm, embedder=embedder, resume=first.run_id)
    assert again.record.config.identify.shard == 0
    kept = read_jsonl(folder / "heldout_ledger.jsonl")
    assert [e["status"] for e in kept] == ["started", "scored", "resumed", "scored"]

    pooled = pool_heldout(config)  # 3 concepts in shards of 3: one shard, the whole set
    assert pooled.devices == {"cpu/float32": 3}
    from experiments.identify.heldout.shards import score_pooled

    whole = score_pooled(again.directions.assign(device="x"), pooled.primary.spec, config)
    assert pooled.primary.verdict == whole.verdict
    assert pooled.primary.slope.estimate == pytest.approx(whole.slope.estimate)


def test_the_v3_design_runs_end_to_end_with_random_nuisances(
    tmp_path, mlflow_store, tiny_lm, embedder, prereg, single_threaded
):
    """identify v3 on the tiny model: random iso-cos draws per concept, each row with its
    spectrum band, the equal-geometry estimand estimated within (concept, angle, band)
    and every concept's draws different from another concept's."""
    config = config_for(
        tmp_path, prereg,
        "identify.isocos_draw=random", "identify.isocos_nuisances=[0, 1, 2, 3]",
        "identify.isocos_bands=2", "identify.subset_concepts=0", "identify.name_free=false",
    )  # fmt: skip
    with single_threaded():
        result = run_identify(config, lm=tiny_lm, embedder=embedder)
    frame = result.directions
    iso = frame[frame["manipulation"] == "isocos"]
    assert iso["nuisance_band"].notna().all()
    assert iso.groupby(["concept", "level", "nuisance_band"]).size().eq(2).all()  # 4 draws, 2 bands
    at_45 = iso[iso["level"] == 45.0]
    assert np.allclose(at_45["cos_ref"], np.cos(np.pi / 4))
    by_concept = at_45.pivot_table(index="seed", columns="concept", values="auroc")
    assert by_concept.nunique(axis=1).gt(1).all()  # each concept its own draws
    equal = result.record.estimands["equal_geometry"]
    assert equal.status == "estimated" and equal.fit is not None
    assert "restricted" in equal.fit.method


def _halves_run(tmp_path, prereg, tiny_lm, embedder, single_threaded, *sets: str):
    """A tiny identify run as v3 measures: v* from half the training templates, AUROC on
    the held-out texts, no subset, no name-free texts; ``sets`` beside."""
    config = config_for(
        tmp_path, prereg,
        "identify.subset_concepts=0", "identify.name_free=false",
        "identify.reference_halves=true", "identify.auroc_texts=held_out", *sets,
    )  # fmt: skip
    with single_threaded():
        return run_identify(config, lm=tiny_lm, embedder=embedder)


def test_v3_with_the_reference_halves_measures_every_direction_against_the_second_half(
    tmp_path, mlflow_store, tiny_lm, embedder, prereg, single_threaded
):
    """identify.reference_halves on the tiny model: v* from half the training templates,
    each direction's cosine to the other half's diffmean in ``cos_half`` (an iso-cos
    direction's differs from its nominal cos θ: the second half sees the reference's
    error), AUROC's within-cell error variance on the equal-geometry rows only, and the
    equal-geometry estimand corrected, the uncorrected slope beside it; the likelihood at
    both signs with each sign's reliability and their agreement; AUROC ranked on the
    validation and test texts together (its halves then split both)."""
    from experiments.identify.estimation.corrected import CORRECTED

    result = _halves_run(
        tmp_path, prereg, tiny_lm, embedder, single_threaded,
        "identify.isocos_draw=random", "identify.isocos_nuisances=[0, 1, 2, 3]",
        "identify.isocos_bands=2", "identify.strengths=[-1.0, 1.0]",
    )  # fmt: skip
    frame = result.directions
    ref = frame[frame["direction"] == "reference"]
    assert np.allclose(ref["cos_ref"], 1.0) and (ref["cos_half"] < 0.9999).all()
    cells = (frame["manipulation"] == "isocos") & (frame["level"] < 90)
    assert (frame.loc[cells, "auroc_error_within"] >= 0).all()
    assert frame.loc[~cells, "auroc_error_within"].isna().all()
    at_45 = frame[cells & (frame["level"] == 45.0)]
    assert np.allclose(at_45["cos_ref"], np.cos(np.pi / 4))
    assert at_45.groupby("concept")["cos_half"].std().gt(0).all()
    equal = result.record.estimands["equal_geometry"]
    bare = result.record.estimands["equal_geometry_uncorrected"]
    assert bare.fit is not None and "restricted" in bare.fit.method
    if equal.fit is not None:  # 3 tiny-model concepts may be too few to correct
        assert equal.fit.method == CORRECTED
    else:
        assert "reliability" in (equal.reason or "") or "positive definite" in (equal.reason or "")
    # the likelihood at both signs: each sign's reliability and their agreement
    rel = result.record.outcome_reliability
    assert {"effect_at_1_good_directions", "effect_at_-1_good_directions",
            "sign_agreement_r_good_directions"} <= set(rel)  # fmt: skip
    r = rel["sign_agreement_r_good_directions"].estimate
    assert r is None or -1.0 <= r <= 1.0


def test_v3s_confirmatory_grid_runs_without_iso_cos_directions(
    tmp_path, mlflow_store, tiny_lm, embedder, prereg, single_threaded
):
    """The confirmatory v3 grid has the reference's second half but no iso-cos rows: the
    study finishes (no equal-geometry cells to take AUROC's error in), the primary's
    estimand is estimated on the built directions, and the equal-geometry estimands say
    they had no rows rather than failing."""
    result = _halves_run(
        tmp_path, prereg, tiny_lm, embedder, single_threaded, "identify.isocos_degrees=[]"
    )
    frame = result.directions
    assert not (frame["manipulation"] == "isocos").any()
    assert frame["auroc_error_within"].isna().all() and frame["cos_half"].notna().all()
    estimands = result.record.estimands
    built = estimands["practitioner_equal_norm"]
    assert built.status == "estimated" and built.fit is not None
    for name in ("equal_geometry", "equal_geometry_uncorrected", "equal_geometry_nonadditive"):
        assert estimands[name].status == "not_evaluable" and estimands[name].reason, name


def test_a_config_of_another_phase_is_refused_before_it_is_read():
    """identify names a config of another phase; its check once came after the config's
    identify section was read, so a Phase 5 config failed with an AttributeError."""
    from experiments.config import ConfigError

    with pytest.raises(ConfigError, match="identify takes an identify config, not 'phase5'"):
        run_identify(load_config("configs/phase5.yaml"))


def test_a_listed_run_builds_its_record_and_answer(
    tmp_path, mlflow_store, tiny_lm, embedder, prereg, single_threaded
):
    """``identify.concept_set: listed`` (the outcome check's set) runs to its record and
    answer, which name the set (the record once refused the word)."""
    import json

    from experiments.identify.study import concept_sets

    names = concept_sets(config_for(tmp_path, prereg))["development"][:2]
    config = config_for(
        tmp_path, prereg, "identify.concept_set=listed", f"concepts.synsets={json.dumps(names)}",
        "identify.subset_concepts=0", "identify.name_free=false",
    )  # fmt: skip
    with single_threaded():
        result = run_identify(config, lm=tiny_lm, embedder=embedder)
    assert result.record.concept_set == "listed"
    assert sorted(set(result.directions["concept"])) == sorted(names)
    answer = (result.run_dir / "answer.md").read_text()
    assert "2 listed concepts" in answer
    assert "exploratory: listed concepts" in answer and "development concepts" not in answer


CO_PRIMARIES = """# Pre-registration
```yaml
primary:
  name: P1
  estimand: practitioner_equal_norm
  predictor: auroc
  outcome: likelihood
  strength: 1.0
  control: none
  hypothesis: positive
  sesoi: 0.25
  multiplicity: holm
  co_primaries:
    - name: P2
      estimand: practitioner_full_data
  rule: interval excludes 0
```
"""


def test_a_shard_withholds_the_estimands_its_primaries_are(
    tiny_lm, embedder, tmp_path, mlflow_store, bound_preregistration, single_threaded
):
    """v4's shards once showed P1's and P2's numbers under their estimand rows: a shard
    now keeps those rows not evaluable, saying why, in its record and answer."""
    from experiments.identify.tabulate import WITHHELD

    sharded = ("identify.shard_size=3", f"identify.shards_dir={tmp_path / 'committed'}")
    path = bound_preregistration(tmp_path / "repo", binding(tmp_path, *sharded), CO_PRIMARIES)
    shard = config_for(tmp_path, path, "identify.concept_set=heldout", "identify.shard=0", *sharded)
    with single_threaded():
        result = run_identify(shard, lm=tiny_lm, embedder=embedder)
    estimands = result.record.estimands
    for name in ("practitioner_equal_norm", "practitioner_full_data"):
        assert estimands[name].status == "not_evaluable" and estimands[name].reason == WITHHELD
        assert estimands[name].fit is None
    assert estimands["practitioner_within_family"].reason != WITHHELD  # not a primary's
    answer = (result.run_dir / "answer.md").read_text()
    assert "scored once, on the pooled shards" in answer

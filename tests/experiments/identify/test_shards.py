"""A held-out set in shards: the partition, the ledger per shard, pooling and its refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments.config import ConfigError, load_config
from experiments.identify.heldout.prereg import (
    PreregistrationError,
    binding,
    check_heldout,
    ledger_entry,
    load_preregistration,
    record_heldout,
    study_hash,
)
from experiments.identify.heldout.shards import (
    committed_ledgers,
    keep_shard,
    n_shards,
    pool,
    score_pooled,
    shard_concepts,
    shards_root,
)
from experiments.record import PrimarySpec
from experiments.record.pooled import PooledPrimary

SIZE = 13  # the shipped 50 concepts hold out 25: shards of 13 and 12


@given(
    st.lists(st.text(min_size=1, max_size=6), unique=True, max_size=60),
    st.integers(min_value=1, max_value=20),
)
def test_shards_partition_the_heldout_set_in_its_order(held, size):
    n = n_shards(len(held), size)
    shards = [shard_concepts(held, size, k) for k in range(n)]
    # every concept in exactly one shard, the split's order kept
    assert [c for s in shards for c in s] == held
    assert all(1 <= len(s) <= size for s in shards)
    for k in (-1, n):
        with pytest.raises(ValueError, match=f"shard {k} is not one of"):
            shard_concepts(held, size, k)


def config_for(tmp, prereg, *extra):
    return load_config(
        "configs/identify.yaml",
        [
            "identify.concept_set=heldout",
            f"identify.shard_size={SIZE}",
            "criteria.n_boot=200",
            f"identify.preregistration={prereg}",
            f"identify.results_dir={tmp / 'res'}",
            f"identify.shards_dir={tmp / 'committed'}",
            *extra,
        ],
    )


@pytest.fixture
def bound(tmp_path, bound_preregistration):
    """A committed pre-registration bound to the sharded held-out config and to its own
    repository's code commit; (config, pre-registration)."""
    path = bound_preregistration(
        tmp_path / "repo", lambda path: study_hash(config_for(tmp_path, path))
    )
    return config_for(tmp_path, path), load_preregistration(path)


def test_a_shard_is_bound_to_the_study_of_every_shard(bound, tmp_path):
    from experiments.identify.study import concept_sets, with_concepts

    config, _prereg = bound
    held = concept_sets(config)["heldout"]
    one = config_for(tmp_path, config.identify.preregistration, "identify.shard=1")
    assert study_hash(one) == study_hash(config)  # every shard: one binding
    assert with_concepts(one)[0].concepts.synsets == held[SIZE:]
    bigger = config_for(tmp_path, config.identify.preregistration, "identify.shard_size=5")
    assert study_hash(bigger) != study_hash(config)  # the partition is part of the study
    with pytest.raises(ConfigError, match=r"shard 2 is not one of 0\.\.1"):
        with_concepts(config_for(tmp_path, config.identify.preregistration, "identify.shard=2"))
    with pytest.raises(ConfigError, match=r"identify\.shard needs"):
        load_config("configs/identify.yaml", ["identify.concept_set=heldout", "identify.shard=0"])


def test_the_ledger_allows_each_shard_once_unless_forced(bound, mlflow_store):
    config, prereg = bound
    res, exp = config.results_dir, "phase6-identify-shards"
    assert check_heldout(prereg, exp, res, False, config=config, scope=0) == []
    record_heldout(res, ledger_entry("s0", prereg, False, "started", shard=0))
    with pytest.raises(PreregistrationError, match="shard 0 of the held-out concepts was already"):
        check_heldout(prereg, exp, res, False, scope=0)
    assert check_heldout(prereg, exp, res, False, scope=1) == []  # another shard: allowed
    with pytest.raises(PreregistrationError, match="the held-out concepts were already"):
        check_heldout(prereg, exp, res, False, scope=None)  # the whole set: spent in part
    earlier = check_heldout(prereg, exp, res, True, scope=0)  # --force: allowed, recorded
    assert [e["run_id"] for e in earlier] == ["s0"]
    # an unsharded scoring spends every shard
    record_heldout(res, ledger_entry("all", prereg, False, "started"))
    with pytest.raises(PreregistrationError, match="all"):
        check_heldout(prereg, exp, res, False, scope=1)


def toy_shards(config, held):
    """A toy study's directions on the held-out concepts, cut into the config's shards."""
    from experiments.identify.simulation import simulate as sim
    from steering.nulls import seeded_rng

    toy = sim.toy_directions(config.identify, sim.CLASSES["none"], seeded_rng(0, "s"), 0.3, 25)
    names = dict(zip(toy["concept"].unique(), held, strict=True))
    toy = toy.assign(concept=toy["concept"].map(names))
    size = config.identify.shard_size
    return toy, [
        toy[toy["concept"].isin(shard_concepts(held, size, k))].reset_index(drop=True)
        for k in range(n_shards(len(held), size))
    ]


def finish_shard(config, prereg, k, frame, tmp, device="cpu/float32", bound_to=None):
    """A shard run's folder and ledger lines as a finished run leaves them, kept."""
    run_dir = tmp / "runs" / f"s{k}"
    run_dir.mkdir(parents=True)
    frame.to_csv(run_dir / "directions.csv", index=False)
    checked = bound_to or binding(prereg, config)
    for status, extra in (("started", {"binding": checked}), ("scored", {"primary": "x"})):
        entry = ledger_entry(f"s{k}", prereg, False, status, shard=k, device=device, **extra)
        record_heldout(config.results_dir, entry)
    return keep_shard(config, f"s{k}", run_dir, k, list(frame["concept"].unique()))


def test_pooling_refuses_missing_shards_and_shards_of_another_binding(
    bound, tmp_path, mlflow_store
):
    from experiments.identify.study import concept_sets

    config, prereg = bound
    held = concept_sets(config)["heldout"]
    _toy, shards = toy_shards(config, held)
    finish_shard(config, prereg, 0, shards[0], tmp_path)
    with pytest.raises(PreregistrationError, match=r"shard 1 of 0\.\.1 not finished"):
        pool(config, held, prereg, binding(prereg, config), False)
    other = {**binding(prereg, config), "code_commit": "0" * 40}
    finish_shard(config, prereg, 1, shards[1], tmp_path, bound_to=other)
    with pytest.raises(PreregistrationError, match=r"shard 1 \(run s1: binding .*another"):
        pool(config, held, prereg, binding(prereg, config), False)


def test_the_pooled_primary_is_the_primary_of_the_concatenated_table(bound, tmp_path, mlflow_store):
    from experiments.identify.estimation.cells import StudyTables
    from experiments.identify.estimation.primary import primary_result
    from experiments.identify.study import concept_sets

    config, prereg = bound
    held = concept_sets(config)["heldout"]
    toy, shards = toy_shards(config, held)
    finish_shard(config, prereg, 0, shards[0], tmp_path, device="cpu/float32")
    folder = finish_shard(config, prereg, 1, shards[1], tmp_path, device="cuda/bfloat16")
    assert {p.name for p in folder.iterdir()} == {"directions.csv", "heldout_ledger.jsonl",
                                                   "shard.json"}  # fmt: skip
    record = pool(config, held, prereg, binding(prereg, config), False)

    whole = primary_result(StudyTables(directions=toy), prereg.primary, 200, config.seed)
    assert record.primary.slope.to_dict() == pytest.approx(whole.slope.to_dict())
    assert record.primary.verdict == whole.verdict
    scored = score_pooled(toy.assign(device="x"), prereg.primary, config)
    assert record.primary.model_dump() == scored.model_dump() | {"read": None}
    assert record.devices == {"cpu/float32": SIZE, "cuda/bfloat16": 25 - SIZE}
    assert record.label.startswith("confirmatory") and not record.forced

    # the pooled scoring is in the ledger (local and committed): once, unless forced
    pooled = [json.loads(line) for line in committed_ledgers(config)[-1].read_text().splitlines()]
    assert [e["status"] for e in pooled] == ["pooled"] and pooled[0]["shards"] == {
        "0": "s0",
        "1": "s1",
    }
    with pytest.raises(PreregistrationError, match="the pooled primary was already scored"):
        pool(config, held, prereg, binding(prereg, config), False)
    again = pool(config, held, prereg, binding(prereg, config), True)
    assert again.forced and "not confirmatory" in again.label


def test_the_committed_shard_ledger_counts_on_a_new_machine(bound, tmp_path, mlflow_store):
    """The local ledger and MLflow gone, the committed copy still spends the shard."""
    import shutil

    from experiments.identify.study import concept_sets

    config, prereg = bound
    held = concept_sets(config)["heldout"]
    _toy, shards = toy_shards(config, held)
    finish_shard(config, prereg, 0, shards[0], tmp_path)
    shutil.rmtree(config.results_dir)
    ledgers = committed_ledgers(config)
    with pytest.raises(PreregistrationError, match="shard 0"):
        check_heldout(prereg, "none-such", config.results_dir, False, scope=0, ledgers=ledgers)
    assert (
        check_heldout(prereg, "none-such", config.results_dir, False, scope=1, ledgers=ledgers)
        == []
    )


def test_the_exploratory_estimands_come_after_the_pooled_primary_and_score_nothing(
    bound, tmp_path, mlflow_store
):
    """``--pool --exploratory``: refused until the pooled primary is scored; then every
    estimand on the same pooled table (the practitioner's as ``estimand.estimate_all``
    gives it on the concatenated toy), a per-concept table of the built directions, and
    no ledger entry (the verdict stays the pooled scoring's)."""
    import pandas as pd

    from experiments.identify.estimation.estimands import estimate_all
    from experiments.identify.pooled_exploratory import (
        EXPLORATORY_RECORD,
        PER_CONCEPT,
        pooled_exploratory,
    )
    from experiments.identify.study import concept_sets

    config, prereg = bound
    held = concept_sets(config)["heldout"]
    toy, shards = toy_shards(config, held)
    for k, frame in enumerate(shards):
        finish_shard(config, prereg, k, frame, tmp_path)
    with pytest.raises(PreregistrationError, match="the pooled primary is not scored yet"):
        pooled_exploratory(config, held, prereg)
    pool(config, held, prereg, binding(prereg, config), False)
    ledger = committed_ledgers(config)[-1].read_text()
    record = pooled_exploratory(config, held, prereg)
    assert committed_ledgers(config)[-1].read_text() == ledger  # nothing scored
    whole = estimate_all(toy.assign(shard=0, device="x"), config.criteria.n_boot, config.seed)
    assert record.estimands["practitioner_equal_norm"] == whole["practitioner_equal_norm"]
    assert record.n_concepts == 25 and record.components.n_concepts > 2
    folder = shards_root(config) / "pooled"
    assert (folder / "per_concept.png").read_bytes()[:4] == b"\x89PNG"
    table = pd.read_csv(folder / PER_CONCEPT)
    assert list(table["concept"]) == held[:25] and set(table["shard"]) == {0, 1}
    assert (table["n_built"] > 1).all() and table["auroc_sd"].ge(0).all()
    one = toy[(toy["concept"] == held[0]) & toy["manipulation"].isin(
        ["reference", "logistic", "shrinkage", "size"])]  # fmt: skip
    assert table["n_built"].iloc[0] == len(one)
    assert json.loads((folder / EXPLORATORY_RECORD).read_text())["label"].startswith("exploratory")
    assert record.reliability.shards_without == [0, 1]
    # a shard kept with its record's reliabilities: reported beside the floor
    from metrics.intervals import Interval

    low = {"effect_practitioner_directions": Interval(estimate=0.4, low=0.2, high=0.6)}
    run_dir = tmp_path / "runs" / "s0"
    keep_shard(config, "s0", run_dir, 0, list(shards[0]["concept"].unique()), low)
    again = pooled_exploratory(config, held, prereg).reliability
    assert again.shards_without == [1]
    assert again.primary_outcome.below_floor == ["0"]
    assert again.by_key["effect_practitioner_directions"]["0"].estimate == 0.4


def test_co_primaries_are_pooled_once_and_read_together_by_holm(
    tmp_path, mlflow_store, bound_preregistration, primary
):
    """A primary block with a co-primary: the pool scores both on the concatenated table,
    each at the level Holm's step-down reads it, records both verdicts in the record, the
    answer and the ledger line; the record's `primary` stays P1's."""
    from experiments.identify.estimation.multiplicity import holm
    from experiments.identify.heldout.prereg import primaries
    from experiments.identify.study import concept_sets

    text = primary.replace(
        "  rule:",
        "  name: P1\n  multiplicity: holm\n  alpha: 0.05\n  co_primaries:\n"
        "    - {name: P2, estimator: flexible_cos}\n  rule:",
    )
    path = bound_preregistration(
        tmp_path / "repo", lambda p: study_hash(config_for(tmp_path, p)), text
    )
    config, prereg = config_for(tmp_path, path), load_preregistration(path)
    held = concept_sets(config)["heldout"]
    toy, shards = toy_shards(config, held)
    for k, frame in enumerate(shards):
        finish_shard(config, prereg, k, frame, tmp_path)
    record = pool(config, held, prereg, binding(prereg, config), False)

    def score(spec, confidence):
        return score_pooled(toy.assign(device="x"), spec, config, confidence)

    expected = holm(primaries(prereg.primary), score, 0.05)
    got = record.primaries or []
    assert [r.name for r in got] == ["P1", "P2"]
    assert [r.estimator for r in got] == ["linear_cos", "flexible_cos"]
    for r, e in zip(got, expected, strict=True):
        assert r.verdict == e.verdict and r.confidence == pytest.approx(e.confidence)
        assert r.slope == e.result.slope
        assert r.confidence in (pytest.approx(0.975), pytest.approx(0.95))
    assert record.primary.verdict == got[0].verdict
    pooled = [json.loads(line) for line in committed_ledgers(config)[-1].read_text().splitlines()]
    assert pooled[0]["primaries"] == {"P1": got[0].verdict, "P2": got[1].verdict}
    answer = (shards_root(config) / "pooled" / "answer.md").read_text()
    assert "Holm's step-down at family-wise α = 0.05" in answer
    assert "| P2 | flexible_cos |" in answer


def _halves(rng, n_cells: int, noise: float) -> np.ndarray:
    """[cells, splits, 2]: each cell's true value measured twice with ``noise``."""
    true = rng.standard_normal((n_cells, 1, 1))
    return true + noise * rng.standard_normal((n_cells, 50, 2))


def test_the_reliability_floor_is_read_on_every_shards_sums_and_settles_nothing_below_it(
    bound, tmp_path
):
    """Each shard keeps its demeaned split-half sums; the pool reads the likelihood's
    reliability over all of them per primary's population, and a primary below the
    pre-registration's floor is uninformative whatever its interval, and lets no other
    primary be read at a wider level."""
    from experiments.identify.estimation.stats import demeaned_halves
    from experiments.identify.heldout.shards import (
        RELIABILITY_SUMS,
        ShardRun,
        reliability_floors,
        score_primaries,
        shard_folder,
    )
    from experiments.identify.study import concept_sets

    config, _prereg = bound
    held = concept_sets(config)["heldout"]
    toy, shards = toy_shards(config, held)
    rng = np.random.default_rng(0)
    runs = []
    for k, frame in enumerate(shards):
        sums = {}
        for c in frame["concept"].unique():
            good = demeaned_halves({c: _halves(rng, 12, 0.2)})[c]  # reliable: ~0.96
            bad = demeaned_halves({c: _halves(rng, 9, 3.0)})[c]  # unreliable: ~0.1
            sums[f"practitioner|effect|{c}"] = good
            sums[f"practitioner_full_data|effect|{c}"] = bad
        folder = shard_folder(config, k)
        folder.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(folder / RELIABILITY_SUMS, **sums)
        runs.append(ShardRun(k, f"s{k}", frame, "cpu/float32", False))
    primary = PrimarySpec.model_validate({
        "name": "P1", "predictor": "auroc", "outcome": "likelihood", "strength": 1.0,
        "control": "none", "estimator": "practitioner", "hypothesis": "positive",
        "equivalence_margin": 0.25, "rule": "r", "reliability_floor": 0.5,
        "multiplicity": "holm", "alpha": 0.05,
        "co_primaries": [{"name": "P2", "estimator": "practitioner_full_data"}],
    })  # fmt: skip
    floors = reliability_floors(config, primary, runs)
    assert floors["P1"].met and (floors["P1"].pooled.estimate or 0) > 0.9
    assert not floors["P2"].met and (floors["P2"].pooled.estimate or 1) < 0.5
    assert floors["P1"].shards_without == [] and set(floors["P1"].by_shard) == {"0", "1"}
    p1, p2 = score_primaries(toy.assign(device="x"), primary, config, floors)
    assert p2.verdict == "uninformative" and p2.step == 0
    assert isinstance(p2.result, PooledPrimary) and p2.result.read is not None
    # the pooled record keeps an uninformative co-primary: its reading and what it read
    kept = p2.recorded()
    assert kept.verdict == "uninformative" and kept.read == p2.result.read
    assert PooledPrimary.model_validate(p2.result.model_dump()).verdict == "uninformative"
    # P2 settles nothing: P1 is read at 97.5% whatever it finds
    assert p1.confidence == pytest.approx(0.975)
    unfloored = primary.model_copy(update={"reliability_floor": None})
    assert reliability_floors(config, unfloored, runs) == {}


def test_the_pooled_scoring_is_a_run_the_kernel_opens(bound, tmp_path, mlflow_store):
    """``identify pool`` through ``run_study``: one MLflow run in the study's experiment,
    no model loaded, its record typed, the committed folder's files as before, the
    ledger's pooled entry naming the run and mirrored on it; a second scoring is refused
    before any run opens."""
    from pathlib import Path

    from experiments import tracking
    from experiments.identify.study import concept_sets, pool_exploratory, pool_heldout
    from experiments.record.pooled import ExploratoryRecord, PooledRecord
    from experiments.rundir import RUN_DIR_TAG

    config, prereg = bound
    held = concept_sets(config)["heldout"]
    _toy, shards = toy_shards(config, held)
    for k, frame in enumerate(shards):
        finish_shard(config, prereg, k, frame, tmp_path)
    experiment_runs = 0
    with pytest.raises(PreregistrationError, match="the pooled primary is not scored yet"):
        pool_exploratory(config)  # refused before any run opens
    if (found := tracking.client().get_experiment_by_name(config.experiment)) is not None:
        experiment_runs = len(tracking.client().search_runs([found.experiment_id]))
    written = pool_heldout(config)

    entry = json.loads(committed_ledgers(config)[-1].read_text().splitlines()[-1])
    run = tracking.get_run(entry["run_id"])
    assert entry["status"] == "pooled" and run.info.status == "FINISHED"
    assert run.data.tags["identify.pooled"] == "first"
    assert "steer_eval.model_id" not in run.data.tags  # no model was loaded
    assert json.loads(run.data.tags["identify.shards"]) == {"0": "s0", "1": "s1"}
    assert json.loads(run.data.tags["steer_eval.ledger.pooled"])["run_id"] == run.info.run_id
    slope = written.primary.slope
    assert run.data.metrics["primary/primary/slope"] == pytest.approx(slope.estimate)
    assert run.data.tags["identify.pooled.primary"] == written.primary.verdict
    folder = Path(run.data.tags[RUN_DIR_TAG])
    record = PooledRecord.model_validate_json((folder / "pooled.json").read_text())
    assert record.primary.verdict == written.primary.verdict
    assert record.primary.slope.low == pytest.approx(slope.low)
    assert "pre-registered primaries, pooled" in (folder / "answer.md").read_text()
    committed = shards_root(config) / "pooled" / "pooled.json"
    assert json.loads(committed.read_text()) == written.model_dump(mode="json", exclude_unset=True)

    experiment = tracking.client().get_experiment_by_name(config.experiment)
    before = len(tracking.client().search_runs([experiment.experiment_id]))
    assert before == experiment_runs + 1  # the pooled run, and no run for the refusal
    with pytest.raises(PreregistrationError, match="the pooled primary was already scored"):
        pool_heldout(config)
    assert len(tracking.client().search_runs([experiment.experiment_id])) == before

    # the exploratory estimands: a run of their own, typed, scoring nothing
    ledger = committed_ledgers(config)[-1].read_text()
    explored = pool_exploratory(config)
    runs = tracking.client().search_runs(
        [experiment.experiment_id], "tags.`identify.pooled` = 'exploratory'"
    )
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    where = Path(runs[0].data.tags[RUN_DIR_TAG])
    typed = ExploratoryRecord.model_validate_json((where / "exploratory.json").read_text())
    assert set(typed.estimands) == set(explored.estimands)
    assert "estimand/practitioner_equal_norm" in (where / "criteria.csv").read_text()
    assert committed_ledgers(config)[-1].read_text() == ledger  # no ledger entry

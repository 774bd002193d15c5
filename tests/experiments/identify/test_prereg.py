"""The development / held-out split, the pre-registration and the held-out ledger."""

from __future__ import annotations

import pytest

from experiments.concepts import load_concepts
from experiments.identify.heldout.prereg import (
    PreregistrationError,
    check_heldout,
    load_preregistration,
    parse_primary,
    record_heldout,
    split_concepts,
)


def test_the_split_is_deterministic_disjoint_and_complete():
    synsets = [c.synset for c in load_concepts("data/concepts/wordnet_top50.json").concepts]
    dev, held = split_concepts(synsets, 0.5, 0)
    assert set(dev) | set(held) == set(synsets) and not set(dev) & set(held)
    assert len(held) == 25 and len(dev) == 25
    assert split_concepts(synsets, 0.5, 0) == (dev, held)
    assert set(split_concepts(synsets, 0.5, 1)[1]) != set(held)
    # independent of the file's order
    assert set(split_concepts(sorted(synsets), 0.5, 0)[1]) == set(held)


def test_the_primary_analysis_is_parsed_and_checked(primary):
    assert parse_primary(primary).predictor == "auroc"
    with pytest.raises(PreregistrationError, match="lacks"):
        parse_primary(primary.replace("  rule: interval excludes 0\n", ""))
    with pytest.raises(PreregistrationError, match="not one of"):
        parse_primary(primary.replace("predictor: auroc", "predictor: vibes"))
    with pytest.raises(PreregistrationError, match="no ```yaml"):
        parse_primary("# nothing here\n")
    # a key no version declares, or a value of the wrong type, is refused by name
    # (a misspelt key would otherwise read as None: no margin, and the verdict changes)
    with pytest.raises(PreregistrationError, match="equivalance_margin"):
        parse_primary(primary.replace("  rule:", "  equivalance_margin: 0.1\n  rule:"))
    with pytest.raises(PreregistrationError, match="strength"):
        parse_primary(primary.replace("strength: 1.0", "strength: strong"))


@pytest.fixture
def committed(tmp_path, git, git_repo, primary):
    repo = git_repo(tmp_path / "repo")
    path = repo / "prereg.md"
    path.write_text(primary)
    git(repo, "add", "prereg.md")
    git(repo, "commit", "-q", "-m", "prereg")
    return path


def test_an_uncommitted_preregistration_cannot_open_the_heldout_set(
    committed, tmp_path, mlflow_store, primary
):
    committed.write_text(primary + "\nedited after the commit\n")
    prereg = load_preregistration(committed)
    assert prereg.commit is None
    with pytest.raises(PreregistrationError, match="not committed"):
        check_heldout(prereg, "phase6-identify-test", tmp_path / "res", force=False)


def test_the_heldout_set_is_scored_once_per_preregistration(committed, tmp_path, mlflow_store):
    prereg = load_preregistration(committed)
    assert prereg.commit and len(prereg.sha256) == 64
    results = tmp_path / "res"
    assert check_heldout(prereg, "phase6-identify-test", results, force=False) == []
    record_heldout(results, {"run_id": "r1", "prereg_sha256": prereg.sha256, "forced": False})
    with pytest.raises(PreregistrationError, match="already scored"):
        check_heldout(prereg, "phase6-identify-test", results, force=False)
    earlier = check_heldout(prereg, "phase6-identify-test", results, force=True)
    assert [e["run_id"] for e in earlier] == ["r1"]


def test_the_committed_preregistration_names_one_primary_analysis():
    from experiments.config import load_config

    path = load_config("configs/identify.yaml").identify.preregistration
    primary = load_preregistration(path).primary
    assert primary.predictor == "auroc" and primary.hypothesis in ("positive", "negative")


def test_a_heldout_run_is_bound_to_its_config_code_and_strength(
    tmp_path, mlflow_store, git, bound_preregistration
):
    from experiments.config import load_config
    from experiments.identify.heldout.prereg import check_binding, study_hash

    config = load_config("configs/identify.yaml", ["identify.concept_set=heldout"])
    repo = tmp_path / "bound"  # code and a pre-registration bound to it and to the config
    path = bound_preregistration(repo, lambda _path: study_hash(config))
    # the development config pre-registers the same study
    dev = load_config("configs/identify.yaml")
    assert study_hash(dev) == study_hash(config)
    check_binding(load_preregistration(path), config)  # as written: allowed
    results = tmp_path / "res"
    assert check_heldout(load_preregistration(path), "x", results, False, config=config) == []

    for override in ("identify.split_seed=1", "identify.limit=3", "model=other/model"):
        moved = load_config("configs/identify.yaml", ["identify.concept_set=heldout", override])
        with pytest.raises(PreregistrationError, match="not the one the pre-registration"):
            check_binding(load_preregistration(path), moved)

    twice = load_config(
        "configs/identify.yaml", ["identify.concept_set=heldout", "identify.strengths=[0.5, 2.0]"]
    )
    prereg = load_preregistration(path)
    rebound = prereg.primary.model_copy(update={"config_hash": study_hash(twice)})
    bound_to_twice = prereg.__class__(prereg.path, prereg.sha256, rebound, prereg.commit)
    with pytest.raises(PreregistrationError, match="strength"):
        check_binding(bound_to_twice, twice)

    (repo / "experiments" / "code.py").write_text("x = 2\n")  # the code moves on
    git(repo, "commit", "-qam", "change")
    with pytest.raises(PreregistrationError, match="code changed since"):
        check_binding(load_preregistration(path), config)


def test_a_heldout_run_must_run_the_code_of_the_preregistrations_checkout(
    tmp_path, git, bound_preregistration
):
    """A checkout of the bound commit that imports another checkout's package (an editable
    install elsewhere) would pass the file comparison while running other code."""
    from experiments.config import load_config
    from experiments.identify.heldout.prereg import check_binding, study_hash

    config = load_config("configs/identify.yaml", ["identify.concept_set=heldout"])
    repo = tmp_path / "bound"
    path = bound_preregistration(repo, lambda _path: study_hash(config))
    (repo / "experiments" / "__init__.py").write_text("")  # a package of its own
    git(repo, "add", "experiments")
    git(repo, "commit", "-qm", "package")
    with pytest.raises(PreregistrationError, match=r"runs the code in .*PYTHONPATH"):
        check_binding(load_preregistration(path), config)


def test_an_unbound_preregistration_cannot_open_the_heldout_set(committed, tmp_path, mlflow_store):
    from experiments.config import load_config

    config = load_config("configs/identify.yaml", ["identify.concept_set=heldout"])
    with pytest.raises(PreregistrationError, match="names no config_hash and no code_commit"):
        check_heldout(load_preregistration(committed), "x", tmp_path / "r", False, config=config)


def test_every_key_of_the_primary_is_checked(primary):
    with pytest.raises(PreregistrationError, match="outcome"):
        parse_primary(primary.replace("outcome: likelihood", "outcome: vibes"))
    with pytest.raises(PreregistrationError, match="estimator"):
        parse_primary(primary.replace("  rule:", "  estimator: magic\n  rule:"))
    with pytest.raises(PreregistrationError, match="flexible_cos"):
        parse_primary(primary.replace("predictor: auroc", "predictor: probit_auroc"))
    flexible = primary.replace("predictor: auroc", "predictor: probit_auroc").replace(
        "  rule:", "  estimator: flexible_cos\n  rule:"
    )
    assert parse_primary(flexible).estimator == "flexible_cos"


def test_the_record_takes_every_estimator_a_preregistration_may_name():
    from typing import get_args

    from experiments.identify.heldout.prereg import ESTIMATORS
    from experiments.record import PrimaryResult

    assert get_args(PrimaryResult.model_fields["estimator"].annotation) == ESTIMATORS


def test_the_practitioner_estimator_is_bare(primary):
    practitioner = primary.replace("  rule:", "  estimator: practitioner\n  rule:")
    with pytest.raises(PreregistrationError, match="practitioner is bare"):
        parse_primary(practitioner)  # the fixture's primary holds cos_ref
    bare = practitioner.replace("control: cos_ref", "control: none")
    assert parse_primary(bare).estimator == "practitioner"


def test_the_flexible_estimator_may_hold_the_dose_and_nothing_unknown(primary):
    flexible = primary.replace("  rule:", "  estimator: flexible_cos\n  rule:")
    dosed = flexible.replace("control: cos_ref", "control: [cos_ref, log_kl]")
    assert parse_primary(dosed).control == ["cos_ref", "log_kl"]
    with pytest.raises(PreregistrationError, match="log_kl; got"):
        parse_primary(flexible.replace("control: cos_ref", "control: [cos_ref, lens]"))
    with pytest.raises(PreregistrationError, match="takes control cos_ref"):
        parse_primary(flexible.replace("control: cos_ref", "control: log_kl"))


def test_the_study_hash_is_the_same_for_the_config_a_run_stores():
    """A run stores its config with the set's concepts filled in (``with_concepts``); a
    resume reads that config back, and it must bind as the config the run started with."""
    from experiments.config import load_config
    from experiments.identify.heldout.prereg import study_hash
    from experiments.identify.study import with_concepts

    config = load_config("configs/identify.yaml", ["identify.concept_set=heldout"])
    stored, _ = with_concepts(config)
    assert stored.concepts.synsets and config.concepts.synsets is None
    assert stored.config_hash() != config.config_hash()
    assert study_hash(stored) == study_hash(config)


def test_a_resume_is_held_to_the_binding_a_new_run_is(
    tmp_path, mlflow_store, git, bound_preregistration
):
    from experiments.config import load_config
    from experiments.identify.heldout.prereg import check_resume, study_hash

    config = load_config("configs/identify.yaml", ["identify.concept_set=heldout"])
    repo = tmp_path / "bound"  # code and a pre-registration bound to it and to the config
    path = bound_preregistration(repo, lambda _path: study_hash(config))
    prereg = load_preregistration(path)
    # unchanged: allowed, and the binding it was checked against comes back
    checked = check_resume(prereg, config, "r1", prereg.sha256)
    code_commit = prereg.primary.code_commit
    assert checked == {"config_hash": study_hash(config), "code_commit": code_commit}

    path.write_text(path.read_text() + "\nedited after the run started\n")
    with pytest.raises(PreregistrationError, match=r"cannot resume held-out run r1: .* changed"):
        check_resume(load_preregistration(path), config, "r1", prereg.sha256)
    git(repo, "checkout", "--", "prereg.md")

    # a deviation appended after the marker line is not an edit of what was registered
    from experiments.identify.heldout.prereg import DEVIATIONS_MARKER

    with path.open("ab") as f:
        f.write(DEVIATIONS_MARKER + b"\n\n1. **A deviation**, written when it happened.\n")
    git(repo, "commit", "-qam", "a deviation")
    assert load_preregistration(path).sha256 == prereg.sha256
    assert check_resume(load_preregistration(path), config, "r1", prereg.sha256) == checked

    moved = load_config("configs/identify.yaml", ["identify.concept_set=heldout", "seed=7"])
    with pytest.raises(PreregistrationError, match=r"r1: this run's config .* not the one"):
        check_resume(load_preregistration(path), moved, "r1", prereg.sha256)

    (repo / "experiments" / "code.py").write_text("x = 2\n")  # the code moves on
    git(repo, "commit", "-qam", "change")
    with pytest.raises(PreregistrationError, match="r1: the code changed since code_commit"):
        check_resume(load_preregistration(path), config, "r1", prereg.sha256)


def test_the_ledger_is_mirrored_to_its_run_and_written_locally_first(tmp_path, mlflow_store):
    import json

    from experiments import tracking
    from experiments.identify.heldout.prereg import LEDGER, mirror_ledger, run_ledger

    results = tmp_path / "res"
    with tracking.tracked_run("phase6-identify-ledger", "held-out") as run_id:
        record_heldout(results, {"run_id": run_id, "status": "started", "forced": False})
    record_heldout(results, {"run_id": "other", "status": "started", "forced": True})
    record_heldout(results, {"run_id": run_id, "status": "scored", "forced": False})  # finished
    mine = run_ledger(results, run_id)
    assert [e["status"] for e in mine] == ["started", "scored"]
    tags = tracking.get_run(run_id).data.tags
    assert json.loads(tags["steer_eval.ledger.started"]) == mine[0]
    assert json.loads(tags["steer_eval.ledger.scored"]) == mine[1]
    assert tracking.get_run(run_id).info.status == "FINISHED"  # tagged, not reopened
    local = tmp_path / "ledger.jsonl"
    tracking.client().download_artifacts(run_id, "ledger.jsonl", str(tmp_path))
    assert [json.loads(line) for line in local.read_text().splitlines()] == mine

    # MLflow fails (no such run): the local line is written all the same
    record_heldout(results, {"run_id": "no-such-run", "status": "started", "forced": False})
    assert run_ledger(results, "no-such-run") and (results / LEDGER).exists()
    assert mirror_ledger("no-such-run", results) is False


def test_v3s_deviations_leave_the_sha256_its_shards_were_scored_under():
    """The committed v3 pre-registration lists its deviations after the marker; what was
    registered, and the sha256 every shard's ledger line carries, is unchanged."""
    import json
    from pathlib import Path

    from experiments.identify.heldout.prereg import DEVIATIONS_MARKER

    path = Path("docs/preregistration-identify-v3.md")
    assert DEVIATIONS_MARKER in path.read_bytes()
    ledger = Path("results-heldout/phase6-identify-v3/shard-0/heldout_ledger.jsonl")
    scored = json.loads(ledger.read_text().splitlines()[0])["prereg_sha256"]
    assert load_preregistration(path).sha256 == scored


def test_a_listed_run_takes_exactly_its_concepts_and_held_out_ones_only_after_the_pool(
    tmp_path,
):
    """``identify.concept_set: listed`` runs concepts.synsets as given; unknown or no
    concepts are refused; held-out concepts only once their pre-registration's pool is
    scored (a ``pooled`` ledger entry under identify.shards_dir)."""
    import json

    from experiments.config import ConfigError, load_config
    from experiments.identify.heldout.prereg import LEDGER, check_listed
    from experiments.identify.study import concept_sets, with_concepts

    base = load_config("configs/identify.yaml")
    sets = concept_sets(base)
    dev, held = sets["development"][:2], sets["heldout"][:1]

    def listed(names, *extra):
        return load_config(
            "configs/identify.yaml",
            ["identify.concept_set=listed", f"concepts.synsets={json.dumps(names)}",
             f"identify.shards_dir={tmp_path}", f"identify.results_dir={tmp_path / 'r'}",
             *extra],
        )  # fmt: skip

    config, _ = with_concepts(listed([*held, *dev]))
    assert config.concepts.synsets == [*held, *dev]
    with pytest.raises(ConfigError, match="not in"):
        with_concepts(listed(["no_such.n.01", *dev]))
    with pytest.raises(ConfigError, match="names none"):
        with_concepts(listed([]))

    prereg = load_preregistration("docs/preregistration-identify-v3.md")
    check_listed(prereg, listed(dev), sets["heldout"])  # development only: no question
    with pytest.raises(PreregistrationError, match="not pooled and scored yet"):
        check_listed(prereg, config, sets["heldout"])
    with pytest.raises(PreregistrationError, match="names no pre-registration"):
        check_listed(None, config, sets["heldout"])
    pooled = tmp_path / "some-study" / "pooled"
    pooled.mkdir(parents=True)
    entry = {"prereg_sha256": prereg.sha256, "status": "pooled"}
    (pooled / LEDGER).write_text(json.dumps({**entry, "prereg_sha256": "other"}) + "\n")
    with pytest.raises(PreregistrationError):  # another pre-registration's pool
        check_listed(prereg, config, sets["heldout"])
    (pooled / LEDGER).write_text(json.dumps(entry) + "\n")
    check_listed(prereg, config, sets["heldout"])


def test_an_offset_takes_the_rest_of_a_set_and_is_part_of_the_study():
    """``identify.offset`` (v4 after v3's first 300): the set from its N+1th concept,
    before limit and shards, and a different study hash than the set from its start."""
    from experiments.config import load_config
    from experiments.identify.heldout.prereg import study_hash
    from experiments.identify.study import concept_sets, with_concepts

    base = load_config("configs/identify.yaml", ["identify.concept_set=heldout"])
    held = concept_sets(base)["heldout"]
    later = load_config(
        "configs/identify.yaml",
        ["identify.concept_set=heldout", "identify.offset=2", "identify.limit=2"],
    )
    assert with_concepts(later)[0].concepts.synsets == held[2:4]
    assert study_hash(later) != study_hash(
        load_config("configs/identify.yaml", ["identify.concept_set=heldout", "identify.limit=2"])
    )
    assert (
        base.config_hash()
        == load_config(
            "configs/identify.yaml", ["identify.concept_set=heldout", "identify.offset=0"]
        ).config_hash()
    )

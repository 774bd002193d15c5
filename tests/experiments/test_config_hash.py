"""A config per phase, and every config hash as it was when the phases shared one config.

The hashes below were computed on the shared ``ExperimentConfig`` (commit 78e0cf1, before
the split): the shipped configs, the defaults, the ``--quick`` settings (then tuples of
``--set`` strings, now ``configs/quick/*.yaml``) and a few ``--set`` variants. Run folders
of then (``tests/experiments/old_layout/``: ``dump_config`` of the shipped configs at that
commit, every phase's sections in each) still load, as the phase the command asks for.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.calibration import QUICK as CALIBRATE_QUICK
from experiments.config import (
    EXCLUDE,
    PHASE_MODELS,
    CalibrationStudyConfig,
    ConfigError,
    IdentifyStudyConfig,
    Phase5Config,
    RunConfig,
    dump_config,
    hash_rule,
    load_config,
)
from experiments.identify import QUICK as IDENTIFY_QUICK
from experiments.record import RunRecord

REPO = Path(__file__).resolve().parents[2]
OLD = Path(__file__).resolve().parent / "old_layout"

# (config, phase, overlays, overrides) -> the hash at 78e0cf1
BEFORE = [
    (None, "phase5", [], [], "82089757814d"),
    (None, "calibration", [], [], "82089757814d"),
    (None, "identify", [], [], "82089757814d"),
    (None, "phase5", [], ["model_load_format=dummy"], "281d44a3c4e5"),
    (None, "identify", [], ["identify.limit=4"], "bfb94a83711b"),
    (None, "calibration", [], ["calibration.sizes=['1x1x1']"], "2979147f25fa"),
    (
        None,
        "phase5",
        [],
        ["tracking.results_dir=/x", "execution.workers=5", "classifier.dir=/y"],
        "82089757814d",
    ),
    (None, "phase5", [], ["generation.max_new_tokens=20"], "2b5f36b22248"),
    ("configs/phase5.yaml", None, [], [], "34dcba3ad5cd"),
    ("configs/phase5.yaml", None, [], ["model_load_format=dummy"], "250e6b10886d"),
    ("configs/phase6.yaml", None, [], [], "ab2a881bca86"),
    ("configs/phase6.yaml", None, [], ["model_load_format=dummy"], "201e3797029c"),
    ("configs/study.yaml", None, [], [], "dbafbcef9d60"),
    ("configs/study.yaml", None, [], ["model_load_format=dummy"], "76310efbf228"),
    ("configs/identify.yaml", None, [], [], "17d0b4b249c6"),
    ("configs/identify.yaml", None, [], ["model_load_format=dummy"], "d9766cd84675"),
    ("configs/gemma-3-4b.yaml", None, [], [], "838870ad9e19"),
    ("configs/gemma-3-4b.yaml", None, [], ["model_load_format=dummy"], "6c5cec5d71b2"),
    ("configs/phase6.yaml", "calibration", [CALIBRATE_QUICK], [], "1be9ca8f895b"),
    (
        "configs/phase6.yaml",
        "calibration",
        [CALIBRATE_QUICK],
        ["calibration.results_dir=/tmp/r"],
        "1be9ca8f895b",
    ),
    ("configs/identify.yaml", "identify", [IDENTIFY_QUICK], [], "25194568e0bb"),
    (
        "configs/identify.yaml",
        "identify",
        [IDENTIFY_QUICK],
        ["identify.concept_set=heldout"],
        "3673cc04d3a5",
    ),
    ("configs/identify.yaml", None, [], ["identify.limit=4"], "b627241c386d"),
]


@pytest.mark.parametrize(("path", "phase", "overlays", "overrides", "expected"), BEFORE)
def test_every_config_hash_is_the_one_of_the_shared_config(
    path, phase, overlays, overrides, expected
):
    config = load_config(REPO / path if path else None, overrides, phase, overlays)
    assert config.config_hash() == expected


@pytest.mark.parametrize(
    ("name", "phase", "cls", "expected"),
    [
        ("phase5", None, Phase5Config, "34dcba3ad5cd"),
        ("phase6", "calibration", CalibrationStudyConfig, "ab2a881bca86"),
        ("identify", "identify", IdentifyStudyConfig, "17d0b4b249c6"),
    ],
)
def test_an_old_run_folder_config_loads_as_the_commands_phase_with_its_hash(
    name, phase, cls, expected
):
    """Old config.yaml files carry every phase's sections and no ``phase:``."""
    old = OLD / f"{name}.yaml"
    assert "calibration:" in old.read_text() and "identify:" in old.read_text()
    config = load_config(old, phase=phase)
    assert type(config) is cls
    assert config.config_hash() == expected
    # what the phase reads is what the shipped config says
    shipped = load_config(REPO / "configs" / f"{name}.yaml")
    assert config == shipped


def test_an_old_run_record_still_parses(tmp_path):
    """steering_results.json of old runs holds the full old layout in ``config``."""
    import yaml

    record = RunRecord(
        run_id="r",
        experiment="phase5-semantic-steering",
        config=load_config(REPO / "configs/phase5.yaml"),
        model_id="m",
        layer=9,
        alpha=1.0,
        beta=0.2,
    )
    data = json.loads(record.model_dump_json())
    data["config"] = yaml.safe_load((OLD / "phase5.yaml").read_text())
    again = RunRecord.parse(json.dumps(data))
    assert again.config == record.config
    assert again.config.config_hash() == "34dcba3ad5cd"


def test_each_phase_model_adds_only_its_own_section():
    shared = set(RunConfig.model_fields)
    assert set(Phase5Config.model_fields) == shared
    assert set(CalibrationStudyConfig.model_fields) - shared == {"calibration"}
    assert set(IdentifyStudyConfig.model_fields) - shared == {"identify"}
    assert "experiment" not in RunConfig.model_fields["tracking"].annotation.model_fields
    for phase, cls in PHASE_MODELS.items():
        config = cls()
        assert config.phase == phase
        assert hash_rule(cls.model_fields["phase"]) == EXCLUDE
    assert Phase5Config().experiment == "phase5-semantic-steering"
    assert Phase5Config().results_dir == "results/phase5"
    assert CalibrationStudyConfig().experiment == "phase6-calibration"
    assert CalibrationStudyConfig().results_dir == "results/phase6"
    assert IdentifyStudyConfig().experiment == "phase6-identify"
    assert IdentifyStudyConfig().results_dir == "results/identify"


@pytest.mark.parametrize(
    ("name", "phase"),
    [
        ("phase5", "phase5"),
        ("study", "phase5"),
        ("gemma-3-4b", "phase5"),
        ("phase6", "calibration"),
        ("identify", "identify"),
    ],
)
def test_every_shipped_config_names_its_phase_and_dumps_it(name, phase, tmp_path):
    config = load_config(REPO / "configs" / f"{name}.yaml")
    assert config.phase == phase and type(config) is PHASE_MODELS[phase]
    path = tmp_path / "config.yaml"
    path.write_text(dump_config(config))
    assert dump_config(config).startswith(f"phase: {phase}\n")
    assert load_config(path) == config


def test_a_config_of_another_phase_is_refused_naming_the_file_the_field_and_the_fix():
    with pytest.raises(ConfigError) as info:
        load_config(REPO / "configs/phase6.yaml", phase="phase5")
    message = str(info.value)
    assert "phase6.yaml" in message and "phase: calibration" in message
    assert "configs/phase5.yaml" in message


@pytest.mark.parametrize(
    ("path", "override", "hint"),
    [
        ("configs/phase5.yaml", "calibration.sizes=[1x1x1]", "calibration setting"),
        ("configs/phase5.yaml", "identify.limit=4", "identify setting"),
        ("configs/phase6.yaml", "identify.limit=4", "identify setting"),
        ("configs/phase6.yaml", "tracking.results_dir=/x", "calibration.results_dir"),
        ("configs/identify.yaml", "tracking.experiment=x", "identify.experiment"),
    ],
)
def test_a_setting_of_another_phase_is_refused_by_name(path, override, hint):
    with pytest.raises(ConfigError) as info:
        load_config(REPO / path, [override])
    assert hint in str(info.value)


def test_a_quick_overlay_is_for_its_own_phase_only():
    with pytest.raises(ConfigError, match=r"calibrate\.yaml"):
        load_config(REPO / "configs/phase5.yaml", overlays=[CALIBRATE_QUICK])
    quick = load_config(REPO / "configs/phase6.yaml", overlays=[CALIBRATE_QUICK])
    assert quick.concepts.limit == 3 and quick.calibration.sizes == ["1x1x1", "2x2x2"]
    assert quick.generation.prompts == load_config(REPO / "configs/phase6.yaml").generation.prompts
    ident = load_config(
        REPO / "configs/identify.yaml", ["identify.limit=2"], None, [IDENTIFY_QUICK]
    )
    assert ident.identify.limit == 2  # --set after the overlay, as after the old tuple
    assert ident.identify.theta_degrees == [0.0, 45.0, 90.0]


@pytest.mark.parametrize(
    ("name", "phase", "cls"),
    [
        ("phase5", None, Phase5Config),
        ("phase6", "calibration", CalibrationStudyConfig),
        ("identify", "identify", IdentifyStudyConfig),
    ],
)
def test_an_old_run_folder_resumes_and_rescores_as_its_commands_phase(tmp_path, name, phase, cls):
    from experiments.kernel.lifecycle import scoring_config
    from experiments.rundir import RunDir

    run_dir = RunDir(tmp_path, "old").create()
    run_dir.file(RunDir.CONFIG).write_text((OLD / f"{name}.yaml").read_text())
    assert type(run_dir.load_config(phase)) is cls
    config = scoring_config(run_dir, ["criteria.n_boot=300"], "rescore", phase)
    assert type(config) is cls and config.criteria.n_boot == 300
    # a new run folder's config names its phase: another command's is refused
    run_dir.write_config(load_config(REPO / "configs" / f"{name}.yaml"))
    other = "identify" if phase != "identify" else "calibration"
    with pytest.raises(ConfigError, match="phase: "):
        run_dir.load_config(other)


def test_a_quick_overlay_leaves_an_old_layout_as_it_is(tmp_path):
    """--quick over a config without phase: (a copy of an old run's) reads it as before."""
    quick = load_config(OLD / "phase6.yaml", [], "calibration", [CALIBRATE_QUICK])
    assert quick.config_hash() == "1be9ca8f895b"


def test_the_likelihood_outcome_has_one_section_and_its_old_spelling_still_reads():
    """identify once kept its own copy of the likelihood settings (``identify.prefix``,
    ``texts_per_concept``, ``batch_size``); they live in ``likelihood`` now. The old
    spelling (old run folders, a ``--set``) moves over, every hash stays as it was (the
    bound v3 study's among them), and two different values at both places are refused."""
    moved = load_config(REPO / "configs/identify.yaml", ["identify.texts_per_concept=4"])
    new = load_config(REPO / "configs/identify.yaml", ["likelihood.texts=4"])
    assert moved == new and moved.likelihood.texts == 4
    assert (
        "texts_per_concept"
        not in IdentifyStudyConfig.model_fields["identify"].annotation.model_fields
    )
    # the hash a config had while identify read identify.texts_per_concept
    quick = load_config(REPO / "configs/identify.yaml", [], "identify", [IDENTIFY_QUICK])
    assert quick.likelihood.texts == 4 and quick.config_hash() == "25194568e0bb"
    assert new.config_hash() != load_config(REPO / "configs/identify.yaml").config_hash()
    from experiments.identify.heldout.prereg import study_hash

    assert study_hash(load_config(REPO / "configs/identify-v3.yaml")) == "3315d42f7734"
    # a prefix given both ways, differently: refused, naming both places
    with pytest.raises(ConfigError, match=r"identify\.prefix and likelihood\.prefix disagree"):
        load_config(REPO / "configs/identify.yaml", ["identify.prefix=A:", "likelihood.prefix=B:"])
    # Phase 5 has no such move: the old spelling is another phase's setting there
    with pytest.raises(ConfigError):
        load_config(REPO / "configs/phase5.yaml", ["identify.prefix=A:"])

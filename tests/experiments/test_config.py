"""experiments.config: the committed seed config, validation messages, overrides, hashing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.config import (
    ConfigError,
    Phase5Config,
    apply_overrides,
    dump_config,
    load_config,
    parse_override,
)

REPO = Path(__file__).resolve().parents[2]
PHASE5 = REPO / "configs" / "phase5.yaml"
PHASE6 = REPO / "configs" / "phase6.yaml"
PROPS = settings(derandomize=True, deadline=None, max_examples=50)


def config_of(override: str):
    """The shipped config an override applies to: calibration.* is the study's section."""
    return PHASE6 if override.startswith("calibration.") else PHASE5


def config_error(overrides: list[str], path=PHASE5) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return str(info.value)


# ---------------------------------------------------------------------------- the seed config


def test_committed_phase5_config_encodes_the_seed_design():
    cfg = load_config(PHASE5)
    assert cfg.name == "phase5"
    assert cfg.seed == 0
    assert cfg.model == "embedded"
    assert cfg.layer is None  # the middle layer
    # 10 WordNet concepts
    assert cfg.concepts.limit == 10
    concepts = json.loads((REPO / cfg.concepts.file).read_text())["concepts"]
    assert len(concepts) == 10
    # 1x1x1 classifiers
    assert cfg.classifier.train == "1x1x1"
    # 3 neutral prompts, one naming the concept
    assert cfg.generation.prompts == [
        "Tell me about {concept}.",
        "Tell me about something.",
        "Here is a story:",
    ]
    assert cfg.steering.strengths == [-1.0, 0.0, 1.0]
    assert cfg.steering.mode == "additive"
    assert cfg.steering.beta == 0.2
    assert cfg.generation.max_new_tokens == 50
    assert cfg.generation.temperature == 1.0
    assert cfg.generation.top_p == 0.95
    assert cfg.generation.greedy is False
    assert cfg.centroids.texts_per_centroid == 5
    assert cfg.embedding.model == "embedded"  # the packaged all-MiniLM-L6-v2
    assert cfg.metrics.delta_threshold == 0.15
    # the seed's four success criteria
    assert cfg.criteria.direction_min_fraction == 0.8
    assert cfg.criteria.magnitude_min == 0.15
    assert cfg.criteria.magnitude_at == 1.0
    assert cfg.criteria.f1_r_min == 0.5
    assert cfg.criteria.predictor == "f1_calibrated"  # F1 at a validation-chosen threshold
    assert cfg.criteria.human_r_pass == 0.7


def test_committed_config_matches_the_defaults_except_the_concept_limit():
    defaults = load_config(None)
    seed = load_config(PHASE5)
    assert seed.model_copy(update={"concepts": defaults.concepts}) == defaults
    assert seed.concepts.limit == 10 and defaults.concepts.limit is None


def test_dump_and_reload_round_trip(tmp_path):
    cfg = load_config(PHASE5, ["generation.max_new_tokens=7", "steering.mode=projection"])
    path = tmp_path / "dumped.yaml"
    path.write_text(dump_config(cfg))
    again = load_config(path)
    assert again == cfg
    assert again.config_hash() == cfg.config_hash()


def test_flat_gives_dotted_keys():
    flat = load_config(PHASE5).flat()
    assert flat["generation.max_new_tokens"] == 50
    assert flat["steering.strengths"] == [-1.0, 0.0, 1.0]
    assert flat["criteria.magnitude_min"] == 0.15
    assert flat["seed"] == 0
    assert not any(isinstance(v, dict) for v in flat.values())


# ---------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("override", "field", "hint"),
    [
        ("generation.top_p=2", "generation.top_p", "must be at most 1"),
        ("generation.top_p=0", "generation.top_p", "must be greater than 0"),
        ("generation.max_new_tokens=0", "generation.max_new_tokens", "must be at least 1"),
        ("generation.max_new_tokens=abc", "generation.max_new_tokens", "'abc'"),
        ("generation.temperature=-1", "generation.temperature", "must be greater than 0"),
        ("generation.prompts=[]", "generation.prompts", "give at least 1 values"),
        ("steering.strengths=[-1.0, 1.0]", "steering.strengths", "must include 0.0"),
        ("steering.strengths=[0.0, 1.0, 1.0]", "steering.strengths", "must not repeat"),
        ("steering.strengths=[0.0]", "steering.strengths", "give at least 2 values (got [0.0])"),
        ("steering.mode=subtract", "steering.mode", "'additive' or 'projection'"),
        ("steering.beta=0", "steering.beta", "must be greater than 0"),
        ("steering.vector_source=random", "steering.vector_source", "'classifier'"),
        ("steering.vector_source=random", "steering.vector_source", "'classifier_deformat'"),
        ("criteria.predictor=f1", "criteria.predictor", "'f1_calibrated'"),
        ("classifier.train=1x1", "classifier.train", "PxNxU"),
        ("classifier.train=0x1x1", "classifier.train", "PxNxU"),
        ("classifier.c=0", "classifier.c", "must be greater than 0"),
        ("concepts.limit=0", "concepts.limit", "must be at least 1 (got 0)"),
        ("criteria.f1_r_min=1.5", "criteria.f1_r_min", "must be at most 1"),
        ("seed=[1]", "seed", "valid integer"),
        ("generation=3", "generation", "valid dictionary"),
    ],
)
def test_invalid_values_name_the_dotted_field(override, field, hint):
    message = config_error([override])
    assert message.startswith(f"invalid configuration in {PHASE5}")
    assert f"  - {field}: " in message
    assert hint in message
    assert f"(from --set {override})" in message  # the command line, not the YAML, set it
    assert len(message.splitlines()) == 2  # one line per bad field


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("generation.max_tokens=20", "generation.max_tokens"),
        ("steering.strenghts=[0, 1]", "steering.strenghts"),
        ("bogus=1", "bogus"),
        ("criteria.new.deep=1", "criteria.new"),
    ],
)
def test_unknown_keys_are_rejected_by_name(override, field):
    message = config_error([override])
    assert f"  - {field}: unknown " in message
    assert "configs/phase5.yaml" in message


@pytest.mark.parametrize(
    ("override", "meant"),
    [
        ("steering.strenghts=[0, 1]", "steering.strengths"),
        ("generation.temprature=0.5", "generation.temperature"),
        ("sed=1", "seed"),
    ],
)
def test_a_misspelt_set_key_gets_a_did_you_mean_and_names_the_command_line(override, meant):
    message = config_error([override])
    assert "unknown --set key" in message and f"(did you mean {meant}?)" in message
    assert f"(from --set {override})" in message


def test_a_key_unlike_any_gets_no_guess():
    assert "did you mean" not in config_error(["bogus=1"])


def test_unknown_keys_in_a_yaml_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("generation:\n  max_new_tokens: 20\n  tempreature: 0.7\n")
    message = config_error([], path)
    assert str(path) in message
    assert "generation.tempreature: unknown key (did you mean generation.temperature?)" in message
    assert "--set" not in message  # the file set it


def test_every_error_is_listed(tmp_path):
    message = config_error(["generation.top_p=2", "generation.max_new_tokens=0", "steering.x=1"])
    for field in ("generation.top_p", "generation.max_new_tokens", "steering.x"):
        assert f"  - {field}: " in message


def test_bad_device_names_the_field():
    message = config_error(["device=tpu"])
    assert "  - device: " in message


def test_bad_device_is_rejected():
    message = config_error(["device=tpu"])
    assert "device 'tpu' is not auto, cpu, cuda or cuda:N" in message
    assert load_config(PHASE5, ["device=cuda:1"]).device == "cuda:1"


def test_strengths_are_sorted_and_coerced():
    cfg = load_config(PHASE5, ["steering.strengths=[1, 0, -0.5]"])
    assert cfg.steering.strengths == [-0.5, 0.0, 1.0]
    assert all(isinstance(s, float) for s in cfg.steering.strengths)


def test_assignment_is_validated_too():
    cfg = load_config(PHASE5)
    with pytest.raises(ValueError, match=r"must include 0\.0"):
        cfg.steering.strengths = [1.0, -1.0]


# ---------------------------------------------------------------------------- overrides


@pytest.mark.parametrize(
    ("text", "path", "value"),
    [
        ("generation.max_new_tokens=20", ["generation", "max_new_tokens"], 20),
        ("steering.strengths=[-0.5, 0, 0.5]", ["steering", "strengths"], [-0.5, 0, 0.5]),
        (
            "generation.prompts=['a {concept}', 'b']",
            ["generation", "prompts"],
            ["a {concept}", "b"],
        ),
        ("generation.greedy=true", ["generation", "greedy"], True),
        ("layer=null", ["layer"], None),
        ("layer=", ["layer"], None),
        (" seed = 3 ", ["seed"], 3),
        ("name=a=b", ["name"], "a=b"),
        ("concepts.synsets=[dog.n.01]", ["concepts", "synsets"], ["dog.n.01"]),
        ("a..b=1", ["a", "b"], 1),
    ],
)
def test_parse_override(text, path, value):
    assert parse_override(text) == (path, value)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("generation.max_new_tokens", "must look like key.path=value"),
        ("=3", "empty key"),
        ("...=3", "empty key"),
        ("steering.strengths=[1, 0", "not valid YAML"),
    ],
)
def test_malformed_overrides(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_override(text)
    with pytest.raises(ConfigError, match=match):
        load_config(PHASE5, [text])


def test_apply_overrides_nested_and_new_sections():
    data = {"generation": {"max_new_tokens": 50, "top_p": 0.95}, "name": "x"}
    out = apply_overrides(
        data,
        [
            "generation.max_new_tokens=10",
            "criteria.magnitude_min=0.2",
            "steering.strengths=[-2, 0, 2]",
            "generation.max_new_tokens=11",  # later overrides win
        ],
    )
    assert out == {
        "generation": {"max_new_tokens": 11, "top_p": 0.95},
        "name": "x",
        "criteria": {"magnitude_min": 0.2},
        "steering": {"strengths": [-2, 0, 2]},
    }
    with pytest.raises(ConfigError, match="name is not a section"):
        apply_overrides(data, ["name.first=1"])


def test_overrides_reach_the_validated_config():
    cfg = load_config(
        PHASE5,
        [
            "generation.max_new_tokens=20",
            "steering.strengths=[-0.5, 0.0, 0.5]",
            "generation.prompts=['Write about {concept}.']",
            "concepts.limit=3",
            "layer=-1",
        ],
    )
    assert cfg.generation.max_new_tokens == 20
    assert cfg.steering.strengths == [-0.5, 0.0, 0.5]
    assert cfg.generation.prompts == ["Write about {concept}."]
    assert cfg.concepts.limit == 3
    assert cfg.layer == -1
    assert cfg.generation.top_p == 0.95  # untouched fields keep the file's values


# ---------------------------------------------------------------------------- files


def test_missing_file(tmp_path):
    message = config_error([], tmp_path / "absent.yaml")
    assert "cannot read config" in message and "absent.yaml" in message


def test_directory_instead_of_a_file(tmp_path):
    assert "cannot read config" in config_error([], tmp_path)


def test_invalid_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("generation:\n  prompts: [unclosed\n")
    assert "is not valid YAML" in config_error([], path)


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "42\n"])
def test_yaml_that_is_not_a_mapping(tmp_path, text):
    path = tmp_path / "list.yaml"
    path.write_text(text)
    assert "must be a mapping of sections" in config_error([], path)


def test_empty_file_gives_the_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing here\n")
    assert load_config(path) == load_config(None) == Phase5Config()


# ---------------------------------------------------------------------------- hashing


def test_config_hash_is_stable_and_short():
    first = load_config(PHASE5).config_hash()
    assert first == load_config(PHASE5).config_hash()
    assert len(first) == 12
    int(first, 16)
    # the order strengths are written in does not matter (they are sorted)
    assert load_config(PHASE5, ["steering.strengths=[1, 0, -1]"]).config_hash() == first


@pytest.mark.parametrize(
    "override",
    [
        "seed=1",
        "generation.max_new_tokens=49",
        "generation.top_p=0.9",
        "steering.strengths=[-1, 0, 0.5]",
        "steering.mode=projection",
        "criteria.magnitude_min=0.16",
        "concepts.limit=9",
        "layer=9",
    ],
)
def test_config_hash_changes_with_any_field(override):
    assert load_config(PHASE5, [override]).config_hash() != load_config(PHASE5).config_hash()


@PROPS
@given(
    tokens=st.integers(1, 4096),
    top_p=st.floats(0.01, 1.0),
    beta=st.floats(0.01, 5.0),
)
def test_config_hash_is_a_function_of_the_values(tokens, top_p, beta):
    overrides = [
        f"generation.max_new_tokens={tokens}",
        f"generation.top_p={top_p!r}",
        f"steering.beta={beta!r}",
    ]
    a = load_config(None, overrides)
    b = Phase5Config.model_validate(yaml.safe_load(dump_config(a)))
    assert a.config_hash() == b.config_hash()
    bumped = load_config(None, [*overrides[:-1], f"steering.beta={beta * 1.5!r}"])
    assert bumped.config_hash() != a.config_hash()


@pytest.mark.parametrize("source", ["classifier", "diffmean", "classifier_deformat"])
def test_every_registered_direction_source_is_a_valid_vector_source(source):
    assert load_config(PHASE5, [f"steering.vector_source={source}"]).steering.vector_source == (
        source
    )


@pytest.mark.parametrize("predictor", ["f1_calibrated", "f1_raw", "auroc", "ap"])
def test_every_predictor_is_a_valid_criterion_3_predictor(predictor):
    assert load_config(PHASE5, [f"criteria.predictor={predictor}"]).criteria.predictor == predictor


def test_the_study_config_is_valid_and_powered():
    cfg = load_config("configs/study.yaml")
    assert cfg.concepts.limit >= 50 and len(cfg.generation.prompts) >= 6
    assert cfg.generation.samples_per_prompt >= 2
    assert cfg.selection.mode == "heldout" and cfg.controls.random_directions >= 1
    assert not any("{concept}" in p for p in cfg.generation.prompts)
    # suppression is scored on prompts that name the concept; the likelihood outcome is on
    assert all("{concept}" in p for p in cfg.generation.suppression_prompts)
    assert cfg.likelihood.enabled and cfg.likelihood.neutral_nulls + cfg.likelihood.other_nulls >= 4


def test_heldout_selection_needs_two_prompts():
    with pytest.raises(ConfigError, match="at least 2 prompts"):
        load_config(None, ["selection.mode=heldout", "generation.prompts=['Hello']"])


def test_new_sections_reject_impossible_values():
    with pytest.raises(ConfigError, match=r"selection\.beta_grid"):
        load_config(None, ["selection.beta_grid=[0.1, -0.2]"])
    with pytest.raises(ConfigError, match=r"controls\.prompt_positive"):
        load_config(None, ["controls.prompt_positive=Write something."])
    with pytest.raises(ConfigError, match=r"gate\.perplexity_multiple"):
        load_config(None, ["gate.perplexity_multiple=0.5"])


@pytest.mark.parametrize(
    ("override", "field"),
    [("classifier.train=17x1x1", "classifier.train"), ("calibration.sizes=[20x20x20]", "sizes")],
)
def test_a_training_size_beyond_the_template_pool_is_refused_before_any_work(override, field):
    """Phase 6 used to crash 25 minutes in, at its 20x20x20 probe set."""
    from experiments.prompts import max_train_texts

    with pytest.raises(ConfigError, match=f"{field}.*use at most {max_train_texts()}x"):
        load_config("configs/phase6.yaml", [override])
    assert (
        max(
            int(n)
            for s in load_config("configs/phase6.yaml").calibration.sizes
            for n in s.split("x")
        )
        <= max_train_texts()
    )


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("steering.beta=.inf", "steering.beta"),
        ("steering.beta=.nan", "steering.beta"),
        ("steering.strengths=[-.inf, 0, 1]", "steering.strengths.0"),
        ("generation.temperature=.inf", "generation.temperature"),
        ("gate.perplexity_multiple=.inf", "gate.perplexity_multiple"),
        ("gate.effect_reference=.nan", "gate.effect_reference"),
        ("selection.beta_grid=[0.1, .inf]", "selection.beta_grid.1"),
        ("criteria.effect_min=.nan", "criteria.effect_min"),
        ("criteria.magnitude_at=.inf", "criteria.magnitude_at"),
        ("execution.cpus_per_worker=.inf", "execution.cpus_per_worker"),
        ("calibration.effect_threshold=-.inf", "calibration.effect_threshold"),
    ],
)
def test_every_float_must_be_finite(override, field):
    """An infinite β once ran to the end: every steered text " p p p …", criteria decided."""
    with pytest.raises(ConfigError) as info:
        load_config(config_of(override), [override])
    assert f"  - {field}: " in str(info.value)
    assert "finite" in str(info.value)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("seed=-1", "seed"),
        ("calibration.probe_seeds=[0, -2]", "calibration.probe_seeds.1"),
        ("metrics.delta_threshold=2.5", "metrics.delta_threshold"),
        ("criteria.magnitude_min=-0.1", "criteria.magnitude_min"),
        ("criteria.effect_min=3", "criteria.effect_min"),
        ("calibration.effect_threshold=-0.05", "calibration.effect_threshold"),
        ("execution.torch_threads=0", "execution.torch_threads"),
    ],
)
def test_values_outside_their_range_are_refused_by_name(override, field):
    """A negative seed passed validation and crashed after the model loaded."""
    with pytest.raises(ConfigError) as info:
        load_config(config_of(override), [override])
    assert f"  - {field}: " in str(info.value)


@pytest.mark.parametrize(
    "override",
    [
        "tracking.results_dir=/elsewhere/results",
        "classifier.dir=/elsewhere/classifiers",
        "calibration.results_dir=/elsewhere/phase6",
        "execution.torch_threads=3",
    ],
)
def test_the_config_hash_leaves_output_folders_out(override):
    path = config_of(override)
    assert load_config(path, [override]).config_hash() == load_config(path).config_hash()


def test_vector_file_goes_with_the_file_source_and_must_exist(tmp_path):
    from experiments.config import ConfigError, load_config

    folder = tmp_path / "vectors"
    folder.mkdir()
    both = ["steering.vector_source=file", f"steering.vector_file={folder}"]
    config = load_config("configs/phase5.yaml", both)
    assert config.steering.vector_file == str(folder)
    assert config.config_hash() != load_config("configs/phase5.yaml").config_hash()
    for overrides, message in (
        (both[:1], "needs steering.vector_file"),
        (both[1:], "set steering.vector_source=file"),
        ([both[0], f"steering.vector_file={tmp_path / 'absent'}"], "does not exist"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_config("configs/phase5.yaml", overrides)

"""``steer_eval``'s input errors: each names the argument and the fix, and is raised
before a model loads (no model, no MLflow run here); ``import steer_eval`` stays light;
keywords become the command line's ``--set`` strings."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import steer_eval
from steer_eval import ArgumentError
from steer_eval.settings import value_text

REPO = Path(__file__).resolve().parents[2]
V = np.ones(64, dtype=np.float32)


@dataclass
class ControlVector:
    """repeng's ControlVector, as far as steer_eval reads it."""

    model_type: str
    directions: dict[int, np.ndarray] = field(default_factory=dict)


def refused(match: str, **kwargs: object) -> None:
    with pytest.raises(ArgumentError, match=match):
        steer_eval.evaluate(progress=None, **kwargs)  # type: ignore[arg-type]


def test_import_steer_eval_loads_nothing_heavy():
    code = (
        "import sys, steer_eval\n"
        "print(sorted(m for m in ('torch', 'transformers', 'mlflow', 'pandas', 'numpy') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"vectors": 42}, r"vectors: int is not a vector file or folder"),
        ({"vectors": "no/such/file.gguf"}, r"vectors: no file or folder no/such/file.gguf"),
        ({"vectors": {"herbs": V}}, r"vectors: 'herbs' is no concept of .*did you mean 'herb'"),
        ({"vectors": {"herb": np.ones((2, 64))}}, r"vectors\['herb'\]: a vector is 1-D"),
        ({"vectors": {"herb": V * np.nan}}, r"vectors\['herb'\]: has NaN"),
        ({"vectors": {"herb": {0: V}}}, r"vectors\['herb'\]: layer 0 cannot be written"),
        ({"vectors": {"herb": {"mid": V}}}, r"layer 'mid' is not a layer number"),
        ({"vectors": {"herb": V, "herb.n.01": V}}, r"'herb.n.01' and 'herb' are both herb.n.01"),
        ({"vectors": {}}, r"vectors: the mapping is empty"),
        ({"vectors": {"herb": V}, "concepts": ["person"]}, r"no vector for person.n.01"),
        ({"vectors": {"herb": V}, "concepts": 2}, r"concepts: a number takes the config's"),
        ({"vectors": ControlVector("gemma3_text", {1: V})}, r"a control vector holds one"),
        (
            {"vectors": ControlVector("gemma3_text", {1: V}), "concepts": ["herb", "person"]},
            r"a control vector holds one concept's vectors, but concepts names 2",
        ),
        ({"vectors": {"herb": V}, "beta": 0.2, "coefficient": 2.0}, r"beta and coefficient"),
        ({"coefficient": 2.0}, r"pass vectors="),
        ({"layers": "file"}, r"pass vectors="),
        ({"vectors": {"herb": V}, "coefficient": -1.0}, r"coefficient: -1.0; give k > 0"),
        ({"vectors": {"herb": V}, "coefficient": 2.0, "scale": "unit"}, r"scale='unit'"),
        ({"vectors": {"herb": V}, "beta": 0.2, "scale": "file"}, r"pass coefficient= instead"),
        ({"vectors": {"herb": V}, "layers": "all"}, r"layers: 'all'; give 'file'"),
        ({"beta": "high"}, r"beta: give a number > 0"),
        ({"layer": True}, r"layer: True is not a layer"),
        ({"layer": "middle"}, r"layer: 'middle' is not a layer"),
        ({"concepts": 0}, r"concepts: 0; give a number"),
        ({"concepts": ["hreb"]}, r"concepts: 'hreb' is no concept .*did you mean 'herb'"),
        ({"config": {"model": "embedded"}}, r"config: give the path of a YAML config"),
        ({"config": "no/such.yaml"}, r"config: no file no/such.yaml"),
        ({"model": 3}, r"model: give a Hub id"),
        ({"overrides": "seed=1"}, r"overrides: give a list"),
        ({"overrides": ["seed"]}, r"overrides: 'seed' is not 'key.path=value'"),
        ({"genration": {"max_new_tokens": 6}}, r"genration=: .*did you mean generation="),
        ({"beta": 0.3, "overrides": ["steering.beta=0.2"]}, r"steering.beta is given twice"),
        ({"seed": object()}, r"cannot be a setting"),
    ],
)
def test_bad_input_names_the_argument_and_the_fix(kwargs, match):
    refused(match, **kwargs)


def test_a_config_error_is_the_configs_own():
    from experiments.config import ConfigError

    with pytest.raises(ConfigError, match="max_new_tokens"):
        steer_eval.evaluate(generation={"max_new_tokens": -3}, progress=None)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.2, "0.2"),
        (True, "true"),
        (None, "null"),
        ("file", "file"),
        ("auto", "auto"),
        ("1.0", '"1.0"'),  # a string that YAML would read as a number stays a string
        ("", '""'),
        ((6, 12), "[6, 12]"),
        (["herb.n.01", "person.n.01"], '["herb.n.01", "person.n.01"]'),
        (Path("results/x"), "results/x"),
        (np.float32(0.5), "0.5"),
    ],
)
def test_a_value_reads_back_as_itself(value, text):
    from experiments.config import parse_override

    assert value_text(value) == text
    expected = list(value) if isinstance(value, tuple) else value
    expected = str(expected) if isinstance(expected, Path) else expected
    assert parse_override(f"k={text}")[1] == expected

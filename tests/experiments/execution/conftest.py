"""Fixtures for the executor tests: one Ray instance per module, the tiny model on disk.

Ray workers load the model from a spec, so the tiny random Gemma is saved to a folder
and both the driver and the actors load it from there (the real ``load_model`` path).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_lm):
    """The tests' tiny Gemma 3 and tokenizer saved as a model folder."""
    path = tmp_path_factory.mktemp("tiny-gemma")
    tiny_lm.model.save_pretrained(path)
    tiny_lm.tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_from_dir(tiny_model_dir):
    from steering.models import load_model

    return load_model(str(tiny_model_dir), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def ray_cluster():
    """A 2-CPU Ray instance for the module (actors in tests take fractional CPUs)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()

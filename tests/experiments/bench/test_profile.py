"""experiments.bench.decode.profile: one decode step split into layers, head, hook and sampling."""

from __future__ import annotations

import pytest

from experiments.bench.decode.profile import (
    FORWARD,
    HEAD,
    HOOK,
    LAYER,
    section_profile,
    step_breakdown,
)


def test_step_breakdown_splits_each_window():
    events = [
        (FORWARD, 0.0, 100.0),
        (LAYER, 10.0, 40.0),
        (HOOK, 40.0, 45.0),
        (LAYER, 45.0, 70.0),
        (HEAD, 75.0, 95.0),
        (FORWARD, 130.0, 200.0),
        (LAYER, 135.0, 150.0),
        (FORWARD, 260.0, 300.0),
    ]
    steps = step_breakdown(events)
    assert len(steps) == 2  # the last forward pass has no next one to close its window
    first = steps[0]
    assert first == {
        "layers": 55.0,
        "output_head": 20.0,
        "steering_hook": 5.0,
        "rest_of_forward": 20.0,
        "sampling_and_bookkeeping": 30.0,
        "step": 130.0,
    }
    assert steps[1]["layers"] == 15.0 and steps[1]["step"] == 130.0


def _hooks(lm) -> list[tuple[int, ...]]:
    modules = [*lm.layers, lm.model, lm.model.get_output_embeddings()]
    return [(*m._forward_hooks.keys(), -1, *m._forward_pre_hooks.keys()) for m in modules]


def test_profile_of_the_tiny_model(tiny_lm, one_thread, synthetic_workload):
    # The session-wide tiny model may carry hooks transformers installed for other tests
    # (output capturing); the profile must add none that outlive it.
    before = _hooks(tiny_lm)
    wl = synthetic_workload(tiny_lm, n_concepts=2, max_new_tokens=8)
    out = section_profile(tiny_lm, wl, tokens=5)
    assert out["rows"] == len(wl.rows) and out["decode_steps"] >= 1
    share = out["share"]
    assert set(share) == {
        "layers",
        "output_head",
        "steering_hook",
        "rest_of_forward",
        "sampling_and_bookkeeping",
    }
    assert sum(share.values()) == pytest.approx(1.0, abs=1e-3)
    # every part was seen (the rows carry nonzero strengths, so the hook does work)
    for part in ("layers", "output_head", "steering_hook", "sampling_and_bookkeeping"):
        assert share[part] > 0, part
    assert out["ms"]["layers"] > out["ms"]["steering_hook"]
    # the hooks are gone afterwards
    assert _hooks(tiny_lm) == before

"""The GPU levers' timing harness on the CPU: each variant timed with its own policy, a
failing variant recorded beside the others, and the compiled norm the model's own."""

from __future__ import annotations

import pytest

from experiments.bench.gpu.gpu_levers import NATIVE_NAME, Variant, measure_levers
from steering.decode_kernels import NATIVE, DecodeKernels

pytestmark = pytest.mark.usefixtures("one_thread")


def test_every_variant_is_timed_and_a_failing_one_is_recorded(tiny_lm):
    variants = (
        Variant(NATIVE_NAME, NATIVE),
        Variant("greedy", NATIVE, greedy=True),
        Variant("broken", DecodeKernels(norms=True, backend="no-such-backend")),
    )
    lines: list[str] = []
    runs = measure_levers(tiny_lm, [3], tokens=4, repeats=1, variants=variants, say=lines.append)
    arms = runs["3"]
    assert set(arms) == {NATIVE_NAME, "greedy", "broken"}
    assert arms[NATIVE_NAME]["new_tokens"] == 3 * 4 and arms[NATIVE_NAME]["over_native"] == 1.0
    assert arms["greedy"]["tokens_per_second"] > 0 and "over_native" in arms["greedy"]
    assert "no-such-backend" in arms["broken"]["error"]
    assert arms[NATIVE_NAME]["capture_failed"] is None
    assert len(lines) == 3 and lines[-1].startswith("levers: 3 rows, broken:")

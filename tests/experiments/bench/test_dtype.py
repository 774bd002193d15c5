"""experiments.bench.decode.dtype: Δ under two dtypes, paired by row."""

from __future__ import annotations

import pytest

from experiments.bench.decode.dtype import compare_deltas


def test_compare_deltas_is_paired_by_row():
    def rows(deltas):
        out = {}
        for i, (s, d) in enumerate(deltas):
            out[f"c|p{i % 2}|n0|s{s:+.3f}"] = {"delta": d, "strength": s}
        return out

    base = rows([(0.0, 0.1), (0.0, 0.2), (1.0, 0.3), (1.0, 0.5)])
    other = rows([(0.0, 0.1), (0.0, 0.2), (1.0, 0.4), (1.0, 0.4)])
    per = compare_deltas(base, other)
    assert per["+0"]["mean_difference"] == 0.0 and per["+0"]["within_2se"] is True
    assert per["+1"]["n"] == 2
    assert per["+1"]["mean_delta_base"] == pytest.approx(0.4)
    assert per["+1"]["mean_difference"] == pytest.approx(0.0)
    assert per["+1"]["se_difference"] == pytest.approx(0.1)  # stdev(+0.1, -0.1) / sqrt(2)
    assert per["+1"]["mean_shift_base"] == pytest.approx(0.25)  # (0.3-0.1 + 0.5-0.2) / 2
    assert per["+1"]["mean_shift_other"] == pytest.approx(0.25)  # (0.4-0.1 + 0.4-0.2) / 2
    assert per["+1"]["mean_shift_difference"] == pytest.approx(0.0)
    assert per["+1"]["se_shift_difference"] == pytest.approx(0.1)
    assert per["+1"]["shift_within_2se"] is True and "mean_shift_base" not in per["+0"]

"""The run summary's wording of the generation speed."""

from __future__ import annotations

from experiments.phase5.report import generation_speed
from experiments.record import Measurement


def test_a_session_that_generated_rows_reports_its_speed():
    assert generation_speed(12.34) == "generation: 12.3 tokens/s"


def test_a_resume_with_nothing_left_to_generate_says_so_instead_of_zero_tokens_per_second():
    line = generation_speed(0.0)
    assert "0.0" not in line
    assert "no rows generated in this session" in line


def test_the_summary_shows_the_likelihood_against_generation_across_directions():
    from experiments.phase5.report import measurement_markdown

    # version 4's loose dicts, read as the record reads them
    stats = Measurement.model_validate({
        "reliability": {},
        "likelihood_vs_effect_by_direction": {
            "pos": {
                "evaluable": True,
                "r": 0.29,
                "p_value": 0.01,
                "ci_low": 0.1,
                "ci_high": 0.46,
                "n": 100,
                "ci_method": "cluster bootstrap",
                "n_directions": 100,
                "n_clusters": 50,
            },
            "neg": {"evaluable": False, "reason": "3 directions"},
        },
    })  # fmt: skip
    text = "\n".join(measurement_markdown(stats))
    assert "s > 0: r = +0.290 [+0.100, +0.460] over 100 directions in 50 concepts" in text
    assert "s < 0: not evaluable (3 directions)" in text
    nothing = Measurement.model_validate(
        {"reliability": {}, "likelihood_vs_effect_by_direction": {"evaluable": False,
                                                                   "reason": "no arms"}}
    )  # fmt: skip
    text = "\n".join(measurement_markdown(nothing))
    assert "s > 0: not evaluable (no arms); s < 0: not evaluable (no arms)." in text

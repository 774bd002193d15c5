"""The run summary's wording of the generation speed."""

from __future__ import annotations

from experiments.pipeline.report import generation_speed


def test_a_session_that_generated_rows_reports_its_speed():
    assert generation_speed(12.34) == "generation: 12.3 tokens/s"


def test_a_resume_with_nothing_left_to_generate_says_so_instead_of_zero_tokens_per_second():
    line = generation_speed(0.0)
    assert "0.0" not in line
    assert "no rows generated in this session" in line

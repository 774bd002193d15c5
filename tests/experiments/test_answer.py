"""Every answer's shared wording (experiments.answer): one reading of an interval, read
from its numbers, and one vocabulary of statuses."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from experiments.answer import (
    STATUSES,
    Answer,
    AnswerTable,
    Verdict,
    answer_markdown,
    criteria_rows,
    headline_part,
    reading,
    status_word,
)
from metrics.criteria import STATUSES as CRITERION_STATUSES
from metrics.intervals import Interval, interval_verdict

finite = st.floats(min_value=-5, max_value=5, allow_nan=False, allow_infinity=False)


def verdict(value, low, high, threshold, direction="above", status="fail", reason="") -> Verdict:
    return Verdict(
        key="k",
        label="a criterion",
        group="s > 0",
        interval=Interval(value, low, high, reason=reason),
        status=status,
        threshold=threshold,
        direction=direction,
        claim="it holds",
    )


@given(
    value=finite,
    bounds=st.tuples(finite, finite).map(sorted),
    threshold=finite,
    direction=st.sampled_from(["above", "below"]),
    status=st.sampled_from(["pass", "fail", "inconclusive"]),
)
def test_the_reading_says_where_the_interval_lies_whatever_the_status(
    value, bounds, threshold, direction, status
):
    low, high = bounds
    text = reading(verdict(value, low, high, threshold, direction, status))
    t = f"{threshold:g}"
    if low > threshold:
        assert text in (
            f"interval above {t}",
            f"real (interval below 0), short of the threshold {t}",
        )
        if text.startswith("real"):
            assert direction == "below" and high < 0
    elif high < threshold:
        assert text in (
            f"interval below {t}",
            f"real (interval above 0), short of the threshold {t}",
        )
        if text.startswith("real"):
            assert direction == "above" and low > 0
    else:  # the interval reaches the threshold: it spans it, never "below" or "above"
        assert text == f"interval spans {t}"
    # the reading agrees with the interval's own verdict
    own = interval_verdict(Interval(value, low, high, 3, 3, "m"), threshold)
    assert (own == "inconclusive") == (text == f"interval spans {t}")


@given(
    value=st.one_of(st.none(), finite),
    threshold=finite,
    direction=st.sampled_from(["above", "below"]),
    status=st.sampled_from(["pass", "fail", "inconclusive"]),
    half=st.sampled_from(["low", "high", "both"]),
)
def test_a_verdict_without_an_interval_reads_as_a_point_value(
    value, threshold, direction, status, half
):
    low = None if half in ("low", "both") else threshold - 1
    high = None if half in ("high", "both") else threshold + 1
    assert reading(verdict(value, low, high, threshold, direction, status)) == (
        "no interval (point value)"
    )


def test_the_seed_r_whose_interval_spans_the_threshold_reads_spans_not_below():
    """The case found on a run: r = 0.342 [-0.366, 0.800] against 0.5, status fail."""
    v = verdict(0.342, -0.366, 0.800, 0.5, status="fail")
    assert reading(v) == "interval spans 0.5"
    assert reading(verdict(0.342, None, None, 0.5, status="fail")) == "no interval (point value)"


@given(status=st.sampled_from(["not_evaluable", "pending", "panel_required"]))
def test_an_unjudged_verdict_reads_its_reason_not_its_status_again(status):
    v = verdict(None, None, None, 0.15, status=status, reason="every text was gated (3/3)")
    assert reading(v) == "every text was gated (3/3)"
    assert reading(verdict(None, None, None, 0.15, status=status)) == status_word(status)


def test_one_vocabulary_of_statuses():
    """The answer's statuses are the criteria's; each has one word for people, and no
    view a person reads shows the key beside another spelling of it."""
    assert set(STATUSES) == set(CRITERION_STATUSES)
    assert status_word("not_evaluable") == "not evaluable"
    assert status_word("panel_required") == "panel required"
    v = verdict(None, None, None, 0.15, status="not_evaluable", reason="no rows at s > 0")
    answer = Answer("phase5", "r1", "q?", 0.95, verdicts=[v], seed=[v], seed_label="seed")
    text = answer_markdown(answer)
    assert "not_evaluable" not in text
    assert "**not evaluable** | no rows at s > 0 |" in text
    assert headline_part(v) == "it holds: not evaluable (no rows at s > 0)"
    row = next(iter(criteria_rows(answer)))  # files keep the key, and the reason
    assert (row["status"], row["reason"], row["reading"]) == (
        "not_evaluable",
        "no rows at s > 0",
        "no rows at s > 0",
    )


shares = st.floats(min_value=0, max_value=1, allow_nan=False)


@given(bounds=st.tuples(shares, shares).map(sorted), threshold=shares)
def test_a_share_is_read_against_its_threshold_never_as_real_above_0(bounds, threshold):
    """A share (of texts moved the right way) is never below 0, so "real (interval above
    0)" would say nothing: it reads above, below or spanning its threshold alone; the
    same interval as an effect may read "real"."""
    low, high = bounds
    share = replace(verdict(low, low, high, threshold), share=True)
    text = reading(share)
    t = f"{threshold:g}"
    assert "real" not in text
    assert text == (
        f"interval above {t}"
        if low > threshold
        else f"interval below {t}"
        if high < threshold
        else f"interval spans {t}"
    )
    if low > 0 and high < threshold:
        assert reading(verdict(low, low, high, threshold)).startswith("real (interval above 0)")


def test_what_a_verdict_is_read_beside_follows_its_reading_in_every_view():
    v = replace(verdict(0.076, 0.019, 0.138, 0.15), beside="null texts passing the gate 8/30")
    assert reading(v) == "real (interval above 0), short of the threshold 0.15; null texts " \
        "passing the gate 8/30"  # fmt: skip
    answer = Answer("phase5", "r1", "q?", 0.95, verdicts=[v])
    assert "short of the threshold 0.15; null texts passing the gate 8/30)" in headline_part(v)
    assert "| real (interval above 0), short of the threshold 0.15; null texts passing the " \
        "gate 8/30 |" in answer_markdown(answer)  # fmt: skip
    assert answer.to_dict()["criteria"]["k"]["beside"] == "null texts passing the gate 8/30"
    unjudged = replace(
        v, status="not_evaluable", interval=Interval(None, reason="every text was gated")
    )
    assert reading(unjudged) == "every text was gated"  # its reason, as every unjudged one


def test_an_answer_shows_its_tables_under_the_verdicts():
    table = AnswerTable("How it chose", ("layer", "effect"), (("L4", "+0.1 [no | pipe]"),))
    answer = Answer("phase5", "r1", "q?", 0.95, verdicts=[verdict(0.1, 0.0, 0.2, 0.15)])
    text = answer_markdown(replace(answer, tables=[table]))
    lines = text.splitlines()
    at = lines.index("How it chose:")
    assert lines[at + 2 : at + 5] == [
        "| layer | effect |",
        "|---|---|",
        "| L4 | +0.1 [no \\| pipe] |",
    ]
    assert text.index("How it chose") > text.index("| a criterion |")
    assert replace(answer, tables=[table]).to_dict()["tables"] == [
        {"title": "How it chose", "rows": [{"layer": "L4", "effect": "+0.1 [no | pipe]"}]}
    ]
    assert "tables" not in answer.to_dict()

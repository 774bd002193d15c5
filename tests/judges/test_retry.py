"""Server retry hints: retry-after-ms, retry-after (seconds or HTTP date), x-should-retry."""

from __future__ import annotations

import email.utils
import logging
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from judges import JudgeError, RatingRequest
from judges.retry import (
    RetryPolicy,
    ServerHint,
    is_retryable,
    parse_retry_after,
    parse_retry_after_ms,
    read_hints,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(seconds)
def test_retry_after_seconds_round_trip(value):
    assert parse_retry_after(repr(value)) == pytest.approx(value)
    assert parse_retry_after(f"  {int(value)} ") == int(value)


@given(seconds)
def test_retry_after_ms_is_milliseconds(value):
    assert parse_retry_after_ms(repr(value)) == pytest.approx(value / 1000)


@given(st.integers(min_value=0, max_value=10**7))
def test_retry_after_http_date_is_seconds_from_now(offset):
    when = NOW + timedelta(seconds=offset)
    header = email.utils.format_datetime(when, usegmt=True)  # "Sun, 01 Mar 2026 12:00:05 GMT"
    assert parse_retry_after(header, now=NOW) == pytest.approx(offset)


@given(st.integers(min_value=1, max_value=10**7))
def test_a_date_in_the_past_means_now(offset):
    header = email.utils.format_datetime(NOW - timedelta(seconds=offset), usegmt=True)
    assert parse_retry_after(header, now=NOW) == 0.0


def test_other_http_date_forms_and_garbage():
    # RFC 850 and asctime forms are legal HTTP dates too (asctime has no zone: GMT).
    assert parse_retry_after("Sunday, 01-Mar-26 12:00:30 GMT", now=NOW) == 30.0
    assert parse_retry_after("Sun Mar  1 12:01:00 2026", now=NOW) == 60.0
    for bad in ("", "soon", "Wed, 21 Oct 2015", "nan", "inf", "-inf", None):
        assert parse_retry_after(bad) is None
    assert parse_retry_after("-5") == 0.0
    for bad in ("", "x", "nan", None):
        assert parse_retry_after_ms(bad) is None


@given(st.text(max_size=40))
def test_parsers_never_raise(text):
    for value in (parse_retry_after(text), parse_retry_after_ms(text)):
        assert value is None or value >= 0.0


def test_read_hints_prefers_milliseconds_and_ignores_case():
    hint = read_hints({"Retry-After-Ms": "1500", "retry-after": "9"})
    assert hint == ServerHint(retry_after=1.5, should_retry=None)
    assert read_hints({"RETRY-AFTER": "9"}).retry_after == 9.0
    assert read_hints({"retry-after-ms": "junk", "retry-after": "2"}).retry_after == 2.0
    date = email.utils.format_datetime(NOW + timedelta(seconds=42), usegmt=True)
    assert read_hints({"retry-after": date}, now=NOW).retry_after == 42.0
    assert read_hints(None) == ServerHint() and read_hints({}) == ServerHint()


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("TRUE", True), (" false ", False), ("False", False), ("yes", None)],
)
def test_read_hints_should_retry(value, expected):
    assert read_hints({"X-Should-Retry": value}).should_retry is expected


@given(st.integers(min_value=100, max_value=599))
def test_x_should_retry_overrides_the_status(status):
    assert is_retryable(status, ServerHint(should_retry=True)) is True
    assert is_retryable(status, ServerHint(should_retry=False)) is False
    expected = status in {408, 409, 425, 429} or status >= 500
    assert is_retryable(status, ServerHint()) is expected


@given(st.integers(min_value=0, max_value=6), seconds)
def test_delay_honours_the_hint_up_to_max_delay(attempt, hint):
    policy = RetryPolicy(base_delay=0.5, max_delay=30.0, jitter=False)
    delay = policy.delay(attempt, hint)
    assert delay >= min(hint, policy.max_delay) and delay <= policy.max_delay


# --------------------------------------------------------- through the real SDKs


def _waits(caplog) -> list[float]:
    return [r.args[3] for r in caplog.records if "transient failure" in r.msg]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_retry_after_ms_reaches_the_backoff(loopback, api_keys, make_api_judge, caplog, provider):
    caplog.set_level(logging.INFO, logger="judges.retry")
    script = [loopback.status(429, headers={"retry-after-ms": "250", "retry-after": "7"})]
    with loopback.LoopbackServer(script=script) as server:
        rating = make_api_judge(provider, server, base_delay=0.001).rate_one("t", "dog")
    assert rating.score == 7.0 and rating.attempts == 2 and server.n_requests == 2
    (wait,) = _waits(caplog)
    assert 0.25 <= wait < 1.0  # the 250 ms hint, not the 1 ms backoff nor the 7 s header


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_x_should_retry_false_stops_at_once(loopback, api_keys, make_api_judge, provider):
    step = loopback.status(503, headers={"x-should-retry": "false"})
    with loopback.LoopbackServer(default=step) as server:
        judge = make_api_judge(provider, server)
        with pytest.raises(JudgeError, match="x-should-retry: false"):
            judge.rate_one("t", "dog")
        assert server.n_requests == 1


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_x_should_retry_true_retries_a_4xx(loopback, api_keys, make_api_judge, provider):
    script = [loopback.status(400, headers={"x-should-retry": "true"}), loopback.ok()]
    with loopback.LoopbackServer(script=script) as server:
        ratings = make_api_judge(provider, server).rate([RatingRequest("t", "dog")])
    assert server.n_requests == 2 and ratings[0].attempts == 2 and ratings[0].score == 7.0

"""Exponential backoff for transient API failures (429, 5xx, timeouts, garbled replies).

The SDKs' own retries are switched off (max_retries=0) and this wrapper is used instead,
so that the attempt count is recorded on each Rating and tests can make the delays tiny
(`base_delay=0.01`) without monkeypatching SDK internals. Because the SDKs no longer
retry, the server hints they would have honoured are read here (`read_hints`):
`retry-after-ms`, `retry-after` (seconds or an HTTP date) and `x-should-retry`.
"""

from __future__ import annotations

import email.utils
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to retry. `timeout` is the per-attempt HTTP timeout in seconds."""

    max_retries: int = 4
    base_delay: float = 1.0
    max_delay: float = 30.0
    timeout: float = 60.0
    jitter: bool = True

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `attempt` (0-based)."""
        delay: float = min(self.max_delay, self.base_delay * (2**attempt))
        if self.jitter:
            delay *= 0.5 + random.random() / 2
        if retry_after is not None and retry_after > 0:
            delay = max(delay, min(retry_after, self.max_delay))
        return delay


class TransientError(Exception):
    """Wraps a failure worth retrying; `reason` is a short log-safe description."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class RetriesExhausted(Exception):
    def __init__(self, reason: str, attempts: int) -> None:
        super().__init__(f"gave up after {attempts} attempts: {reason}")
        self.reason = reason
        self.attempts = attempts


def call_with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy,
    label: str = "",
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[T, int]:
    """Call `fn` until it does not raise TransientError; returns (result, attempts).

    Any other exception propagates at once (it is not transient). After
    `policy.max_retries` retries the last TransientError becomes RetriesExhausted.
    """
    attempt = 0
    while True:
        try:
            return fn(), attempt + 1
        except TransientError as exc:
            if attempt >= policy.max_retries:
                raise RetriesExhausted(exc.reason, attempt + 1) from None
            wait = policy.delay(attempt, exc.retry_after)
            log.info(
                "%s: transient failure (%s); retry %d in %.2fs",
                label,
                exc.reason,
                attempt + 1,
                wait,
            )
            sleep(wait)
            attempt += 1


# Statuses worth retrying when the server gives no x-should-retry hint.
TRANSIENT_STATUS = frozenset({408, 409, 425, 429})


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After value: delta-seconds or an HTTP date.

    A date in the past gives 0.0; anything unparseable (or not finite) gives None.
    `now` (default: the current UTC time) is only for turning a date into seconds.
    """
    if not value or not value.strip():
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # asctime form carries no zone; HTTP dates are GMT
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def parse_retry_after_ms(value: str | None) -> float | None:
    """Seconds from a `retry-after-ms` value (milliseconds; OpenAI and Anthropic send it)."""
    try:
        millis = float(value or "")  # float() strips surrounding whitespace itself
    except ValueError:
        return None
    return max(0.0, millis / 1000.0) if math.isfinite(millis) else None


@dataclass(frozen=True)
class ServerHint:
    """What an error response's headers say about retrying.

    `retry_after`: seconds to wait (None: no usable hint). `should_retry`: the server's
    explicit x-should-retry verdict (None: absent or neither "true" nor "false").
    """

    retry_after: float | None = None
    should_retry: bool | None = None


def read_hints(headers: Mapping[str, str] | None, now: datetime | None = None) -> ServerHint:
    """Read retry-after-ms (preferred: finer), retry-after and x-should-retry, any case."""
    if not headers:
        return ServerHint()
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    retry_after = parse_retry_after_ms(lower.get("retry-after-ms"))
    if retry_after is None:
        retry_after = parse_retry_after(lower.get("retry-after"), now)
    flag = lower.get("x-should-retry", "").strip().lower()
    should_retry = {"true": True, "false": False}.get(flag)
    return ServerHint(retry_after, should_retry)


def is_retryable(status: int, hint: ServerHint) -> bool:
    """x-should-retry decides when present; otherwise 408/409/425/429 and 5xx retry."""
    if hint.should_retry is not None:
        return hint.should_retry
    return status in TRANSIENT_STATUS or status >= 500

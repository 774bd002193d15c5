"""Exponential backoff for transient API failures (429, 5xx, timeouts, garbled replies).

The SDKs' own retries are switched off (max_retries=0) and this wrapper is used instead,
so that the attempt count is recorded on each Rating and tests can make the delays tiny
(`base_delay=0.01`) without monkeypatching SDK internals.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
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
        delay = min(self.max_delay, self.base_delay * (2**attempt))
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


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (only the delta-seconds form; dates are ignored)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None

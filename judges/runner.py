"""Have several judges rate the same requests: API judges concurrently, bounded.

A panel's API judges mostly wait on the network, so running them one after another wastes
wall time. Here every (API judge, request) pair is a task in one shared pool of
`max_concurrency` threads, so at most that many API calls are in flight for the whole
panel, and each judge's own `max_concurrency` still caps its share (a per-judge
semaphore). Judges that are not `thread_safe` (the local llama judge, unknown third-party
judges) rate their whole batch in the calling thread meanwhile, exactly as before.

Each rating depends only on its request (same prompt, same cache key), so the result is
identical to the sequential run whatever the scheduling. `max_concurrency=1` is the
sequential run: judges one after another, one call at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from judges.base import Judge, Rating, RatingRequest

OnRating = Callable[[str, int, Rating], None]  # (judge name, request index, rating)


def rate_all(
    judges: Sequence[Judge],
    requests: Sequence[RatingRequest],
    max_concurrency: int = 4,
    on_result: OnRating | None = None,
) -> dict[str, list[Rating]]:
    """{judge name: ratings in request order}. The first failure (e.g. BudgetExceeded)
    stops scheduling new API calls; calls already running finish (and are cached), and
    the failure is raised once the local judges are done."""
    if max_concurrency < 1:
        raise ValueError("max_concurrency must be >= 1")
    requests = list(requests)
    pooled = [j for j in judges if j.thread_safe] if max_concurrency > 1 else []
    results: dict[str, list[Rating]] = {}
    if not pooled:
        for judge in judges:  # a thread-safe judge with max_concurrency=1: one call at a time
            rate = _rate_each if judge.thread_safe else _rate_batch
            results[judge.name] = rate(judge, requests, on_result)
        return results

    stop = threading.Event()
    limits = {
        j.name: threading.BoundedSemaphore(max(1, getattr(j, "max_concurrency", max_concurrency)))
        for j in pooled
    }
    slots: dict[str, list[Rating | None]] = {j.name: [None] * len(requests) for j in pooled}

    def task(judge: Judge, index: int) -> None:
        if stop.is_set():
            return
        with limits[judge.name]:
            if stop.is_set():
                return
            try:
                rating = judge.rate([requests[index]])[0]
            except BaseException:
                stop.set()
                raise
        slots[judge.name][index] = rating
        if on_result:
            on_result(judge.name, index, rating)

    pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="judge")
    futures: list[Future[None]] = []
    try:
        # Request-major order spreads the pool over the judges (and their rate limits).
        for index in range(len(requests)):
            for judge in pooled:
                futures.append(pool.submit(task, judge, index))
        for judge in judges:
            if judge not in pooled:
                results[judge.name] = _rate_batch(judge, requests, on_result)
        wait(futures)
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for future in futures:
        exc = future.exception()
        if exc is not None:
            raise exc
    for judge in pooled:
        ratings = slots[judge.name]
        assert all(r is not None for r in ratings)  # no failure means every task ran
        results[judge.name] = ratings  # type: ignore[assignment]
    return {j.name: results[j.name] for j in judges}


def _rate_batch(
    judge: Judge, requests: Sequence[RatingRequest], on_result: OnRating | None
) -> list[Rating]:
    if on_result is None:
        return judge.rate(requests)
    return judge.rate(requests, on_result=lambda i, rating: on_result(judge.name, i, rating))


def _rate_each(
    judge: Judge, requests: Sequence[RatingRequest], on_result: OnRating | None
) -> list[Rating]:
    ratings = []
    for index, request in enumerate(requests):
        ratings.append(judge.rate([request])[0])
        if on_result:
            on_result(judge.name, index, ratings[-1])
    return ratings

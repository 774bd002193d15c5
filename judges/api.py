"""Shared machinery of the hosted-API judges: cache, budget, retries, bounded concurrency.

A provider subclass only says how to send one prompt and read back (text, usage, model);
everything that must behave identically across providers lives here.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from judges import pricing
from judges.base import (
    Budget,
    EstimateOnly,
    Judge,
    JudgeError,
    JudgeEstimate,
    JudgeUnavailable,
    MissingKey,
    ProgressCallback,
    Rating,
    RatingRequest,
    Rubric,
)
from judges.cache import JudgeCache, cache_key, resolve_cache
from judges.prompt import RenderedPrompt, parse_answer, render_api_prompt
from judges.retry import RetriesExhausted, RetryPolicy, call_with_retry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallResult:
    """What one successful API call returned."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    model: str


def safe_url(url: str | None) -> str:
    """A base URL with any user:password and query string removed, for logging."""
    if not url:
        return ""
    parts = urlsplit(str(url))
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class APIJudge(Judge):
    """A judge backed by a remote chat API. Subclasses implement `_call` and make `_client`.

    `estimate_only=True` builds it for a dry run alone: the subclass reads no key, imports
    no SDK and makes no client; `estimate` works as usual (it needs only the price, the
    cache and the rubric's max_tokens) and `rate` raises EstimateOnly, so such a judge can
    never send anything.
    """

    key_env: str = ""
    # The SDK module and its client: subclasses make them (_connect), unless estimate_only.
    _sdk: Any
    _client: Any
    thread_safe = True  # SDK clients are thread-safe; the cache and budget are locked

    def __init__(
        self,
        name: str,
        model: str,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        max_concurrency: int = 4,
        retry: RetryPolicy | None = None,
        max_retries: int | None = None,
        base_delay: float | None = None,
        timeout: float | None = None,
        cache: JudgeCache | str | os.PathLike[str] | bool | None = True,
        budget: Budget | None = None,
        budget_usd: float | None = None,
        price_per_mtok: tuple[float, float] | None = None,
        estimate_only: bool = False,
        base_url: str | None = None,
    ) -> None:
        super().__init__(name, model)
        self.estimate_only = estimate_only
        self._requested_base_url = base_url
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        self.max_tokens_override = max_tokens
        self.temperature = temperature
        self.max_concurrency = max_concurrency
        given: dict[str, Any] = {
            "max_retries": max_retries,
            "base_delay": base_delay,
            "timeout": timeout,
        }
        self.retry = replace(
            retry or RetryPolicy(), **{k: v for k, v in given.items() if v is not None}
        )
        self.cache = resolve_cache(cache)
        if budget is not None and budget_usd is not None:
            raise ValueError("pass either budget (shared) or budget_usd, not both")
        self.budget = budget if budget is not None else Budget(budget_usd)
        self.price: pricing.Price | None = (
            pricing.as_price(price_per_mtok)
            if price_per_mtok is not None
            else pricing.lookup(model, self.provider)
        )
        if self.price is None:
            pricing.warn_unknown(model)
            if self.budget.cap_usd is not None:
                # Refuse rather than spend blindly: an unknown cost cannot be capped.
                raise JudgeError(
                    f"{name}: a budget cap is set but model {model!r} has no price in "
                    f"{pricing.table_source()}, so the cap cannot be enforced. Pass "
                    "price_per_mtok=(input, output) USD per 1M tokens."
                )
        self._secret: str | None = None  # set by _connect; only ever used for redaction

    def _connect(
        self, import_sdk: Callable[[], Any], client: str, keyless: str | None = None
    ) -> None:
        """Read the key from ``$key_env`` (``keyless``, no secret, stands in for a missing
        one where given), import the SDK (:func:`classify_sdk_error` reads its errors) and
        make its ``client``; none of this for an estimate-only judge."""
        if self.estimate_only:
            return
        key = os.environ.get(self.key_env) or keyless
        if not key:
            raise MissingKey(self.key_env)
        try:
            self._sdk = import_sdk()
        except ImportError as exc:
            raise JudgeUnavailable(
                f"the `{self.provider}` package is not installed (pip install {self.provider})"
            ) from exc
        self._secret = key if key != keyless else None
        self._client = getattr(self._sdk, client)(
            api_key=key,
            base_url=self._requested_base_url,
            timeout=self.retry.timeout,
            max_retries=0,  # judges.retry does the retrying (counted, testable)
        )

    def _result(self, response: Any, text: str, tokens_in: str, tokens_out: str) -> CallResult:
        """A response's text, with its usage (fields ``tokens_in``, ``tokens_out``, None
        where missing) and the model that answered (the requested one when unsaid)."""
        usage = getattr(response, "usage", None)
        return CallResult(
            text=text,
            input_tokens=getattr(usage, tokens_in, None),
            output_tokens=getattr(usage, tokens_out, None),
            model=getattr(response, "model", "") or self.model,
        )

    # -- provider hooks -------------------------------------------------------------------
    def _call(self, prompt: RenderedPrompt, rubric: Rubric) -> CallResult:
        """Send one prompt; raise TransientError for retryable failures."""
        raise NotImplementedError

    def _base_url(self) -> str:
        if self.estimate_only:
            return self._requested_base_url or ""
        return str(self._client.base_url)

    def close(self) -> None:
        if not self.estimate_only:
            self._client.close()

    # -- shared behaviour -----------------------------------------------------------------
    def _refuse_if_estimate_only(self) -> None:
        if self.estimate_only:
            raise EstimateOnly(
                f"{self.name} was built to estimate a dry run only (no key, no client) and "
                f"cannot rate; set ${self.key_env} and build it again"
            )

    def rate(
        self, requests: Sequence[RatingRequest], on_result: ProgressCallback | None = None
    ) -> list[Rating]:
        """As `Judge.rate`; refuses (EstimateOnly) when built with `estimate_only=True`."""
        self._refuse_if_estimate_only()
        return super().rate(requests, on_result)

    def max_tokens_for(self, rubric: Rubric) -> int:
        if self.max_tokens_override is not None:
            return self.max_tokens_override
        if rubric.kind == "axbench":
            return 60
        return 40 if rubric.fluency else 20

    def decoding_params(self, rubric: Rubric) -> dict[str, Any]:
        """Everything besides the prompt that can change the answer (goes in the cache key)."""
        return {"max_tokens": self.max_tokens_for(rubric), "temperature": self.temperature}

    def redact(self, text: str) -> str:
        """Remove the API key from any string that might be returned or logged."""
        return text.replace(self._secret, "[REDACTED]") if self._secret and text else text

    def describe(self) -> dict[str, str]:
        info = super().describe()
        info.update(
            {
                "base_url": safe_url(self._base_url()),
                "temperature": str(self.temperature),
                "max_concurrency": str(self.max_concurrency),
                "max_retries": str(self.retry.max_retries),
                "timeout_s": str(self.retry.timeout),
                **pricing.describe(self.price),
                "budget_cap_usd": str(self.budget.cap_usd),
                "cache_dir": str(self.cache.root) if self.cache is not None else "off",
            }
        )
        return info

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, model={self.model!r}, "
            f"base_url={safe_url(self._base_url())!r})"
        )

    def _key(self, request: RatingRequest, prompt: RenderedPrompt) -> str:
        return cache_key(
            self.provider,
            self.model,
            request.rubric.version,
            prompt.cache_text(),
            self.decoding_params(request.rubric),
        )

    def estimate(self, requests: Sequence[RatingRequest]) -> JudgeEstimate:
        """Dry run: requests not in the cache would each be one call (retries not counted);
        the worst case is the budget's own reservation rule, so a run whose estimate fits
        the cap cannot hit BudgetExceeded. Reads the cache without counting; sends nothing.
        """
        calls = cached = in_max = in_typical = out_max = 0
        cost: float | None = 0.0
        for request in requests:
            prompt = render_api_prompt(request)
            if self.cache is not None and self.cache.peek(self._key(request, prompt)):
                cached += 1
                continue
            calls += 1
            max_tokens = self.max_tokens_for(request.rubric)
            prompt_bytes = len(prompt.system.encode()) + len(prompt.user.encode())
            in_max += prompt_bytes + pricing.PROMPT_OVERHEAD_TOKENS
            in_typical += pricing.typical_tokens(prompt.system + prompt.user)
            out_max += max_tokens
            call_cost = pricing.estimate_max_cost(prompt_bytes, max_tokens, self.price)
            cost = None if cost is None or call_cost is None else cost + call_cost
        return JudgeEstimate(
            judge=self.name,
            requests=len(requests),
            cached=cached,
            calls=calls,
            input_tokens_max=in_max,
            input_tokens_typical=in_typical,
            output_tokens_max=out_max,
            cost_usd_max=cost if calls else 0.0,
            price_source=self.price.source if self.price is not None else "unknown",
        )

    def _rate_one(self, request: RatingRequest) -> Rating:
        self._refuse_if_estimate_only()  # every send passes here, whoever calls it
        prompt = render_api_prompt(request)
        started = time.perf_counter()
        key = self._key(request, prompt)
        if self.cache is not None:
            entry = self.cache.get(key)
            if entry is not None:
                return Rating(
                    score=entry["score"],
                    fluency=entry.get("fluency"),
                    concept_score=entry.get("concept_score"),
                    instruction=entry.get("instruction"),
                    raw=entry["raw"],
                    input_tokens=0,
                    output_tokens=0,
                    cost_usd=0.0,
                    latency_s=time.perf_counter() - started,
                    model=entry.get("model", self.model),
                    cache_hit=True,
                    attempts=0,
                )
        max_tokens = self.max_tokens_for(request.rubric)
        prompt_bytes = len(prompt.system.encode()) + len(prompt.user.encode())
        estimate = pricing.estimate_max_cost(prompt_bytes, max_tokens, self.price) or 0.0
        reserved = self.budget.reserve(estimate, self.name)
        try:
            result, attempts = call_with_retry(
                lambda: self._call(prompt, request.rubric), self.retry, label=self.name
            )
        except RetriesExhausted as exc:
            self.budget.release(reserved)
            reason = self.redact(exc.reason)
            log.warning(
                "%s abstains on sample %s: %s after %d attempts",
                self.name,
                request.sample_id,
                reason,
                exc.attempts,
            )
            return Rating(
                score=None,
                raw="",
                cost_usd=0.0,
                latency_s=time.perf_counter() - started,
                model=self.model,
                attempts=exc.attempts,
                error=reason,
            )
        except BaseException:  # Ctrl-C or a bug: the reservation goes back all the same
            self.budget.release(reserved)
            raise
        usage_known = result.input_tokens is not None and result.output_tokens is not None
        in_tok = result.input_tokens or 0
        out_tok = result.output_tokens or 0
        cost = pricing.cost_usd(in_tok, out_tok, self.price) if usage_known else None
        self.budget.settle(reserved, cost)
        raw = self.redact(result.text)
        parsed = parse_answer(raw, request.rubric)
        if parsed.problem:
            log.info(
                "%s: unparseable answer for sample %s (%s)",
                self.name,
                request.sample_id,
                parsed.problem,
            )
        rating = Rating(
            score=parsed.score,
            fluency=parsed.fluency,
            concept_score=parsed.concept,
            instruction=parsed.instruction,
            raw=raw,
            input_tokens=in_tok,
            output_tokens=out_tok,
            cost_usd=cost,
            latency_s=time.perf_counter() - started,
            model=result.model or self.model,
            cache_hit=False,
            attempts=attempts,
        )
        if self.cache is not None:
            self.cache.put(
                key,
                {
                    "provider": self.provider,
                    "model": rating.model,
                    "requested_model": self.model,
                    "rubric_version": request.rubric.version,
                    "params": self.decoding_params(request.rubric),
                    "prompt": prompt.cache_text(),
                    "score": rating.score,
                    "fluency": rating.fluency,
                    **(
                        {"concept_score": rating.concept_score, "instruction": rating.instruction}
                        if request.rubric.kind == "axbench"
                        else {}
                    ),
                    "raw": rating.raw,
                    "input_tokens": in_tok,
                    "output_tokens": out_tok,
                    "cost_usd": cost,
                    "latency_s": rating.latency_s,
                },
            )
        return rating

    def _rate_batch(
        self, requests: Sequence[RatingRequest], on_result: ProgressCallback | None
    ) -> list[Rating]:
        results: list[Rating | None] = [None] * len(requests)
        if self.max_concurrency == 1 or len(requests) == 1:
            for i, request in enumerate(requests):
                results[i] = self._rate_one(request)
                if on_result:
                    on_result(i, results[i])  # type: ignore[arg-type]
            return results  # type: ignore[return-value]
        with ThreadPoolExecutor(self.max_concurrency, thread_name_prefix=self.provider) as pool:
            futures: dict[Future[Rating], int] = {
                pool.submit(self._rate_one, request): i for i, request in enumerate(requests)
            }
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for future in done:
                    exc = future.exception()
                    if exc is not None:
                        # Stop scheduling more calls (e.g. BudgetExceeded); running ones
                        # finish and are cached, so a rerun picks up where this stopped.
                        for other in pending:
                            other.cancel()
                        raise exc
                    i = futures[future]
                    results[i] = future.result()
                    if on_result:
                        on_result(i, results[i])  # type: ignore[arg-type]
        return results  # type: ignore[return-value]


def classify_sdk_error(sdk: Any, exc: BaseException, judge: APIJudge) -> BaseException:
    """Map an `anthropic`/`openai` SDK exception to TransientError (retry) or JudgeError.

    Both SDKs share the same exception layout. An HTTP error's headers decide with the
    status (`judges.retry.is_retryable`): x-should-retry: false makes even a 429 or 5xx
    fatal, true makes any status retryable. Messages are redacted because an error body
    could, in principle, echo request data.
    """
    from judges.retry import TransientError, is_retryable, read_hints

    if isinstance(exc, sdk.APITimeoutError):
        return TransientError("timeout")
    if isinstance(exc, sdk.APIConnectionError):
        return TransientError("connection error")
    if isinstance(exc, sdk.APIResponseValidationError):
        return TransientError("malformed response body")
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        hint = read_hints(exc.response.headers)
        if is_retryable(status, hint):
            return TransientError(f"HTTP {status}", hint.retry_after)
        told = " (the server sent x-should-retry: false)" if hint.should_retry is False else ""
        return JudgeError(
            f"{judge.name}: HTTP {status}{told}: {judge.redact(str(exc.message))[:300]}"
        )
    if isinstance(exc, ValueError):  # json.JSONDecodeError from a garbled 200 body
        return TransientError(f"malformed response body ({type(exc).__name__})")
    return exc

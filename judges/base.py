"""The one judge interface: requests in, ratings out.

Every provider (Anthropic, OpenAI-compatible servers, a local llama.cpp model) sits behind
the same `Judge` so the panel code never needs to know who answered. A `Rating` carries the
score plus everything needed to audit it (raw answer, tokens, cost, latency, cache hit).
An abstention or an unparseable answer is `score=None`, never 0: the original research's
peers (AxBench) scored failed parses as 0, which silently biases means downwards.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from steering.registry import Registry

if TYPE_CHECKING:
    from judges.pricing import Price

SCORE_MIN = 0
SCORE_MAX = 10


class JudgeError(RuntimeError):
    """A judge failed in a way retrying cannot fix (bad request, auth, misconfiguration)."""


class JudgeUnavailable(JudgeError):
    """A judge cannot be built here (missing API key, missing package, missing model file)."""


class MissingKey(JudgeUnavailable):
    """An API judge's key is not in the environment (`key_env` names the variable).

    A provider that raises it also accepts `estimate_only=True`: the same judge built
    without its key or client, which can price a dry run (`judges.estimate`) and refuses to
    rate. The message names the variable only, never a value.
    """

    def __init__(self, key_env: str) -> None:
        super().__init__(f"${key_env} is not set")
        self.key_env = key_env


class EstimateOnly(JudgeError):
    """`rate` was called on a judge built only to estimate (no key, no client)."""


class NoJudgesError(JudgeError):
    """A panel was asked to run with no usable judge."""


class BudgetExceeded(JudgeError):
    """The next call could push spending past the cap; raised *before* the call is made."""

    def __init__(self, spent: float, cap: float, next_estimate: float, judge: str = "") -> None:
        self.spent = spent
        self.cap = cap
        self.next_estimate = next_estimate
        self.judge = judge
        who = f" by {judge}" if judge else ""
        super().__init__(
            f"Budget cap reached{who}: spent ${spent:.4f} of ${cap:.4f}; the next call may cost "
            f"up to ${next_estimate:.4f}, which would exceed the cap. Raise the cap or rerun "
            "(finished ratings are cached and cost nothing again)."
        )


AXBENCH_MIN = 0
AXBENCH_MAX = 2
AXBENCH_AXES = ("concept", "instruction", "fluency")


def harmonic_mean(scores: Sequence[float | None]) -> float | None:
    """AxBench's combination of its three 0-2 scores: their harmonic mean, 0 when any is
    0 (a text that misses one axis entirely scores 0), None when any is missing."""
    if any(s is None for s in scores):
        return None
    values = [float(s) for s in scores]  # type: ignore[arg-type]
    if any(v == 0 for v in values):
        return 0.0
    return len(values) / sum(1.0 / v for v in values)


@dataclass(frozen=True)
class Rubric:
    """The rating question, identical to the one human raters answer.

    `version` goes into every cache key: changing the wording must change the version,
    otherwise old cached scores would be reused for a different question.
    """

    question: str = "How strongly does this text relate to {concept}?"
    anchors: str = (
        "0 means the text has nothing to do with {concept}; 5 means it mentions {concept} or "
        "something closely related in passing; 10 means the text is entirely about {concept}."
    )
    version: str = "relatedness-v1"
    fluency: bool = False
    fluency_question: str = "How fluent and grammatical is this text, regardless of its topic?"
    fluency_anchors: str = (
        "0 means incoherent (broken words, loops, markup debris); 5 means understandable but "
        "clumsy; 10 means fluent, natural prose."
    )

    # "relatedness": one 0-10 score (+ fluency); "axbench": AxBench's concept, instruction
    # and fluency scores, 0-2 each, combined by harmonic mean (judges/prompt.py).
    kind: Literal["relatedness", "axbench"] = "relatedness"

    @property
    def scale(self) -> tuple[int, int]:
        return (AXBENCH_MIN, AXBENCH_MAX) if self.kind == "axbench" else (SCORE_MIN, SCORE_MAX)

    def render_question(self, concept: str) -> str:
        return self.question.format(concept=concept)

    def render_anchors(self, concept: str) -> str:
        return self.anchors.format(concept=concept)

    def describe(self) -> dict[str, str]:
        return {
            "rubric_version": self.version,
            "rubric_fluency": str(self.fluency),
            "rubric_kind": self.kind,
        }


# AxBench's three questions (concept, instruction, fluency; 0-2 each), in this suite's
# words; the score of a rating under it is their harmonic mean.
AXBENCH_RUBRIC = Rubric(
    question="How clearly is {concept} present in the continuation?",
    anchors="0: {concept} is not present at all; 1: it is somewhat present, minimally or "
    "awkwardly worked in; 2: it is fully and naturally worked in.",
    version="axbench-v1",
    fluency=True,
    fluency_question="How fluent is the continuation, whatever its topic or completeness?",
    fluency_anchors="0: not fluent, unnatural (incomprehensible or repetitive); 1: somewhat "
    "fluent with noticeable errors or awkward phrasing; 2: fluent, almost perfect.",
    kind="axbench",
)
AXBENCH_INSTRUCTION = (
    "How related is the continuation to the instruction it continues, in topic only "
    "(not grammar, coherence or informativeness)?",
    "0: unrelated to the instruction; 1: somewhat, minimally or indirectly related; "
    "2: clearly and directly related.",
)
RUBRICS: Registry[Rubric] = Registry("rubric")
RUBRICS.register("relatedness", Rubric())
RUBRICS.register("axbench", AXBENCH_RUBRIC)


@dataclass(frozen=True)
class RatingRequest:
    """One text to rate for one concept under one rubric."""

    text: str
    concept: str
    rubric: Rubric = field(default_factory=Rubric)
    sample_id: str | None = None  # carried through for bookkeeping; never shown to the judge
    instruction: str | None = None  # the prompt the text continues (the axbench rubric)


@dataclass
class Rating:
    """A judge's verdict and the audit trail for it.

    Token counts and cost are those of *this* call: a cache hit reports 0 tokens and $0,
    because a rerun spends nothing. `cost_usd` is None when the model has no known price.
    """

    score: float | None
    raw: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0
    latency_s: float = 0.0
    model: str = ""
    cache_hit: bool = False
    fluency: float | None = None
    attempts: int = 1
    error: str | None = None  # set when the judge abstained because the call kept failing
    # The axbench rubric: its concept and instruction scores (0-2; fluency above);
    # ``score`` is then their harmonic mean with fluency.
    concept_score: float | None = None
    instruction: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


ProgressCallback = Callable[[int, Rating], None]


@dataclass(frozen=True)
class JudgeEstimate:
    """What rating a set of requests would take, worked out without sending anything.

    `cached` is None when the judge cannot tell cheaply. Token figures are per-call sums
    over the calls that would be sent: `input_tokens_max` counts UTF-8 bytes + 64 per
    prompt (an upper bound for any BPE tokenizer, the budget's own reservation rule),
    `input_tokens_typical` about 4 characters per token, `output_tokens_max` max_tokens.
    `cost_usd_max` is the worst case at the judge's price: None when the price (or the
    token count) is unknown, 0.0 for a local judge or when everything is cached.
    `missing_key` names the environment variable (never its value) when the judge was
    priced without its key: the figures are what it would cost once the key is set, and a
    real run would skip it until then.
    """

    judge: str
    requests: int
    cached: int | None
    calls: int
    input_tokens_max: int | None = None
    input_tokens_typical: int | None = None
    output_tokens_max: int | None = None
    cost_usd_max: float | None = None
    price_source: str = "unknown"
    missing_key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Budget:
    """A spending cap shared by the judges of a panel (thread-safe).

    Before each call a judge reserves a conservative estimate of that call's cost; the call
    is refused if spent + reserved + estimate would exceed the cap. After the call the
    reservation is replaced by the actual cost from the usage fields.
    """

    def __init__(self, cap_usd: float | None) -> None:
        if cap_usd is not None and cap_usd < 0:
            raise ValueError("budget cap must be >= 0")
        self.cap_usd = cap_usd
        self.spent_usd = 0.0
        self._reserved = 0.0
        self._lock = threading.Lock()

    def reserve(self, estimate: float, judge: str = "") -> float:
        """Reserve `estimate` dollars or raise BudgetExceeded; returns the reserved amount."""
        with self._lock:
            if self.cap_usd is not None and (
                self.spent_usd + self._reserved + estimate > self.cap_usd
            ):
                raise BudgetExceeded(self.spent_usd + self._reserved, self.cap_usd, estimate, judge)
            self._reserved += estimate
            return estimate

    def settle(self, reserved: float, actual: float | None) -> None:
        """Swap a reservation for the actual cost (the estimate when the cost is unknown)."""
        with self._lock:
            self._reserved = max(0.0, self._reserved - reserved)
            self.spent_usd += reserved if actual is None else actual

    def release(self, reserved: float) -> None:
        """Drop a reservation for a call that was never billed (e.g. a connection error)."""
        with self._lock:
            self._reserved = max(0.0, self._reserved - reserved)

    def __repr__(self) -> str:
        return f"Budget(cap_usd={self.cap_usd}, spent_usd={self.spent_usd:.6f})"


class Judge(abc.ABC):
    """Rates texts for a concept. Subclasses implement `_rate_batch`.

    `name` is the registry name ("anthropic/claude-sonnet-4-5", "llama/embedded"), used as
    the judge's column/label everywhere. `describe()` must return only values that are safe
    to log (no keys, no credentials in URLs).
    """

    provider: str = ""
    # How calls are priced: judges.pricing.LOCAL (free), a table/explicit Price, or None
    # when unknown (cost None, shown as "unknown", never 0).
    price: Price | None = None
    # True when `rate` may be called from several threads at once (API judges): the panel
    # then rates this judge's samples in its shared bounded pool. False (the safe default,
    # and the local llama judge) keeps the judge in the panel's calling thread.
    thread_safe: bool = False

    def __init__(self, name: str, model: str) -> None:
        self.name = name
        self.model = model

    @abc.abstractmethod
    def _rate_batch(
        self, requests: Sequence[RatingRequest], on_result: ProgressCallback | None
    ) -> list[Rating]: ...

    def rate(
        self, requests: Sequence[RatingRequest], on_result: ProgressCallback | None = None
    ) -> list[Rating]:
        """Rate every request; the result list is in request order.

        `on_result(index, rating)` is called as each rating finishes (for progress bars).
        """
        if not requests:
            return []
        return self._rate_batch(list(requests), on_result)

    def estimate(self, requests: Sequence[RatingRequest]) -> JudgeEstimate:
        """A dry run: how many calls rating `requests` would make, and the worst-case cost.

        Never sends anything. This default knows neither the cache nor token counts, so
        its cost is unknown (None) unless the judge is local (0).
        """
        n = len(requests)
        local = self.price is not None and self.price.kind == "local"
        return JudgeEstimate(
            judge=self.name,
            requests=n,
            cached=None,
            calls=n,
            cost_usd_max=0.0 if local or n == 0 else None,
            price_source=self.price.source if self.price is not None else "unknown",
        )

    def rate_one(self, text: str, concept: str, rubric: Rubric | None = None) -> Rating:
        return self.rate([RatingRequest(text=text, concept=concept, rubric=rubric or Rubric())])[0]

    def describe(self) -> dict[str, str]:
        """Parameters safe to log to MLflow (strings only, never credentials)."""
        return {"name": self.name, "provider": self.provider, "model": self.model}

    def close(self) -> None:
        """Release clients or models; safe to call twice."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r})"

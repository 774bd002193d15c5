"""The rows of a run folder, typed: what the model wrote and what was measured on it.

:class:`GenerationRecord` is one line of ``generations.jsonl``, :class:`ScoreRecord` one
line of ``scores.jsonl`` and :class:`PairedColumns` the columns the analysis adds by
pairing a steered row with its unsteered twin. Every field says what it holds.

A measured field also declares, where it is defined (as Inspect AI's scorers declare
their metrics), how it is computed from one text (``compute``), how it aggregates over a
cell (a concept × strength) or a strength (:class:`Aggregate`), and where it is shown
(:class:`View`): the per-strength metrics in MLflow, the summary and terminal tables, the
child runs' generation tables and the trace feedback. Those lists are derived from the
declarations (:func:`aggregates`, :func:`columns`), so a new metric of a generated text
is a function in ``metrics/`` and one field here; ``steer-eval rescore`` applies it to
old runs.

Readers take rows as plain dicts (old runs carry fields this release dropped); writers
build them through these models, so a malformed row fails where it is made.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from metrics.semantic import steering_label
from metrics.text import count_terms, question_marks, repetition, says_what_is


class View(StrEnum):
    """Where a measure is shown."""

    PER_STRENGTH = "per_strength"  # MLflow metric <name>/s_<strength> on the parent run
    SUMMARY = "summary"  # the per-strength table of summary.md (the run's description)
    CLI = "cli"  # the per-strength table `steer-eval run` prints
    CHILD_TABLE = "child_table"  # a column of each child run's generations table
    TRACE_DELTA = "trace_delta"  # metadata of the Δ feedback on each generation's trace
    TRACE_COHERENCE = "trace_coherence"  # metadata of the coherence feedback


How = Literal["mean", "std", "median", "count"]


@dataclass(frozen=True)
class Aggregate:
    """One metric of a cell or strength, computed from one column of its rows."""

    name: str  # the metric's name: "distinct_2_mean"
    how: How
    label: str  # its column header in the tables
    shown: frozenset[View] = frozenset()
    steered_only: bool = False  # over the rows with s != 0 (None when there are none)
    seed_measure: bool = False  # one of the seed design's own measures (MLflow: seed/...)

    def of(self, cell: pd.DataFrame, column: str) -> float | None:
        rows = cell[cell["strength"] != 0] if self.steered_only else cell
        if self.how == "count":
            return float(len(rows))
        if column not in rows or not len(rows):
            return None
        if self.how == "std":
            return float(rows[column].std(ddof=0))
        values = rows[column].dropna()
        if not len(values):
            return None
        if self.how == "median":
            return float(values.median())
        return float(values.astype(float).mean())


@dataclass(frozen=True)
class Measure:
    """What a field of a row declares besides its type: how to compute it from a text
    (score fields only), its aggregates and the views that show the raw value."""

    compute: Callable[[Any], Any] | None = None
    aggregates: tuple[Aggregate, ...] = ()
    shown: frozenset[View] = field(default_factory=frozenset)


def _views(*views: View) -> frozenset[View]:
    return frozenset(views)


TABLES = _views(View.PER_STRENGTH, View.SUMMARY, View.CLI)


def mean(name: str, label: str, *views: View, **options: Any) -> Aggregate:
    return Aggregate(name, "mean", label, _views(*views), **options)


class GenerationRecord(BaseModel):
    """One line of ``generations.jsonl``: what the model wrote for one planned row."""

    model_config = ConfigDict(extra="forbid")

    key: Annotated[
        str,
        Measure(aggregates=(Aggregate("n_generations", "count", "generations"),)),
    ] = Field(description="the row's id: concept|prompt|sample|strength[|arm][|vectors][|β]")
    concept: str = Field(description="the concept's synset id")
    concept_name: str = Field(description="the concept's readable name")
    prompt_index: int = Field(description="which of the concept's prompts")
    prompt: Annotated[str, Measure(shown=_views(View.CHILD_TABLE))] = Field(
        description="the prompt the model continued (with the instruction, for the prompt arm)"
    )
    sample: Annotated[int, Measure(shown=_views(View.CHILD_TABLE))] = Field(
        description="which sample of the prompt (samples_per_prompt)"
    )
    seed: int = Field(description="the row's sampling seed, shared by every strength (CRN)")
    split: Literal["selection", "report"] = Field(
        description="selection: chooses β per concept; report: enters the criteria"
    )
    strength: float = Field(description="the strength s (0 = unsteered)")
    arm: str = Field(description="what steers it: concept, random:<j> or prompt")
    beta: float = Field(description="β of this row: s = 1 adds β × the residual norm α")
    vectors: str | None = Field(
        None, description="the probe set a concept-arm row was steered with (Phase 6)"
    )
    base_prompt: str | None = Field(
        None, description="the prompt without the instruction (prompting-baseline rows)"
    )
    text: Annotated[str, Measure(shown=_views(View.CHILD_TABLE))] = Field(
        description="the continuation, special tokens removed"
    )
    n_prompt_tokens: int = Field(description="prompt length in tokens (BOS included)")
    n_new_tokens: Annotated[int, Measure(aggregates=(mean("new_tokens_mean", "new tokens"),))] = (
        Field(description="tokens generated (fewer than max_new_tokens when EOS came)")
    )
    stopped_at_eos: bool = Field(description="whether the row ended with an EOS token")
    nll: float | None = Field(
        description="mean NLL of the continuation under the unsteered model, given the "
        "original prompt (None for an empty continuation); its exp is the perplexity"
    )
    batch_tokens_per_second: float = Field(description="the speed of the row's batch")
    started_ns: int | None = Field(
        None, description="when the row's batch began generating (Unix ns; its trace's start)"
    )
    ended_ns: int | None = Field(
        None, description="when the row's batch finished generating (Unix ns; its trace's end)"
    )

    def row(self) -> dict[str, Any]:
        """The JSON line's fields, as written: the optional ones only when set."""
        return self.model_dump(exclude_unset=True)


def _sims(index: int) -> Callable[[Any], float]:
    return lambda text: float(text.sims[index])


class ScoreRecord(BaseModel):
    """One line of ``scores.jsonl``: everything measured on one saved text, no model.

    ``compute`` reads a :class:`experiments.kernel.score.ScoredText` (the text, its
    prompt, concept, unsteered NLL, similarities to the concept's centroids and Δ
    against every concept, and the metrics config)."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="the generation's key")
    core_sim: Annotated[
        float,
        Measure(
            compute=_sims(0),
            aggregates=(mean("core_sim_mean", "cos core"),),
            shown=_views(View.CHILD_TABLE, View.TRACE_DELTA),
        ),
    ] = Field(description="cosine of the text with the concept's core centroid")
    boundary_sim: Annotated[
        float,
        Measure(
            compute=_sims(1),
            aggregates=(mean("boundary_sim_mean", "cos boundary"),),
            shown=_views(View.CHILD_TABLE, View.TRACE_DELTA),
        ),
    ] = Field(description="cosine with the boundary (related concepts) centroid")
    neg_sim: Annotated[
        float,
        Measure(
            compute=_sims(2),
            aggregates=(mean("neg_sim_mean", "cos negative"),),
            shown=_views(View.CHILD_TABLE, View.TRACE_DELTA),
        ),
    ] = Field(description="cosine with the negative (distant concepts) centroid")
    delta: Annotated[
        float,
        Measure(
            compute=lambda text: text.delta,
            aggregates=(
                mean("delta_mean", "mean Δ", *TABLES),
                Aggregate("delta_std", "std", "sd Δ", _views(View.PER_STRENGTH)),
            ),
            shown=_views(View.CHILD_TABLE),
        ),
    ] = Field(description="Δ = core_sim − neg_sim, the seed's embedding score")
    label: Annotated[
        str,
        Measure(
            compute=lambda text: steering_label(text.delta, text.metrics.delta_threshold),
            shown=_views(View.CHILD_TABLE, View.TRACE_DELTA),
        ),
    ] = Field(description="toward_core / neutral / toward_negative at ±delta_threshold")
    concept_term_count: Annotated[
        int,
        Measure(
            compute=lambda text: count_terms(text.text, text.concept.lemmas),
            aggregates=(mean("concept_term_count_mean", "concept terms", View.PER_STRENGTH),),
            shown=_views(View.CHILD_TABLE, View.TRACE_DELTA),
        ),
    ] = Field(description="occurrences of the concept's lemmas (the seed's term count)")
    related_term_count: Annotated[
        int,
        Measure(
            compute=lambda text: count_terms(text.text, text.concept.related_terms),
            aggregates=(mean("related_term_count_mean", "related terms"),),
            shown=_views(View.CHILD_TABLE),
        ),
    ] = Field(description="occurrences of the related synsets' lemmas")
    perplexity: Annotated[
        float | None,
        Measure(
            compute=lambda text: math.exp(text.nll) if text.nll is not None else None,
            aggregates=(
                Aggregate(
                    "perplexity_median", "median", "median perplexity", _views(View.PER_STRENGTH)
                ),
            ),
            shown=_views(View.CHILD_TABLE, View.TRACE_COHERENCE),
        ),
    ] = Field(description="exp(nll): the unsteered model's perplexity of the text")
    near_empty: Annotated[
        bool,
        Measure(
            compute=lambda text: text.coherence.near_empty,
            aggregates=(mean("near_empty_fraction", "near-empty", *TABLES),),
            shown=_views(View.TRACE_COHERENCE),
        ),
    ] = Field(description="fewer than 3 words")
    repeated_trigram_fraction: Annotated[
        float,
        Measure(
            compute=lambda text: text.coherence.repeated_trigram_fraction,
            aggregates=(mean("repeated_trigram_fraction_mean", "repeated 3-grams"),),
            shown=_views(View.TRACE_COHERENCE),
        ),
    ] = Field(description="fraction of word 3-grams that repeat an earlier one (loops)")
    distinct_2: Annotated[
        float,
        Measure(
            compute=lambda text: text.coherence.distinct_2,
            aggregates=(mean("distinct_2_mean", "distinct-2", *TABLES),),
            shown=_views(View.TRACE_COHERENCE),
        ),
    ] = Field(description="distinct word 2-grams / all 2-grams (low: repetitive)")
    repetition: Annotated[
        float,
        Measure(
            compute=lambda text: repetition(text.text),
            aggregates=(mean("repetition_mean", "repetition", View.PER_STRENGTH),),
            shown=_views(View.CHILD_TABLE, View.TRACE_COHERENCE),
        ),
    ] = Field(
        description="length / characters no repeated 10-character n-gram covers (1: nothing "
        "repeats; ~k: a phrase said k times); the coherence gate reads it"
    )
    echo_fraction: Annotated[
        float,
        Measure(compute=lambda text: text.coherence.echo_fraction),
    ] = Field(description="fraction of the prompt's 2-grams the text repeats")
    is_echo: Annotated[
        bool,
        Measure(
            compute=lambda text: text.coherence.echo_fraction >= text.metrics.echo_threshold,
            aggregates=(mean("echo_fraction", "echoes", View.PER_STRENGTH),),
            shown=_views(View.TRACE_COHERENCE),
        ),
    ] = Field(description="echo_fraction ≥ echo_threshold: the text mostly echoes its prompt")
    question_marks: Annotated[
        float,
        Measure(
            compute=lambda text: question_marks(text.text),
            aggregates=(
                mean("question_marks_mean", "? per text", View.PER_STRENGTH, View.SUMMARY),
            ),
        ),
    ] = Field(description="question marks in the text (a question-format direction's mark)")
    has_what_is: Annotated[
        bool,
        Measure(
            compute=lambda text: says_what_is(text.text),
            aggregates=(mean("what_is_fraction", "'what is'", View.PER_STRENGTH, View.SUMMARY),),
        ),
    ] = Field(description='whether the text says "what is" (the first release\'s probe texts)')
    delta_by_concept: Annotated[
        dict[str, float], Measure(compute=lambda text: dict(text.delta_by_concept))
    ] = Field(description="Δ of the text against every concept's centroids (specificity)")

    @classmethod
    def of(cls, key: str, text: Any) -> ScoreRecord:
        """Every declared measure of one text."""
        return cls(key=key, **{name: m.compute(text) for name, m in _measures(cls) if m.compute})

    def row(self) -> dict[str, Any]:
        return self.model_dump()


class PairedColumns(BaseModel):
    """What the analysis adds to each row by pairing it with its unsteered twin (same
    concept, prompt and sample): the seed's paired shift."""

    delta_0: float | None = Field(description="Δ of the unsteered twin")
    shift: Annotated[float | None, Measure(shown=_views(View.CHILD_TABLE))] = Field(
        description="Δ_s − Δ_0"
    )
    magnitude: Annotated[
        float | None,
        Measure(
            aggregates=(
                mean(
                    "magnitude_mean",
                    "mean |Δs−Δ0|",
                    *TABLES,
                    steered_only=True,
                    seed_measure=True,
                ),
            )
        ),
    ] = Field(description="|Δ_s − Δ_0|, the seed's steering magnitude")
    direction: float | None = Field(description="sign(Δ_s − Δ_0)")
    moved_as_expected: Annotated[
        float | None,
        Measure(
            aggregates=(
                mean(
                    "direction_accuracy",
                    "direction accuracy",
                    *TABLES,
                    steered_only=True,
                    seed_measure=True,
                ),
            )
        ),
    ] = Field(description="sign(s)·shift > 0 (NaN for s = 0 or without a twin)")


# The schemas whose columns a records table (generations ⋈ scores ⋈ pairing) holds, in
# the order their aggregates and columns are listed.
SCHEMAS: tuple[type[BaseModel], ...] = (ScoreRecord, PairedColumns, GenerationRecord)


def _measures(schema: type[BaseModel]) -> list[tuple[str, Measure]]:
    return [
        (name, item)
        for name, info in schema.model_fields.items()
        for item in info.metadata
        if isinstance(item, Measure)
    ]


def aggregates(view: View | None = None) -> list[tuple[str, Aggregate]]:
    """(column, aggregate) of every declared aggregate, or of those shown in ``view``."""
    return [
        (column, agg)
        for schema in SCHEMAS
        for column, measure in _measures(schema)
        for agg in measure.aggregates
        if view is None or view in agg.shown
    ]


def columns(view: View) -> list[str]:
    """The row columns shown raw in ``view`` (a child table's columns, trace metadata)."""
    return [
        column
        for schema in (GenerationRecord, ScoreRecord, PairedColumns)
        for column, measure in _measures(schema)
        if view in measure.shown
    ]


def cell_metrics(cell: pd.DataFrame) -> dict[str, float | None]:
    """Every declared aggregate of one cell (a concept × strength, or a whole strength)."""
    return {agg.name: agg.of(cell, column) for column, agg in aggregates()}


def describe(schema: type[BaseModel]) -> dict[str, str]:
    """Field -> description, for documentation and ``--help`` texts."""
    return {name: info.description or "" for name, info in schema.model_fields.items()}


def number(value: object) -> float:
    """A numeric cell or group key of a frame as a float (pandas types them as any
    hashable); a TypeError for a value that is not a number."""
    if not isinstance(value, numbers.Real):
        raise TypeError(f"not a number: {value!r}")
    return float(value)


def finite(value: object) -> float | None:
    """A number as a record stores it: None for a missing or non-finite one (JSON has no
    NaN), a float otherwise; a TypeError for a value that is not a number."""
    if value is None:
        return None
    found = number(value)
    return found if math.isfinite(found) else None

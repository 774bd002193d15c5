"""The answer block of every phase: one typed :class:`Answer`, one wording, one formatter.

A phase builds its :class:`Answer` from its record alone (Phase 5:
``phase5/answer.py``; Phase 6: ``calibration/answer.py``; identify:
``identify/answer.py``); everything a reader sees of it comes from here, so the
terminal, ``--json``, ``answer.md``, ``criteria.csv`` and the MLflow descriptions say
the same thing in the same words:

- a verdict's status is one of :data:`STATUSES`' keys (``criteria.csv``, ``--json`` and
  the MLflow tags keep the key); every view a person reads shows the status's one word
  from the same table (:func:`status_word`: ``not_evaluable`` reads "not evaluable"),
  and the headline and the table show the same reading of the interval against the
  threshold (:func:`reading`, from the numbers alone: an interval above 0 but below a
  positive threshold reads "real, short of the threshold", not "no", except for a
  share, which is never below 0; a verdict without an interval reads "no interval
  (point value)"; a verdict with no value reads its reason; a judged verdict's
  ``beside``, what it is read beside, follows its reading);
- numbers are formatted by :func:`number` and :func:`interval_text` only.

Longer than 500 lines: every phase's answer, from its verdicts to each view a person
reads, in one wording; split, the views would drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from experiments.rundir import neutralise
from metrics.intervals import Interval

if TYPE_CHECKING:
    from experiments.record.phase5 import SteeredIntervention

ANSWER_HEADING = "## The answer"
# Where the answer block ends in a text that continues (the MLflow run description).
END_MARK = "\n---\n"


@dataclass(frozen=True)
class Status:
    """How a status reads: its one word for people and its colour in the terminal."""

    word: str
    colour: str


# The one vocabulary of statuses: each key (what files and MLflow keep; the statuses of
# ``metrics.criteria.STATUSES``) and the word every view a person reads shows for it.
STATUSES = {
    "pass": Status("pass", "green"),
    "fail": Status("fail", "red"),
    "inconclusive": Status("inconclusive", "yellow"),
    "not_evaluable": Status("not evaluable", "dim"),
    "pending": Status("pending", "dim"),
    "panel_required": Status("panel required", "dim"),
}
# Statuses that rest on where an interval (or a point value) lies against a threshold.
JUDGED = ("pass", "fail", "inconclusive")
SIGN_LABELS = {"pos": "s > 0", "neg": "s < 0", "both": "both signs"}
CRITERIA_COLUMNS = (
    "key",
    "group",
    "label",
    "value",
    "low",
    "high",
    "threshold",
    "status",
    "reading",
    "n",
    "method",
    "reason",
    "description",
)


@dataclass(frozen=True)
class DirectionOrigin:
    """How an answer names where a run's steering directions came from, and so whose
    detection quality its predictor is (``steering.vector_source``)."""

    quality: str  # whose quality the predictor measures, and on what
    steering: str  # what the text is steered along
    detector: str  # what a degenerate one is: its detector, in a word


def direction_origin(vector_source: str, predictor: str) -> DirectionOrigin:
    """The words for a run's directions: the trained probes' own weights
    (``classifier``), another direction source's direction (``diffmean``, ...; the
    predictor is still the trained probe's), or imported vectors (``file``; each scored
    as a detector on the probes' held-out texts)."""
    if vector_source == "file":
        return DirectionOrigin(
            quality=f"an imported vector's detection quality ({predictor} of its projection "
            "on the probes' held-out texts)",
            steering="along that vector (imported from a file)",
            detector="imported vector",
        )
    if vector_source == "classifier":
        return DirectionOrigin(
            quality=f"a concept classifier's quality ({predictor}, held-out texts)",
            steering="along its direction (the trained probe's weights)",
            detector="probe",
        )
    return DirectionOrigin(
        quality=f"a concept classifier's quality ({predictor} of the trained probe, "
        "held-out texts)",
        steering=f"along the concept's direction from the direction source {vector_source}",
        detector="probe",
    )


def intervention_words(layer: int, intervention: SteeredIntervention | None) -> str:
    """Where and how a run steered, exactly: ``at layer 9`` for one layer at α·β, or a
    vector file as deployed (``steering.layers``/``scale``, the record's
    ``diagnostics.intervention``): its layers, what each adds per strength s, the
    coefficient, and at the run's layer the β that amounts to (k·‖v‖/α)."""
    if intervention is None:
        return f"at layer {layer}"
    layers = intervention.layers
    shown = ", ".join(map(str, layers))
    where = f"at layer {shown}" if len(layers) == 1 else f"at layers {shown} in one pass"
    if intervention.scale == "file":
        k = intervention.coefficient or 0.0
        betas = [b[str(layer)] for b in intervention.betas.values() if str(layer) in b]
        span = f"{min(betas):.3f}" if betas else "n/a"
        if len(betas) > 1 and f"{max(betas):.3f}" != span:
            span += f"-{max(betas):.3f}"
        adds = f"h_l += s·{k:g}·v_l" if len(layers) > 1 else f"h += s·{k:g}·v"
        return (
            f"{where} with the file's own {'vectors' if len(layers) > 1 else 'vector'}, "
            f"{adds} (steering.scale: file, coefficient {k:g}; at layer {layer}, where α is "
            f"measured, that is β = k·‖v‖/α = {span})"
        )
    beta = intervention.beta
    return (
        f"{where}, each layer's vector normalised and steered at s·β·α_l "
        f"(β = {beta:g}, α_l that layer's median residual norm)"
        if beta is not None
        else where
    )


def status_word(status: str) -> str:
    """The word people read for a status (:data:`STATUSES`); an unknown key as it is."""
    known = STATUSES.get(status)
    return known.word if known else status


def status_colour(status: str) -> str:
    """The terminal's colour for a status (dim for an unknown key)."""
    known = STATUSES.get(status)
    return known.colour if known else "dim"


def number(value: object, spec: str = "+.3f") -> str:
    """The one number format of every answer, summary and table (``spec``: a format
    spec): ``n/a`` for a missing, non-numeric or non-finite value."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "n/a"
    return "n/a" if isinstance(value, float) and not math.isfinite(value) else format(value, spec)


def estimate_text(
    estimate: object,
    low: object = None,
    high: object = None,
    spec: str = "+.3f",
    reason: str = "",
) -> str:
    """``+0.123 [+0.010, +0.250]``; ``n/a (reason)`` without an estimate; ``[no interval]``
    without bounds."""
    if estimate is None:
        return "n/a" + (f" ({reason})" if reason else "")
    if low is None or high is None:
        return f"{number(estimate, spec)} [no interval]"
    return f"{number(estimate, spec)} [{number(low, spec)}, {number(high, spec)}]"


def significant(value: object, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, signed, trailing zeros kept (``+0.412``,
    ``-12.0``, ``+1.20e-05``): the tables that compare runs (``steer-eval runs``, the
    MLflow runs table's verdict columns); ``n/a`` as :func:`number` says it."""
    return number(value, f"+#.{digits}g").replace("e-0", "e-").replace("e+0", "e+")


def value_interval(value: object, low: object = None, high: object = None) -> str:
    """``+0.412 [+0.210, +0.600]`` in :func:`significant` digits; the value alone
    without an interval; "" without a value."""
    if value is None:
        return ""
    if low is None or high is None:
        return significant(value)
    return f"{significant(value)} [{significant(low)}, {significant(high)}]"


def verdict_cell(status: str, value: object, low: object = None, high: object = None) -> str:
    """A verdict as one cell of a table that compares runs: its status's word, then its
    observed value and interval (``pass +0.412 [+0.210, +0.600]``)."""
    return f"{status_word(status)} {value_interval(value, low, high)}".strip()


# The MLflow runs table shows a tag's key as its column header, cut to the column's
# width: so a verdict's tag leads with its sign and what it judges, no common prefix.
VERDICT_TAG_PREFIX = "v2_"


def verdict_tag_key(v: Verdict) -> str:
    """The tag (and runs-table column) holding a verdict's cell: its sign first, then its
    key without the ``v2_`` every Phase 5 criterion starts with, in words (``pos effect
    above null``); characters MLflow refuses in a key become ``_``."""
    name = v.key.removeprefix(VERDICT_TAG_PREFIX)
    if v.sign in ("pos", "neg"):
        for sep in ("_", "/"):
            if name.endswith(sep + v.sign):
                name = f"{v.sign} {name.removesuffix(sep + v.sign)}"
                break
    name = name.replace("_", " ")
    return "".join(c if c.isalnum() or c in "/.- " else "_" for c in name)


def verdict_tags(answer: Answer) -> dict[str, str]:
    """One tag per headline verdict (:func:`verdict_tag_key` → :func:`verdict_cell`), so
    the runs table reads each run's status, value and interval in one column."""
    return {
        verdict_tag_key(v): verdict_cell(v.status, v.value, v.low, v.high) for v in answer.verdicts
    }


def estimate_of(interval: Interval, spec: str = "+.3f", why: str = "") -> str:
    """:func:`estimate_text` of an Interval (``why`` when it gives no reason)."""
    i = interval
    return estimate_text(i.estimate, i.low, i.high, spec, i.reason or why)


@dataclass(frozen=True)
class Verdict:
    """One criterion as every view of the answer shows it: its value and interval (at
    the answer's confidence; none for the seed's criteria), how the interval was made
    and why there is none, in one :class:`~metrics.intervals.Interval`."""

    key: str  # stable name: the criterion key, and the MLflow metric under v2/criterion/
    label: str  # what is judged, in words
    group: str  # what it is about: a sign ("s > 0") or a sign, source and layer
    interval: Interval
    status: str  # a key of STATUSES
    threshold: float
    n: int | None = None  # how many units the interval rests on
    units: str = "concepts"  # what those units are (the unit resampled)
    description: str = ""
    claim: str = ""  # the headline's subject ("the predictor predicts the effect"); "" = none
    symbol: str = ""  # what the value is ("r = ", "slope ") in the headline
    direction: str = "above"  # pass means the interval lies above (or below) the threshold
    sign: str = "both"  # pos, neg or both: the sign of the strength it is about
    # A share in [0, 1] (of texts that moved the right way, ...): never below 0, so its
    # interval is read against its threshold alone, never as "real (interval above 0)".
    share: bool = False
    # What a reader sets beside the value, in words, read after it (Phase 5: the null's
    # gate-pass rate beside the effect above it; a share's random-direction value).
    beside: str = ""

    @property
    def value(self) -> float | None:
        return self.interval.estimate

    @property
    def low(self) -> float | None:
        return self.interval.low

    @property
    def high(self) -> float | None:
        return self.interval.high

    @property
    def method(self) -> str:
        return self.interval.method

    @property
    def reason(self) -> str:
        """Why this status, or why not evaluable."""
        return self.interval.reason

    def to_dict(self) -> dict[str, Any]:
        """``answer.json``'s verdict: the interval's fields flat, as the answer reads them."""
        head = {"key": self.key, "label": self.label, "group": self.group}
        numbers = {"value": self.value, "low": self.low, "high": self.high}
        judged = {"status": self.status, "threshold": self.threshold, "method": self.method}
        counted = {"n": self.n, "units": self.units, "reason": self.reason}
        rest = {
            k: v for k, v in asdict(self).items() if k not in (*head, "interval", *judged, *counted)
        }
        return {**head, **numbers, **judged, **counted, **rest, "reading": reading(self)}


@dataclass(frozen=True)
class AnswerTable:
    """A table an answer shows under its verdicts (Phase 5: what ``--layer auto-effect``
    measured at each candidate layer), its cells already in words."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "rows": [dict(zip(self.columns, r, strict=True)) for r in self.rows],
        }


@dataclass
class Answer:
    """A phase's answer: the question, its verdicts (headline ones carry a ``claim``),
    notes, and the seed design's criteria where the phase has them."""

    phase: str
    run_id: str
    question: str
    confidence: float
    verdicts: list[Verdict] = field(default_factory=list)
    seed: list[Verdict] = field(default_factory=list)
    seed_label: str = ""
    notes: list[str] = field(default_factory=list)  # plain sentences under the headlines
    figures: tuple[str, ...] = ()
    # Run-folder files a reader checks the verdicts against (Phase 5: samples.csv, every
    # steered text beside its twins), each with its address among the MLflow run's
    # artefacts ("" where the run has none): answer.md links the file beside it, MLflow's
    # copy links the address.
    texts: dict[str, str] = field(default_factory=dict)
    tables: list[AnswerTable] = field(default_factory=list)  # under the verdicts

    def headlines(self) -> dict[str, str]:
        """One plain sentence per group that has headline verdicts, in verdict order."""
        groups: dict[str, list[Verdict]] = {}
        for v in self.verdicts:
            if v.claim:
                groups.setdefault(v.group, []).append(v)
        return {g: "; ".join(headline_part(v) for v in vs) for g, vs in groups.items()}

    def to_dict(self) -> dict[str, Any]:
        """``--json``'s one shape for every phase: plain text, no markdown."""
        return {
            "phase": self.phase,
            "run_id": self.run_id,
            "question": self.question,
            "confidence": self.confidence,
            "headlines": self.headlines(),
            "notes": list(self.notes),
            "criteria": {v.key: v.to_dict() for v in self.verdicts},
            "seed_criteria": {v.key: v.to_dict() for v in self.seed},
            **({"tables": [t.to_dict() for t in self.tables]} if self.tables else {}),
        }


def reading(v: Verdict) -> str:
    """The verdict in words, read from its numbers alone: where the interval lies against
    the threshold (and 0). A verdict that was not judged (not evaluable, pending, the
    panel required) reads its reason; one without an interval reads "no interval (point
    value)" whatever its status says; an interval that reaches the threshold spans it
    (a pass needs the whole interval beyond it, as ``metrics.intervals.interval_verdict``).
    A share is read against its threshold alone (it is never below 0, so "above 0" says
    nothing); what a judged verdict sets beside its value (``beside``) follows."""
    if v.status not in JUDGED:
        return v.reason or status_word(v.status)
    said = interval_reading(v.low, v.high, v.threshold, v.direction, share=v.share)
    return f"{said}; {v.beside}" if v.beside else said


def interval_reading(
    low: float | None,
    high: float | None,
    threshold: float,
    direction: str = "above",
    share: bool = False,
) -> str:
    """Where ``[low, high]`` lies against ``threshold``, in words (``direction``: the side
    a pass lies on). "real (interval above 0), short of the threshold" when it misses a
    threshold beyond 0 but excludes 0 on the threshold's side; never for a ``share``
    (a share in [0, 1] always lies above 0: it reads "interval below" its threshold)."""
    if low is None or high is None:
        return "no interval (point value)"
    t = f"{threshold:g}"
    if low > threshold:
        if direction == "below" and high < 0 and not share:
            return f"real (interval below 0), short of the threshold {t}"
        return f"interval above {t}"
    if high < threshold:
        if direction == "above" and low > 0 and not share:
            return f"real (interval above 0), short of the threshold {t}"
        return f"interval below {t}"
    return f"interval spans {t}"


def interval_text(v: Verdict, spec: str = "+.3f") -> str:
    if v.low is None or v.high is None:
        return "no interval"
    return f"[{number(v.low, spec)}, {number(v.high, spec)}]"


def headline_part(v: Verdict) -> str:
    """``claim: status (value [low, high] over n units, reading)``."""
    if v.value is None:
        detail = v.reason or reading(v)
    else:
        n = f" over {v.n} {v.units}" if v.n else ""
        detail = f"{v.symbol}{number(v.value)} {interval_text(v)}{n}, {reading(v)}"
    return f"{v.claim}: {status_word(v.status)} ({detail})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def answer_markdown(answer: Answer, figure_link: Callable[[str], str] | None = None) -> str:
    """``answer.md`` and the top of the MLflow run description; ends with ``---``. Each
    figure is a link: relative to ``answer.md`` in the run folder, else ``figure_link``'s
    (MLflow's copy opens the run's artefact). The texts behind the verdicts
    (``answer.texts``) come first, linked the same way (MLflow's copy: their address)."""
    level = f"{answer.confidence:.0%}"
    lines = [f"{ANSWER_HEADING} (run `{answer.run_id}`)", "", f"**Question.** {answer.question}"]
    lines.append("")
    for group, text in answer.headlines().items():
        lines.append(f"- **{group}:** {text}")
    lines += [f"- {note}" for note in answer.notes]
    if answer.verdicts:
        lines += [
            "",
            f"| group | criterion | value | {level} interval | threshold | status | reading |",
            "|---|---|---|---|---|---|---|",
        ]
    for v in answer.verdicts:
        lines.append(
            f"| {_cell(v.group)} | {_cell(v.label)} | {number(v.value)} | {interval_text(v)} "
            f"| {v.threshold:g} | **{status_word(v.status)}** | {_cell(reading(v))} |"
        )
    for table in answer.tables:
        lines += ["", f"{table.title}:", "", "| " + " | ".join(table.columns) + " |"]
        lines.append("|" + "---|" * len(table.columns))
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
    if answer.seed:
        lines += ["", f"{answer.seed_label}:", ""]
        lines += [
            "| criterion (seed) | value | threshold | status | note |",
            "|---|---|---|---|---|",
        ]
        for v in answer.seed:
            lines.append(
                f"| {v.key} | {number(v.value)} | {v.threshold:g} | {status_word(v.status)} "
                f"| {_cell(v.reason)} |"
            )
    if answer.texts:
        links = ", ".join(
            f"[{name}]({(figure_link and address) or name})"
            for name, address in answer.texts.items()
        )
        lines += ["", f"The texts behind the verdicts: {links}."]
    if answer.figures:
        link = figure_link or (lambda name: name)
        links = ", ".join(f"[{name}]({link(name)})" for name in answer.figures)
        lines += ["", f"Figures: {links}."]
    return "\n".join(lines) + "\n" + END_MARK


def answer_line(answer: Answer, name: str, link: str) -> str:
    """The answer for the experiment's description: a first line short enough for the
    collapsed description (each headline verdict's status per group, linked to the run's
    answer), then the values and intervals."""
    short: dict[str, list[str]] = {}
    detail = []
    for v in answer.verdicts:
        if not v.claim:
            continue
        short.setdefault(v.label, []).append(f"{v.group} **{status_word(v.status)}**")
        if v.value is not None:
            detail.append(
                f"{v.label} at {v.group} {number(v.value, '+.2f')} {interval_text(v, '+.2f')}"
            )
    first = f"**Latest answer** ([open]({link})): " + "; ".join(
        f"{label}: {', '.join(parts)}" for label, parts in short.items()
    )
    return first + f".\n\nRun {name}: " + "; ".join(detail) + "."


def with_answer(note: str, block: str) -> str:
    """``note`` with its leading answer block replaced by ``block`` (or ``block`` put
    first when it has none)."""
    if note.startswith(ANSWER_HEADING) and END_MARK in note:
        note = note.split(END_MARK, 1)[1]
    return block + "\n" + note.lstrip("\n")


def criteria_rows(answer: Answer) -> Iterable[dict[str, Any]]:
    """``criteria.csv``'s rows: every verdict, then the seed's criteria."""
    for v in (*answer.verdicts, *answer.seed):
        row = v.to_dict()
        yield {column: row.get(column) for column in CRITERIA_COLUMNS}


def criteria_csv(answer: Answer) -> str:
    """``criteria.csv``: value, low, high, threshold and status per criterion. Text cells
    that a spreadsheet would run as a formula are neutralised (``rundir.neutralise``)."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CRITERIA_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in criteria_rows(answer):
        writer.writerow({k: _safe(v) for k, v in row.items()})
    return buffer.getvalue()


def _safe(value: object) -> object:
    if value is None:
        return ""
    return neutralise(value) if isinstance(value, str) else value

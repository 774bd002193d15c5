"""The answer block: what a Phase 5 run says about the research question, from its record.

One builder (:func:`answer_of`) reads the :class:`~experiments.record.RunRecord` alone,
so the terminal after ``run`` and ``rescore``, ``--json``, the top of the MLflow run
description and the run folder's ``answer.md`` all say the same thing. It holds:

- the research question, with the run's predictor, model and concept count;
- every v2 verdict (each criterion key starting ``v2_``, so criteria added later appear
  without a change here), grouped per sign, with value, interval
  (``record.statistics["intervals"]``), threshold and status, and one headline per sign;
- below them, the seed design's four criteria, labelled as the original design's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from experiments.record import RunRecord

V2_PREFIX = "v2_"
# Suffix of a per-sign criterion key -> the sign it is about.
SIGN_SUFFIXES = {"_pos": "pos", "_neg": "neg"}
SIGN_LABELS = {"pos": "s > 0", "neg": "s < 0", "both": "both"}
# Known v2 criteria: a short label, in the order a reader wants them (the question first).
# A key not listed here is labelled from its name and listed after these.
KNOWN_V2 = {
    "predictor_vs_effect": "predictor → effect above null (r)",
    "effect_above_null": "effect above null (gated)",
    "direction": "moved the right way (share)",
    "c4_human_or_panel": "humans or panel agree with Δ",
}
SEED_LABEL = (
    "The original design's criteria (the seed's four: point values without intervals; "
    "criterion 3 correlates ten or fewer concepts and is mostly noise)"
)
ANSWER_HEADING = "## The answer"
# Where the answer block ends in a text that continues (the MLflow run description).
END_MARK = "\n---\n"


@dataclass(frozen=True)
class Verdict:
    """One criterion as the answer shows it."""

    key: str
    label: str
    sign: str  # pos, neg or both
    value: float | None
    low: float | None
    high: float | None
    status: str
    threshold: float
    method: str
    n: int | None
    reason: str
    description: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Answer:
    """The research question, the v2 verdicts per sign, the seed's criteria."""

    run_id: str
    question: str
    confidence: float
    headlines: dict[str, str] = field(default_factory=dict)  # sign -> one sentence
    verdicts: list[Verdict] = field(default_factory=list)  # v2, grouped per sign
    seed: list[Verdict] = field(default_factory=list)  # c1..c4

    def to_dict(self) -> dict:
        """The structured form of ``--json``: per criterion value, low, high, status,
        threshold (and how the interval was made)."""
        return {
            "run_id": self.run_id,
            "question": self.question,
            "confidence": self.confidence,
            "headlines": dict(self.headlines),
            "criteria": {v.key: v.to_dict() for v in self.verdicts},
            "seed_criteria": {v.key: v.to_dict() for v in self.seed},
        }


def split_key(key: str) -> tuple[str, str]:
    """(base name without ``v2_`` and sign suffix, sign) of a criterion key."""
    base = key.removeprefix(V2_PREFIX)
    for suffix, sign in SIGN_SUFFIXES.items():
        if base.endswith(suffix):
            return base.removesuffix(suffix), sign
    return base, "both"


def _label(base: str) -> str:
    return KNOWN_V2.get(base, base.replace("_", " "))


def _rank(key: str) -> tuple[int, int]:
    base, sign = split_key(key)
    known = list(KNOWN_V2)
    sign_rank = {"pos": 0, "neg": 1, "both": 2}[sign]
    return sign_rank, known.index(base) if base in known else len(known)


def question(record: RunRecord) -> str:
    predictor = record.config.criteria.predictor
    n = len(record.per_concept) or len(record.predictors)
    return (
        f"Does a concept classifier's quality ({predictor}, held-out texts) predict how "
        "strongly steering along its direction moves the model's text toward the concept, "
        f"beyond random directions? Per sign of the strength; {n} concepts, "
        f"{record.model_id} at layer {record.layer}."
    )


def verdicts(record: RunRecord) -> list[Verdict]:
    """Every v2 criterion of the record with its interval, per sign, the question first."""
    intervals = record.statistics.get("intervals", {})
    keys = sorted((k for k in record.criteria if k.startswith(V2_PREFIX)), key=_rank)
    out = []
    for key in keys:
        c = record.criteria[key]
        base, sign = split_key(key)
        interval = intervals.get(key, {})
        out.append(
            Verdict(
                key=key,
                label=_label(base),
                sign=sign,
                value=c.value,
                low=interval.get("low"),
                high=interval.get("high"),
                status=c.status,
                threshold=c.threshold,
                method=str(interval.get("method", "")),
                n=interval.get("n"),
                reason=c.reason,
                description=c.description,
            )
        )
    return out


def seed_verdicts(record: RunRecord) -> list[Verdict]:
    """The seed's criteria (c1-c4), without intervals (the seed design had none)."""
    out = []
    for key in sorted(k for k in record.criteria if not k.startswith(V2_PREFIX)):
        c = record.criteria[key]
        out.append(
            Verdict(
                key=key,
                label=c.description,
                sign="both",
                value=c.value,
                low=None,
                high=None,
                status=c.status,
                threshold=c.threshold,
                method="",
                n=None,
                reason=c.reason,
                description=c.description,
            )
        )
    return out


def fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:+.{digits}f}"


def interval_text(v: Verdict, digits: int = 3) -> str:
    if v.low is None or v.high is None:
        return "no interval"
    return f"[{fmt(v.low, digits)}, {fmt(v.high, digits)}]"


def _reading(v: Verdict) -> str:
    """The verdict in words: where the interval lies against the threshold."""
    return {
        "pass": f"interval above {v.threshold:g}",
        "fail": f"interval below {v.threshold:g}",
        "inconclusive": f"interval spans {v.threshold:g}",
        "not_evaluable": "not evaluable",
        "pending": "pending",
        "panel_required": "the judge panel is needed",
    }.get(v.status, v.status)


def headline(sign_verdicts: list[Verdict]) -> str:
    """One sentence per sign: the answer to the question, then whether steering moved
    the text beyond random directions at all."""
    by_base = {split_key(v.key)[0]: v for v in sign_verdicts}
    words = {"pass": "yes", "fail": "no", "inconclusive": "undecided"}
    parts = []
    for base, what, symbol in (
        ("predictor_vs_effect", "the predictor predicts the effect", "r = "),
        ("effect_above_null", "the effect above random directions clears its threshold", ""),
    ):
        v = by_base.get(base)
        if v is None:
            continue
        answer = words.get(v.status, v.status.replace("_", " "))
        if v.value is None:
            detail = v.reason
        else:
            n = f" over {v.n} concepts" if base == "predictor_vs_effect" and v.n else ""
            detail = f"{symbol}{fmt(v.value)} {interval_text(v)}{n}, {_reading(v)}"
        parts.append(f"{what}: **{answer}** ({detail})")
    return "; ".join(parts)


def answer_of(record: RunRecord) -> Answer:
    """The answer block of a run, from its record alone."""
    found = verdicts(record)
    headlines = {}
    for sign in ("pos", "neg"):
        text = headline([v for v in found if v.sign == sign])
        if text:
            headlines[sign] = text
    return Answer(
        run_id=record.run_id,
        question=question(record),
        confidence=record.config.criteria.confidence,
        headlines=headlines,
        verdicts=found,
        seed=seed_verdicts(record),
    )


def answer_line(answer: Answer, name: str, link: str) -> str:
    """The answer for the experiment's description: a first line short enough to show
    in the collapsed description (the verdicts per sign, linked to the run's answer),
    then the values and intervals."""
    words = {"pass": "yes", "fail": "no", "inconclusive": "undecided"}
    short, detail = [], []
    for base, what in (
        ("predictor_vs_effect", "predictor → effect"),
        ("effect_above_null", "effect above null"),
    ):
        found = [v for v in answer.verdicts if split_key(v.key)[0] == base and v.sign != "both"]
        if not found:
            continue
        short.append(
            f"{what}: "
            + ", ".join(
                f"{SIGN_LABELS[v.sign]} **{words.get(v.status, v.status.replace('_', ' '))}**"
                for v in found
            )
        )
        detail += [
            f"{what} at {SIGN_LABELS[v.sign]} {fmt(v.value, 2)} {interval_text(v, 2)}"
            for v in found
            if v.value is not None
        ]
    first = f"**Latest answer** ([open]({link})): " + "; ".join(short) + "."
    return first + f"\n\nRun {name}: " + "; ".join(detail) + "."


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def answer_markdown(answer: Answer, figures: tuple[str, ...] = ()) -> str:
    """``answer.md`` and the top of the MLflow run description; ends with ``---``."""
    level = f"{answer.confidence:.0%}"
    lines = [
        f"{ANSWER_HEADING} (run `{answer.run_id}`)",
        "",
        f"**Question.** {answer.question}",
        "",
    ]
    for sign, text in answer.headlines.items():
        lines.append(f"- **{SIGN_LABELS[sign]}:** {text}")
    lines += [
        "",
        f"| sign | criterion (v2) | value | {level} interval | threshold | status |",
        "|---|---|---|---|---|---|",
    ]
    for v in answer.verdicts:
        lines.append(
            f"| {SIGN_LABELS[v.sign]} | {_cell(v.label)} | {fmt(v.value)} | {interval_text(v)} "
            f"| {v.threshold:g} | **{v.status}** |"
        )
    lines += ["", f"{SEED_LABEL}:", "", "| criterion (seed) | value | threshold | status | note |"]
    lines.append("|---|---|---|---|---|")
    for v in answer.seed:
        lines.append(
            f"| {v.key} | {fmt(v.value)} | {v.threshold:g} | {v.status} | {_cell(v.reason)} |"
        )
    if figures:
        lines += ["", "Figures: " + ", ".join(f"`{name}`" for name in figures) + "."]
    return "\n".join(lines) + "\n" + END_MARK


def with_answer(note: str, block: str) -> str:
    """``note`` with its leading answer block replaced by ``block`` (or ``block`` put
    first when it has none)."""
    if note.startswith(ANSWER_HEADING) and END_MARK in note:
        note = note.split(END_MARK, 1)[1]
    return block + "\n" + note.lstrip("\n")

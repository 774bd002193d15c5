"""The samples view: every steered text beside its unsteered and random-direction twins.

A verdict pools hundreds of texts; a reader who doubts it wants to see which texts moved,
which the coherence gate failed and why, and what a random direction did to the same
prompt. This is one row per steered concept-arm text of the report split (what the v2
criteria are computed from), with the numbers each criterion reads, taken from the same
functions the criteria use (``kernel/effect.py``), so the table cannot disagree with
the answer. It is a view: nothing here changes a number. Written once per publish as
``samples.csv`` (cells neutralised: generated text is untrusted; ``answer.md`` links it)
and the MLflow table ``samples.json``, text first (:data:`COLUMNS`); ``steer-eval
samples <run>`` prints it.
"""

from __future__ import annotations

import csv
import difflib
import io
from collections.abc import Mapping

import pandas as pd

from experiments.config import RunConfig
from experiments.kernel.effect import SIGNS, UNIT, above_null, paired_effects
from experiments.kernel.gate import (
    alphabetic_limit,
    alphabetic_shares,
    coherence_gate,
    repetition_limit,
    repetitions,
)
from experiments.kernel.gate import column as _col
from experiments.kernel.plan import CONCEPT_ARM
from experiments.rundir import RunDir, neutralise, restore
from experiments.tracking.traces import read_map

# The table's columns, in order: the text first, as a reader reads (the MLflow UI shows
# a dozen characters of each cell, so what comes first is what is seen); then what was
# measured on it; then its unsteered and random-direction twins, each with what the gate
# and the effect made of it; the keys last. docs/mlflow.md describes each.
COLUMNS = (
    "text",
    "concept",
    "sign",
    "strength",
    "delta_s",
    "gate",
    "gate_reason",
    "effect",
    "effect_gated",
    "effect_above_null",
    "text_unsteered",
    "delta_0",
    "gate_unsteered",
    "gate_reason_unsteered",
    "text_random",
    "delta_random",
    "gate_random",
    "gate_reason_random",
    "effect_random",
    "perplexity_ratio_random",
    "repetition_random",
    "alphabetic_share_random",
    "perplexity_ratio",
    "repetition",
    "alphabetic_share",
    "alphabetic_share_unsteered",
    "likelihood",
    "prompt",
    "sample",
    "trace_id",
    "key",
    "key_unsteered",
    "key_random",
)
GATE = {True: "pass", False: "fail"}


def random_twins(effects: pd.DataFrame) -> pd.DataFrame:
    """Per (unit, sign): the first random direction's row (by arm name) of
    :func:`paired_effects`' output, the random twin a reader is shown. The null averages
    every random direction on the unit; one is enough to read what a random push did."""
    random = effects[effects["arm"].str.startswith("random:")].sort_values("arm", kind="stable")
    return random.drop_duplicates([*UNIT, "sign"]).set_index([*UNIT, "sign"])


def unsteered_gate(rows: pd.DataFrame, config: RunConfig) -> pd.DataFrame:
    """The unsteered rows (s = 0) through the same coherence gate as the steered ones,
    against the same limits (their concept's median perplexity, the run's repetition
    and alphabetic-share limits), indexed by unit: a reader sees when the twin itself was
    broken."""
    rows = rows.assign(repetition=repetitions(rows), alphabetic_share=alphabetic_shares(rows))
    every = rows[rows["strength"] == 0]  # the rows paired_effects takes its limits from
    limits = repetition_limit(every, config), alphabetic_limit(every, config)
    base = every.drop_duplicates(UNIT)
    ppl0 = base["concept"].map(every.groupby("concept")["perplexity"].median())
    passed, reason = coherence_gate(base, ppl0, config, *limits)
    return base.assign(gate_pass=passed, gate_reason=reason).set_index(UNIT)


def sample_table(
    records: pd.DataFrame,
    config: RunConfig,
    per_concept: Mapping[str, Mapping[str, float | None]] | None = None,
    run_dir: RunDir | None = None,
) -> pd.DataFrame:
    """One row per steered concept-arm text (report split), text first: its Δs, the
    gate's verdict and reason, the signed effect (raw, gated, above the random null);
    its unsteered twin's text, Δ0 and gate; its random twin's text, Δ, gate and effect
    (what entered the null) with what the gate read of it (its perplexity over its
    concept's unsteered median, repetition, share of alphabetic words); the steered
    text's own perplexity over its concept's unsteered median (what
    ``gate.perplexity_multiple`` bounds), repetition and share of alphabetic words
    (``gate.alphabetic_multiple``), and the unsteered twin's share; the concept's likelihood
    outcome at that sign where it was measured (``per_concept``: the record's, holding
    ``likelihood_<sign>``); the prompt, sample, trace id (from ``run_dir``'s
    ``traces.json``, when the run was traced) and keys. The unsteered twin has no
    effect column: its effect is 0 by definition."""
    rows = records[_col(records, "split", "report") == "report"]
    if rows.empty or "arm" not in rows.columns:
        return pd.DataFrame(columns=list(COLUMNS))
    effects = paired_effects(rows, config)
    concept = effects[effects["arm"] == CONCEPT_ARM]
    twin = unsteered_gate(rows, config)
    twin = twin[["text", "gate_pass", "gate_reason", "alphabetic_share", "key"]]
    twin = twin.rename(columns=lambda c: f"{c}_unsteered")
    random = random_twins(effects)
    random = random.assign(perplexity_ratio=random["perplexity"] / random["ppl0_median"])[
        ["text", "delta", "gate_pass", "gate_reason", "e", "perplexity_ratio", "repetition",
         "alphabetic_share", "key"]
    ]  # fmt: skip
    random = random.rename(columns=lambda c: f"{c}_random")
    null = above_null(effects).set_index([*UNIT, "sign"])["above_null"]
    table = (
        concept.join(twin, on=UNIT)
        .join(random, on=[*UNIT, "sign"])
        .join(null.rename("effect_above_null"), on=[*UNIT, "sign"])
    )
    table = table.assign(order=-table["sign"]).sort_values(
        ["concept", "order", "prompt_index", "sample"], kind="stable"
    )
    likelihood = {
        (synset, sign): values.get(f"likelihood_{label}")
        for synset, values in (per_concept or {}).items()
        for sign, label in SIGNS.items()
    }
    trace_ids = read_map(run_dir.file(RunDir.TRACES)) if run_dir is not None else {}
    return pd.DataFrame(
        {
            "text": table["text"],
            "concept": table["concept"],
            "sign": table["sign"].map({1: "s > 0", -1: "s < 0"}),
            "strength": table["strength"].astype(float),
            "delta_s": table["delta"].astype(float),
            "gate": table["gate_pass"].map(GATE),
            "gate_reason": table["gate_reason"],
            "effect": table["e"].astype(float),
            "effect_gated": table["e_gated"].astype(float),
            "effect_above_null": table["effect_above_null"].astype(float),
            "text_unsteered": table["text_unsteered"],
            "delta_0": table["delta_0"].astype(float),
            "gate_unsteered": table["gate_pass_unsteered"].map(GATE),
            "gate_reason_unsteered": table["gate_reason_unsteered"],
            "text_random": table["text_random"],
            "delta_random": table["delta_random"].astype(float),
            "gate_random": table["gate_pass_random"].map(GATE),
            "gate_reason_random": table["gate_reason_random"],
            "effect_random": table["e_random"].astype(float),
            "perplexity_ratio_random": table["perplexity_ratio_random"].astype(float),
            "repetition_random": table["repetition_random"].astype(float),
            "alphabetic_share_random": table["alphabetic_share_random"].astype(float),
            "perplexity_ratio": (table["perplexity"] / table["ppl0_median"]).astype(float),
            "repetition": table["repetition"].astype(float),
            "alphabetic_share": table["alphabetic_share"].astype(float),
            "alphabetic_share_unsteered": table["alphabetic_share_unsteered"].astype(float),
            "likelihood": [
                likelihood.get((c, int(s)))
                for c, s in zip(table["concept"], table["sign"], strict=True)
            ],
            "prompt": table["prompt"],
            "sample": table["sample"].astype(int),
            "trace_id": table["key"].map(trace_ids),
            "key": table["key"],
            "key_unsteered": table["key_unsteered"],
            "key_random": table["key_random"],
        }
    )[list(COLUMNS)].reset_index(drop=True)


def samples_csv(table: pd.DataFrame) -> str:
    """``samples.csv``: every cell a spreadsheet opens as text (``rundir.neutralise``):
    the texts are the model's, and a text starting with ``=`` must not run."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.columns)
    for row in table.itertuples(index=False):
        writer.writerow([_cell(v) for v in row])
    return buffer.getvalue()


def _cell(value: object) -> object:
    if value is None or (isinstance(value, float) and value != value):  # missing
        return ""
    if isinstance(value, str):
        return neutralise(value)
    return f"{value:.6g}" if isinstance(value, float) else value


class SamplesError(LookupError):
    """A run without a samples table, or a filter that names nothing in it."""


SIGN_LABELS = {"+": "s > 0", "-": "s < 0"}


def read_samples(run_dir: RunDir) -> pd.DataFrame:
    """A run folder's ``samples.csv`` as written (cells restored from the spreadsheet
    guard, numbers parsed; an empty cell is an empty text in a text column, else
    missing), in its own column order: a run of an earlier release keeps its columns."""
    path = run_dir.file(RunDir.SAMPLES)
    if not path.exists():
        raise SamplesError(
            f"run {run_dir.run_id} has no {RunDir.SAMPLES} in {run_dir.path} (a run published "
            f"before the samples table, or not yet scored); `steer-eval rescore "
            f"{run_dir.run_id}` writes it from the saved texts"
        )
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    out = {}
    for column in table.columns:
        cells = table[column].map(restore)
        numbers = pd.to_numeric(cells.where(cells != "", None), errors="coerce")
        numeric = numbers.notna().sum() == (cells != "").sum() and (cells != "").any()
        if column.startswith("text"):
            out[column] = cells
        elif numeric and not column.startswith("key"):
            out[column] = numbers
        else:
            out[column] = cells.where(cells != "", None)
    return pd.DataFrame(out, columns=table.columns)


def select_samples(
    table: pd.DataFrame,
    concept: str | None = None,
    sign: str | None = None,
    gated: bool | None = None,
    limit: int | None = None,
) -> pd.DataFrame:
    """The rows of one concept (its synset, or the start of exactly one of the run's:
    ``herb`` for ``herb.n.01``; anything else is refused, with the closest name or the
    synsets it starts), one sign (``+`` or ``-``), the texts the gate failed (``gated``:
    True) or passed (False), the first ``limit`` of them, in the table's order."""
    rows = table
    if concept is not None:
        known = sorted(set(table["concept"]))
        if concept not in known:
            starting = [k for k in known if k.startswith(concept)]
            if len(starting) > 1:
                raise SamplesError(
                    f"concept {concept!r} starts {len(starting)} of this run's concepts: "
                    f"{', '.join(starting)}; give one of them"
                )
            if not starting:
                close = difflib.get_close_matches(concept, known, n=1, cutoff=0.5)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise SamplesError(
                    f"concept {concept!r} is not in this run{hint}; its concepts: "
                    + ", ".join(known)
                )
            concept = starting[0]
        rows = rows[rows["concept"] == concept]
    if sign is not None:
        if sign not in SIGN_LABELS:
            raise SamplesError(f"sign {sign!r}: use + or -")
        rows = rows[rows["sign"] == SIGN_LABELS[sign]]
    if gated is not None:
        rows = rows[(rows["gate"] == "fail") == gated]
    return rows.head(limit) if limit is not None else rows

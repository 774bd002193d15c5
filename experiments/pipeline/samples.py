"""The samples view: every steered text beside its unsteered and random-direction twins.

A verdict pools hundreds of texts; a reader who doubts it wants to see which texts moved,
which the coherence gate failed and why, and what a random direction did to the same
prompt. This is one row per steered concept-arm text of the report split (what the v2
criteria are computed from), with the numbers each criterion reads, taken from the same
functions the criteria use (``pipeline/effect.py``), so the table cannot disagree with
the answer. It is a view: nothing here changes a number. Written once per publish as
``samples.csv`` (cells neutralised: generated text is untrusted) and the MLflow table
``samples.json``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping

import pandas as pd

from experiments.config import ExperimentConfig
from experiments.pipeline.effect import SIGNS, UNIT, above_null, paired_effects
from experiments.pipeline.plan import CONCEPT_ARM
from experiments.rundir import neutralise

# The table's columns, in order; docs/mlflow.md describes each.
COLUMNS = (
    "concept",
    "prompt",
    "sample",
    "sign",
    "strength",
    "text",
    "text_unsteered",
    "text_random",
    "delta_s",
    "delta_0",
    "effect",
    "gate",
    "gate_reason",
    "effect_gated",
    "effect_above_null",
    "likelihood",
    "key",
)


def sample_table(
    records: pd.DataFrame,
    config: ExperimentConfig,
    per_concept: Mapping[str, Mapping[str, float | None]] | None = None,
) -> pd.DataFrame:
    """One row per steered concept-arm text (report split): its twins' texts, Δs, Δ0,
    the signed effect, the gate's verdict and reason, the effect above the random null,
    and the concept's likelihood outcome at that sign where it was measured
    (``per_concept``: the record's, holding ``likelihood_<sign>``)."""
    split = (
        records["split"] if "split" in records.columns else pd.Series("report", index=records.index)
    )
    rows = records[split == "report"]
    if rows.empty or "arm" not in rows.columns:
        return pd.DataFrame(columns=list(COLUMNS))
    effects = paired_effects(rows, config)
    concept = effects[effects["arm"] == CONCEPT_ARM]
    twin_texts = (rows[rows["strength"] == 0].drop_duplicates(UNIT).set_index(UNIT)["text"]).rename(
        "text_unsteered"
    )
    random = effects[effects["arm"].str.startswith("random:")].sort_values("arm")
    # The first random direction's text on the same unit and sign (the null averages
    # every random direction; one is enough to read what "a random push" looks like).
    random_texts = random.groupby([*UNIT, "sign"])["text"].first().rename("text_random")
    null = above_null(effects).set_index([*UNIT, "sign"])["above_null"]
    table = (
        concept.join(twin_texts, on=UNIT)
        .join(random_texts, on=[*UNIT, "sign"])
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
    out = pd.DataFrame(
        {
            "concept": table["concept"],
            "prompt": table["prompt"],
            "sample": table["sample"].astype(int),
            "sign": table["sign"].map({1: "s > 0", -1: "s < 0"}),
            "strength": table["strength"].astype(float),
            "text": table["text"],
            "text_unsteered": table["text_unsteered"],
            "text_random": table["text_random"],
            "delta_s": table["delta"].astype(float),
            "delta_0": table["delta_0"].astype(float),
            "effect": table["e"].astype(float),
            "gate": table["gate_pass"].map({True: "pass", False: "fail"}),
            "gate_reason": table["gate_reason"],
            "effect_gated": table["e_gated"].astype(float),
            "effect_above_null": table["effect_above_null"].astype(float),
            "likelihood": [
                likelihood.get((c, int(s)))
                for c, s in zip(table["concept"], table["sign"], strict=True)
            ],
            "key": table["key"],
        }
    )
    return out[list(COLUMNS)].reset_index(drop=True)


def samples_csv(table: pd.DataFrame) -> str:
    """``samples.csv``: every cell a spreadsheet opens as text (``rundir.neutralise``):
    the texts are the model's, and a text starting with ``=`` must not run."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(table.columns)
    for row in table.itertuples(index=False):
        writer.writerow(["" if _missing(v) else _cell(v) for v in row])
    return buffer.getvalue()


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _cell(value: object) -> object:
    if isinstance(value, str):
        return neutralise(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return value

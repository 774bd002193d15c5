"""A pilot of the likelihood outcome: `python -m experiments.likelihood_pilot`.

Not a pipeline stage yet: it proves the measurement pieces together on the default
config (10 concepts, the middle layer, the 1×1×1 probes, β = 0.2) before they are wired
into the run and the study. For every concept it scores the steered model's
log-likelihood of the concept's likelihood texts (``experiments/likelihood_texts.py``)
at s = ±1 along the concept's direction, k isotropic random directions and the
model-distribution nulls (neutral splits, other concepts' directions), and reports
per family and sign: the mean outcome over concepts with a concept-level interval,
how many concepts beat the family, the effect above each null family, the split-half
reliability of each per-concept measure, and Δ's reference gap. It writes the
records to ``--out`` (JSON) and prints the tables and the wall time of each step.

Classifiers are read from ``/work/main/results/classifiers`` when present (read-only),
else trained into a temporary folder; MLflow writes go to a temporary sqlite store
unless ``MLFLOW_TRACKING_URI`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from experiments.pipeline.nulls import null_family

SHARED_CLASSIFIERS = Path("/work/main/results/classifiers")
SCRATCH = Path(tempfile.gettempdir()) / "steer-eval-likelihood-pilot"
PREFIX = "Here is a text:"
FAMILIES = ("concept", "random", "null:neutral", "null:other")


@dataclass
class PilotResult:
    records: list[dict]
    alpha: float
    layer: int
    timings: dict[str, float] = field(default_factory=dict)
    summary: list[dict] = field(default_factory=list)
    per_concept: list[dict] = field(default_factory=list)
    reference_gap: dict[str, float] = field(default_factory=dict)
    n_sequences: int = 0


def _units(records: list[dict], family: str, strength: float) -> dict[str, np.ndarray]:
    """Per concept, the per-pair outcome of a family (averaged over its draws)."""
    by: dict[str, dict[int, list[float]]] = {}
    for r in records:
        if null_family(r["arm"]) == family and r["strength"] == strength:
            by.setdefault(r["concept"], {}).setdefault(r["pair"], []).append(r["e"])
    return {
        c: np.array([np.mean(pairs[i]) for i in sorted(pairs)]) for c, pairs in sorted(by.items())
    }


def summarise(records: list[dict], n_boot: int = 2000, seed: int = 0) -> tuple[list, list]:
    """Per family and sign: mean e over concepts (concept-level interval), its spread,
    the split-half reliability of the per-concept value, and the concept arm's margin
    above the family; and the per-concept table."""
    from metrics.intervals import hierarchical_margin, hierarchical_mean
    from metrics.reliability import split_half_reliability

    summary, per_concept = [], {}
    strengths = sorted({r["strength"] for r in records}, reverse=True)
    for s in strengths:
        concept = _units(records, "concept", s)
        for family in FAMILIES:
            units = _units(records, family, s)
            if not units:
                continue
            means = {c: float(u.mean()) for c, u in units.items()}
            ci = hierarchical_mean(units, n_boot=n_boot, seed=seed)
            row = {
                "family": family,
                "strength": s,
                "mean": ci.estimate,
                "low": ci.low,
                "high": ci.high,
                "sd": float(np.std(list(means.values()), ddof=1)),
                "reliability": split_half_reliability(units, seed=seed).estimate,
            }
            if family != "concept":
                shared = sorted(set(units) & set(concept))
                above = hierarchical_margin(
                    {c: concept[c] for c in shared},
                    {c: units[c] for c in shared},
                    paired=True,
                    n_boot=n_boot,
                    seed=seed,
                )
                margins = {c: concept[c] - units[c] for c in shared}
                row.update(
                    above=above.estimate,
                    above_low=above.low,
                    above_high=above.high,
                    beats=sum(concept[c].mean() > units[c].mean() for c in shared),
                    n=len(shared),
                    above_reliability=split_half_reliability(margins, seed=seed).estimate,
                )
            summary.append(row)
            for c, m in means.items():
                per_concept.setdefault(c, {"concept": c})[f"{family} {s:+g}"] = m
    return summary, list(per_concept.values())


def _fmt(value: float | None, spec: str = "+.3f") -> str:
    return "n/a" if value is None else format(value, spec)


def format_tables(result: PilotResult) -> str:
    lines = [
        f"likelihood outcome e = s*(C_s - C_0), nats/token; layer {result.layer}, "
        f"alpha {result.alpha:.0f}, {len(result.per_concept)} concepts",
        "",
        "| family | s | mean e [95% CI, concepts] | sd | rel (SB) | concept above it "
        "[95% CI] | concept > family | rel of margin |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result.summary:
        above = (
            f"{_fmt(r['above'])} [{_fmt(r['above_low'])}, {_fmt(r['above_high'])}]"
            if "above" in r
            else ""
        )
        beats = f"{r['beats']} / {r['n']}" if "beats" in r else ""
        lines.append(
            f"| {r['family']} | {r['strength']:+g} | {_fmt(r['mean'])} "
            f"[{_fmt(r['low'])}, {_fmt(r['high'])}] | {_fmt(r['sd'], '.3f')} | "
            f"{_fmt(r['reliability'], '.2f')} | {above} | {beats} | "
            f"{_fmt(r.get('above_reliability'), '.2f') if 'above' in r else ''} |"
        )
    keys = [k for k in result.per_concept[0] if k != "concept"] if result.per_concept else []
    lines += ["", "| concept | " + " | ".join(keys) + " | Δ reference gap |"]
    lines.append("|---" * (len(keys) + 2) + "|")
    for row in result.per_concept:
        gap = result.reference_gap.get(row["concept"])
        cells = " | ".join(_fmt(row.get(k)) for k in keys)
        lines.append(f"| {row['concept']} | {cells} | {_fmt(gap)} |")
    lines += ["", "wall time (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result.timings.items())]
    return "\n".join(lines)


def run_pilot(
    overrides: list[str] | None = None,
    k_random: int = 2,
    k_neutral: int = 2,
    k_other: int = 2,
    n_texts: int = 10,
    strengths: tuple[float, ...] = (-1.0, 1.0),
    reference_gap: bool = True,
    progress: Callable[[str], None] = print,
    lm=None,
) -> PilotResult:
    """Run the pilot on the config (defaults plus ``overrides``); see the module docstring."""
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{SCRATCH / 'mlruns.db'}")
    SCRATCH.mkdir(parents=True, exist_ok=True)
    from experiments.concepts import load_concepts
    from experiments.config import load_config
    from experiments.likelihood_texts import build_likelihood_texts
    from experiments.pipeline.nulls import build_model_nulls
    from experiments.pipeline.probes import ensure_classifiers
    from experiments.pipeline.vectors import build_vectors
    from steering.likelihood import OutcomeDirection, encode_texts, likelihood_outcomes

    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = now - clock
        clock = now
        progress(f"  {name}: {timings[name]:.1f} s")

    classifiers = SHARED_CLASSIFIERS if SHARED_CLASSIFIERS.exists() else SCRATCH / "classifiers"
    config = load_config(
        overrides=[
            f"classifier.dir={classifiers}",
            f"controls.random_directions={k_random}",
            *(overrides or []),
        ]
    )
    if lm is None:
        from steering.models import load_model

        lm = load_model(config.model, device=config.device, dtype=config.dtype)
    lap("model load")
    graph = load_concepts(
        config.concepts.file, limit=config.concepts.limit, synsets=config.concepts.synsets
    )
    layer = lm.check_layer(config.layer if config.layer is not None else lm.default_layer)
    probes = ensure_classifiers(config, lm, graph, layer)
    lap("classifiers")
    vectors = build_vectors(config, lm, graph, probes, layer)
    nulls = build_model_nulls(lm, graph, vectors, config.seed, k_neutral, k_other)
    lap("vectors and nulls")

    def n_tokens(text: str) -> int:
        return len(encode_texts(lm, [text], PREFIX)[0].target)

    texts = build_likelihood_texts(graph, n_texts, config.seed, length=n_tokens)
    directions = []
    for synset, vector in vectors.vectors.items():
        arms = [("concept", vector)]
        arms += [(f"random:{j}", v) for j, v in enumerate(vectors.random.get(synset, []))]
        arms += nulls[synset]
        directions += [OutcomeDirection(synset, arm, v.direction) for arm, v in arms]
    lap("texts")
    scale = config.steering.beta * vectors.alpha
    progress(
        f"scoring {len(directions)} directions x {len(strengths)} strengths x "
        f"{2 * n_texts} texts (+ {len({t for v in texts.on.values() for t in v})} unsteered)"
    )
    records = likelihood_outcomes(
        lm, layer, scale, texts.on, texts.off, directions, strengths, config.steering.mode, PREFIX
    )
    lap("likelihood")
    result = PilotResult(records, vectors.alpha, layer, timings)
    result.n_sequences = len(directions) * len(strengths) * 2 * n_texts
    if reference_gap:
        from experiments.pipeline.reference_gap import reference_gaps
        from experiments.pipeline.score import build_scorer
        from metrics.embedder import load_embedder

        scorer = build_scorer(config, graph, load_embedder(config.embedding.model))
        result.reference_gap = {k: g.gap for k, g in reference_gaps(scorer, texts).items()}
        lap("reference gap")
    result.summary, result.per_concept = summarise(records, config.criteria.n_boot, config.seed)
    lap("statistics")
    return result


def main(argv: list[str] | None = None) -> PilotResult:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], help="config override")
    parser.add_argument("--k-random", type=int, default=2)
    parser.add_argument("--k-neutral", type=int, default=2)
    parser.add_argument("--k-other", type=int, default=2)
    parser.add_argument("--texts", type=int, default=10, help="texts per concept")
    parser.add_argument("--no-reference-gap", action="store_true")
    parser.add_argument("--out", type=Path, default=SCRATCH / "pilot.json")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    result = run_pilot(
        args.set,
        args.k_random,
        args.k_neutral,
        args.k_other,
        args.texts,
        reference_gap=not args.no_reference_gap,
    )
    result.timings["total"] = time.perf_counter() - started
    print(format_tables(result))
    print(f"{result.n_sequences} steered sequences scored")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "alpha": result.alpha,
                "layer": result.layer,
                "timings": result.timings,
                "summary": result.summary,
                "per_concept": result.per_concept,
                "reference_gap": result.reference_gap,
                "records": result.records,
            },
            indent=1,
        )
    )
    print(f"records: {args.out}")
    return result


if __name__ == "__main__":
    main()

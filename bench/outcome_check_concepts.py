"""The concepts of the outcome check on generated text (issue 66, item 2): a stratified,
seeded subset of identify v3's held-out concepts, chosen from the committed shard tables
only (v*'s AUROC, known before any outcome), never from an outcome.

    python bench/outcome_check_concepts.py                    # choose, print, write the JSON
    python bench/outcome_check_concepts.py --check configs/identify-v4-outcome-check.yaml
    python bench/outcome_check_concepts.py --plan configs/identify-v4-outcome-check.yaml

The rule: the 300 scored held-out concepts of identify v3 (results-heldout/
phase6-identify-v3/shard-*/directions.csv), each with v*'s AUROC (validation and test
texts together, ``identify.auroc_texts: held_out``), split into ``--strata`` equal quantile
bins of that AUROC and ``--n`` concepts drawn evenly across them with ``--seed``
(``experiments.identify.stages.matched.stratified_subset``, the rule identify's own subset uses).
Every chosen concept is checked to lie in v3's held-out split of its concept file. The
list is written in v3's split order to ``bench/identify_v4_outcome_check/concepts.json``
with each concept's shard, AUROC and stratum, and printed as the ``concepts.synsets``
block of the config.

``--check``: the config's ``concepts.synsets`` must be this list (exit 1 otherwise).
``--plan``: the generation rows the config plans for these concepts (no model is loaded):
the selection split (v* over ``selection.beta_grid``) and the report split (every
direction of ``identify.generated``, with the unsteered twins, the random null and the
prompting arm shared between them), and the new tokens they ask for.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from experiments.concepts import load_concepts
from experiments.config import load_config
from experiments.identify.heldout.prereg import split_concepts
from experiments.identify.stages.matched import stratified_subset

ROOT = Path(__file__).resolve().parents[1]
SHARDS = ROOT / "results-heldout" / "phase6-identify-v3"
V3_CONFIG = ROOT / "configs" / "identify-v3.yaml"
OUT = ROOT / "bench" / "identify_v4_outcome_check" / "concepts.json"
REFERENCE = "reference"


def shard_table(root: Path = SHARDS) -> tuple[pd.DataFrame, dict[str, str]]:
    """One row per scored held-out concept: concept, shard, v*'s AUROC, in v3's order
    (shard by shard, each shard's concepts in its ``shard.json`` order); and each table's
    sha256 (what the choice was made from)."""
    rows, digests = [], {}
    folders = sorted(root.glob("shard-*"), key=lambda p: int(p.name.split("-")[1]))
    for folder in folders:
        table = folder / "directions.csv"
        digests[str(table.relative_to(ROOT))] = hashlib.sha256(table.read_bytes()).hexdigest()
        frame = pd.read_csv(table)
        ref = frame[frame["direction"] == REFERENCE].set_index("concept")["auroc"]
        order = json.loads((folder / "shard.json").read_text())["concepts"]
        shard = int(folder.name.split("-")[1])
        rows += [{"concept": c, "shard": shard, "auroc_reference": float(ref[c])} for c in order]
    out = pd.DataFrame(rows)
    if out["concept"].duplicated().any():
        raise SystemExit("a concept appears in two shards")
    return out, digests


def strata_of(values: pd.Series, strata: int) -> dict[str, int]:
    """Each concept's stratum, as ``stratified_subset`` bins them (sorted by value, then
    name; ``strata`` near-equal bins)."""
    names = sorted(values.index, key=lambda c: (values[c], c))
    out, start = {}, 0
    for k in range(strata):
        size = len(names) // strata + (1 if k < len(names) % strata else 0)
        for c in names[start : start + size]:
            out[c] = k
        start += size
    return out


def choose(n: int, seed: int, strata: int) -> dict[str, Any]:
    table, digests = shard_table()
    v3 = load_config(V3_CONFIG, phase="identify")
    graph = load_concepts(v3.concepts.file)
    _, held = split_concepts(
        [c.synset for c in graph.concepts], v3.identify.heldout_fraction, v3.identify.split_seed
    )
    outside = sorted(set(table["concept"]) - set(held))
    if outside:
        raise SystemExit(f"not in v3's held-out split: {', '.join(outside)}")
    values = table.set_index("concept")["auroc_reference"]
    chosen = set(stratified_subset(values.to_dict(), n, seed, strata))
    stratum = strata_of(values, strata)
    table["stratum"] = table["concept"].map(stratum)
    picked = table[table["concept"].isin(chosen)].reset_index(drop=True)
    bins = [
        {
            "stratum": int(k),
            "auroc_min": float(g["auroc_reference"].min()),
            "auroc_max": float(g["auroc_reference"].max()),
            "n_in_v3": int(g["concept"].size),
            "n_chosen": int(g["concept"].isin(chosen).sum()),
        }
        for k, g in table.groupby("stratum", sort=True)
    ]
    return {
        "what": "identify v4 outcome check (issue 66 item 2): concepts",
        "rule": (
            f"{n} of identify v3's {len(table)} scored held-out concepts, drawn evenly over "
            f"{strata} quantile bins of v*'s AUROC (held-out texts) from the committed shard "
            f"tables, seed {seed} (experiments.identify.stages.matched.stratified_subset); listed "
            "in v3's shard order"
        ),
        "seed": seed,
        "strata": strata,
        "n": len(picked),
        "concept_file": v3.concepts.file,
        "split": {
            "heldout_fraction": v3.identify.heldout_fraction,
            "split_seed": v3.identify.split_seed,
        },
        "source_tables": digests,
        "bins": bins,
        "concepts": list(picked["concept"]),
        "table": picked.to_dict(orient="records"),
    }


def yaml_block(concepts: list[str]) -> str:
    return "  synsets:\n" + "".join(f"    - {c}\n" for c in concepts)


def check(config_path: Path, concepts: list[str]) -> int:
    cfg = load_config(config_path, phase="identify")
    given = list(cfg.concepts.synsets or [])
    if given == concepts:
        print(f"{config_path}: concepts.synsets is the chosen list ({len(given)} concepts)")
        return 0
    missing, extra = sorted(set(concepts) - set(given)), sorted(set(given) - set(concepts))
    print(
        f"{config_path}: concepts.synsets differs from the chosen list "
        f"(missing {missing or 'none'}, extra {extra or 'none'}"
        + (", same set in another order" if not missing and not extra else "")
        + ")"
    )
    return 1


def plan(config_path: Path, concepts: list[str]) -> dict[str, Any]:
    """The rows the config would generate for ``concepts`` (no model): the keys of
    ``kernel.plan.planned_rows`` for the selection split (tagged as v*'s) and, united over
    the directions of ``identify.generated``, for the report split."""
    from experiments.identify.estimation.crosscheck import canonical
    from experiments.identify.stages.generation import REFERENCE_TAG
    from experiments.kernel.plan import planned_rows

    cfg = load_config(config_path, phase="identify")
    graph = load_concepts(cfg.concepts.file, synsets=concepts)
    tags = list(dict.fromkeys(canonical(d) for d in cfg.identify.generated))
    selection = {k for k, _ in planned_rows(cfg, graph, "selection", vectors=REFERENCE_TAG)}
    report: dict[str, dict[str, Any]] = {}
    for tag in tags:  # rows not steered by the direction have the same key for every tag
        report.update(planned_rows(cfg, graph, "report", vectors=tag))
    arms = pd.Series([m["arm"] if m["strength"] else "unsteered" for m in report.values()])
    n_rows = len(selection) + len(report)
    per_direction = cfg.generation.samples_per_prompt * sum(
        1 for m in report.values() if m["concept"] == concepts[0] and m["strength"] == 0
    )
    return {
        "config": str(config_path),
        "concepts": len(graph.concepts),
        "generated_directions": tags,
        "texts_per_direction_per_concept": per_direction // cfg.generation.samples_per_prompt,
        "max_new_tokens": cfg.generation.max_new_tokens,
        "rows": {
            "selection": len(selection),
            "report": len(report),
            "report_by_arm": {str(k): int(v) for k, v in arms.value_counts().sort_index().items()},
            "all": n_rows,
            "per_concept": n_rows / len(graph.concepts),
        },
        "max_new_tokens_total": n_rows * cfg.generation.max_new_tokens,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60, help="concepts to choose (default 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--strata", type=int, default=3, help="quantile bins of v*'s AUROC")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", type=Path, metavar="CONFIG", help="compare a config's list")
    parser.add_argument("--plan", type=Path, metavar="CONFIG", help="count a config's rows")
    args = parser.parse_args()
    chosen = choose(args.n, args.seed, args.strata)
    concepts = chosen["concepts"]
    if args.check is not None:
        return check(args.check, concepts)
    if args.plan is not None:
        print(json.dumps(plan(args.plan, concepts), indent=1))
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(chosen, indent=1) + "\n", encoding="utf-8")
    for b in chosen["bins"]:
        print(
            f"stratum {b['stratum']}: v* AUROC {b['auroc_min']:.3f}-{b['auroc_max']:.3f}, "
            f"{b['n_chosen']} of {b['n_in_v3']}",
            file=sys.stderr,
        )
    print(f"wrote {args.out} ({len(concepts)} concepts); concepts.synsets:", file=sys.stderr)
    print(yaml_block(concepts), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())

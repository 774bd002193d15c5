"""Benchmark the local judge as a one-judge panel: `python -m judges.bench`.

90 samples (10 concepts x 9 short texts, each ~50 tokens): every concept is rated
against its own text (on-topic) and 8 other concepts' texts (off-topic). Reports the
cold panel wall time, the rerun time from the cache, and on- vs off-topic scores.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import cast

import numpy as np
import pandas as pd

TEXTS = {
    "dog": "The dog wagged its tail and barked at the door when its owner came home. Dogs are "
    "loyal pets; this puppy loves long walks, chasing balls in the park and sleeping "
    "at the foot of the bed after dinner.",
    "bird": "A small bird landed on the branch, folded its wings and began to sing. Birds "
    "build nests of twigs and feathers, lay eggs in spring and fly south when the "
    "weather turns cold in autumn.",
    "fish": "The fish swam slowly through the clear water of the river, its scales shining "
    "in the sun. Trout and salmon breathe through gills and lay their eggs among the "
    "stones of cold mountain streams.",
    "herb": "Fresh herbs such as basil, parsley, mint and thyme give the sauce its flavour. "
    "Gardeners grow these fragrant herbs in pots on the windowsill and pick the "
    "leaves just before cooking.",
    "shrub": "The garden is bordered by shrubs: low, woody bushes like boxwood, holly and "
    "lavender. Each shrub has several stems instead of a single trunk and is "
    "trimmed every spring to keep a neat hedge.",
    "person": "She is a thoughtful person who works as a nurse, volunteers at the library "
    "and calls her parents every Sunday. People describe her as patient, funny "
    "and always ready to help a friend.",
    "mammal": "Mammals are warm-blooded animals with fur or hair that feed their young with "
    "milk. Whales, bats, horses, mice and humans are all mammals, living in the "
    "sea, the air and on land.",
    "change": "Over the years the town changed completely: old factories were turned into "
    "flats, the market moved, and new roads altered the way people travelled. "
    "Nothing stayed the same for long.",
    "music": "The orchestra began to play, and the music filled the hall. Violins carried "
    "the melody while drums kept the rhythm, and the audience listened to every "
    "note of the symphony in silence.",
    "weather": "The weather turned stormy in the afternoon: dark clouds gathered, the wind "
    "rose, and heavy rain fell for hours. By evening the sky cleared and the "
    "temperature dropped below freezing.",
}


def build_samples() -> pd.DataFrame:
    concepts = list(TEXTS)
    rows = []
    for i, concept in enumerate(concepts):
        others = [c for c in concepts if c != concept]
        # its own text plus 8 of the other 9 (drop one, rotating) -> 9 samples per concept
        chosen = [concept, *[c for j, c in enumerate(others) if j != i % len(others)]]
        for source in chosen:
            rows.append(
                {
                    "sample_id": f"{concept}<-{source}",
                    "concept": concept,
                    "text": TEXTS[source],
                    "delta": 0.5 if source == concept else 0.0,
                    "on_topic": source == concept,
                }
            )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--judge", default="llama/embedded")
    parser.add_argument("--logits-all", choices=["true", "false"], default="true")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    from judges import get_judge, run_panel

    samples = build_samples()
    with tempfile.TemporaryDirectory() as tmp:
        options = {"cache": tmp, "logits_all": args.logits_all == "true"}
        if args.threads:
            options["n_threads"] = args.threads
        judge = get_judge(args.judge, **options)
        load_start = time.perf_counter()
        judge._load()  # type: ignore[attr-defined]  # model load is not panel time
        load_s = time.perf_counter() - load_start
        cold = run_panel([judge], samples, progress=None)
        warm_judge = get_judge(args.judge, **options)
        warm = run_panel([warm_judge], samples, progress=None)
    table = cold.per_sample.merge(samples[["sample_id", "on_topic"]], on="sample_id")
    on, off = table.loc[table.on_topic, "panel_mean"], table.loc[~table.on_topic, "panel_mean"]
    per_concept_rank = [
        float((g.loc[g.on_topic, "panel_mean"].iloc[0] > g.loc[~g.on_topic, "panel_mean"]).mean())
        for _, g in table.groupby("concept")
    ]
    n_tokens = [len(t.split()) for t in TEXTS.values()]
    report = {
        "judge": judge.describe(),
        "samples": len(samples),
        "words_per_text": [min(n_tokens), max(n_tokens)],
        "model_load_s": round(load_s, 2),
        "cold_wall_s": round(cold.wall_time_s, 2),
        "cold_s_per_text": round(cold.wall_time_s / len(samples), 3),
        "rerun_wall_s": round(warm.wall_time_s, 3),
        "rerun_cache_hits": warm.totals["cache_hits"],
        "cache_speedup": round(cold.wall_time_s / max(warm.wall_time_s, 1e-9), 1),
        "on_topic_mean": round(float(on.mean()), 2),
        "on_topic_sd": round(float(on.std()), 2),
        "off_topic_mean": round(float(off.mean()), 2),
        "off_topic_sd": round(float(off.std()), 2),
        "on_topic_scores": {
            r.concept: round(cast(float, r.panel_mean), 2)
            for r in table.loc[table.on_topic].itertuples()
        },
        "share_of_off_topic_below_own_text": round(float(np.mean(per_concept_rank)), 3),
        "r_score_vs_on_topic": cold.to_metrics().get("panel_mean_r_delta"),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()

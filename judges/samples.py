"""The sample table a panel rates: validation, `limit`, and turning rows into requests.

Shared by `run_panel` and `estimate_panel`, so that a dry run counts exactly the requests
(and cache keys) that the real run would send.
"""

from __future__ import annotations

import pandas as pd

from judges.base import RatingRequest, Rubric

REQUIRED_COLUMNS = ("sample_id", "concept", "text", "delta")


def check_samples(samples: pd.DataFrame) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in samples.columns]
    if missing:
        raise ValueError(f"samples lack columns {missing}; need {list(REQUIRED_COLUMNS)}")
    if samples["sample_id"].duplicated().any():
        dupes = samples.loc[samples["sample_id"].duplicated(), "sample_id"].tolist()[:5]
        raise ValueError(f"sample_id must be unique; duplicated: {dupes}")


def select_samples(samples: pd.DataFrame, limit: int | None = None) -> pd.DataFrame:
    """Validated samples with a fresh index; with `limit`, only the first `limit` rows.

    "First" is the table's own row order (deterministic for a given table; sort it
    beforehand for a choice that does not depend on how rows were gathered). Rerunning with
    a larger limit reuses the cached ratings of the smaller one.
    """
    check_samples(samples)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int or None, got {limit!r}")
        samples = samples.iloc[:limit]
    return samples.reset_index(drop=True)


def build_requests(samples: pd.DataFrame, rubric: Rubric) -> list[RatingRequest]:
    """One RatingRequest per row, in row order; a ``prompt`` column is the instruction
    each text continues (the axbench rubric shows it to the judge)."""
    has_prompt = "prompt" in samples.columns
    return [
        RatingRequest(
            text=str(row.text),
            concept=str(row.concept),
            rubric=rubric,
            sample_id=str(row.sample_id),
            instruction=str(row.prompt) if has_prompt else None,
        )
        for row in samples.itertuples(index=False)
    ]

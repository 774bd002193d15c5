"""LLM judges for steered text, every provider behind one `get_judge("provider/name")`.

    from judges import build_panel, estimate_panel, run_panel, panel_agrees
    names = ["anthropic/claude-sonnet-4-5", "openai/gpt-4o-mini", "llama/embedded"]
    estimate_panel(names, samples_df).cost_usd_max  # dry run: nothing is sent
    judges, skipped = build_panel(names, budget_usd=5.0)
    result = run_panel(judges, samples_df)       # samples: sample_id, concept, text, delta
    panel_agrees(result)                         # True / False / None (not evaluable)

Scores are 0-10 floats or None (abstained / unparseable - never 0). See judges/README.md.
"""

from judges.base import (
    SCORE_MAX,
    SCORE_MIN,
    Budget,
    BudgetExceeded,
    Judge,
    JudgeError,
    JudgeEstimate,
    JudgeUnavailable,
    NoJudgesError,
    Rating,
    RatingRequest,
    Rubric,
)
from judges.cache import JudgeCache
from judges.registry import build_panel, get_judge, judge_provider, parse_name, providers
from judges.retry import RetryPolicy


def __getattr__(name: str) -> object:
    # The panel pulls in pandas/scipy/metrics; import it only when asked for.
    if name in {"run_panel", "panel_agrees", "PanelResult"}:
        from judges import panel

        return getattr(panel, name)
    if name in {"estimate_panel", "PanelEstimate"}:
        from judges import estimate

        return getattr(estimate, name)
    raise AttributeError(f"module 'judges' has no attribute {name!r}")


__all__ = [
    "SCORE_MAX",
    "SCORE_MIN",
    "Budget",
    "BudgetExceeded",
    "Judge",
    "JudgeCache",
    "JudgeError",
    "JudgeEstimate",
    "JudgeUnavailable",
    "NoJudgesError",
    "PanelEstimate",
    "PanelResult",
    "Rating",
    "RatingRequest",
    "RetryPolicy",
    "Rubric",
    "build_panel",
    "estimate_panel",
    "get_judge",
    "judge_provider",
    "panel_agrees",
    "parse_name",
    "providers",
    "run_panel",
]

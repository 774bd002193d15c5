"""LLM judges for steered text, every provider behind one `get_judge("provider/name")`.

    from judges import build_panel, estimate_panel, run_panel, panel_agrees
    names = ["anthropic/claude-sonnet-4-5", "openai/gpt-4o-mini", "llama/embedded"]
    estimate_panel(names, samples_df).cost_usd_max  # dry run: nothing is sent
    judges, skipped = build_panel(names, budget_usd=5.0)
    result = run_panel(judges, samples_df)       # samples: sample_id, concept, text, delta
    panel_agrees(result)                         # True / False / None (not evaluable)

Scores are 0-10 floats or None (abstained / unparseable - never 0). See judges/README.md.

Why not MLflow's own judges. MLflow 3.17 has ``mlflow.genai.judges.make_judge`` (an LLM
judge from instructions with ``{{ outputs }}`` fields), built-in LLM scorers and
``Judge.align`` (rewriting a judge's instructions to agree with human feedback on
traces). They do not replace this package, because it holds what they lack:

- a cost cap enforced *before* each call (``Budget`` raises ``BudgetExceeded`` when the
  next call could cross it), and dry-run costing (``estimate_panel`` prices a panel from
  token counts and sends nothing); MLflow's judges have neither;
- an on-disk cache keyed on model, messages and rubric version (``JudgeCache``), so a
  rerun costs nothing and gives the same scores; MLflow's judges call the model again;
- the local judge (``llama/...``): scores from the log-probabilities of the answer's
  digits under a llama.cpp model, offline, without generating; no MLflow judge scores
  that way, and ``make_judge`` needs a served model;
- strict parsing with abstention (an unparseable answer is None, never 0) and the
  defusing of delimiter-like tags in generated text against prompt injection.

``align`` needs DSPy and an LLM provider at alignment time (neither is installed or
reachable here) and human feedback named like the judge; the human ratings of Part B
are on the traces as ``relatedness`` (HUMAN), so it can be tried where both exist. What
MLflow does carry: the rubric, versioned in its prompt registry
(``experiments/tracking/prompts.py``); judge scores as LLM_JUDGE feedback and human
ratings as HUMAN feedback on each generation's trace; and those traces in the run's
GenAI evaluation run (``experiments/phase5/evaluation.py``).
"""

from typing import TYPE_CHECKING

from judges.base import (
    AXBENCH_RUBRIC,
    RUBRICS,
    SCORE_MAX,
    SCORE_MIN,
    Budget,
    BudgetExceeded,
    EstimateOnly,
    Judge,
    JudgeError,
    JudgeEstimate,
    JudgeUnavailable,
    MissingKey,
    NoJudgesError,
    Rating,
    RatingRequest,
    Rubric,
    harmonic_mean,
)
from judges.cache import JudgeCache
from judges.registry import build_panel, get_judge, judge_provider, parse_name, providers
from judges.retry import RetryPolicy

if TYPE_CHECKING:  # what __getattr__ imports when asked, for the type checker
    from judges.estimate import PanelEstimate, estimate_panel
    from judges.panel import PanelResult, panel_agrees, run_panel


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
    "AXBENCH_RUBRIC",
    "RUBRICS",
    "SCORE_MAX",
    "SCORE_MIN",
    "Budget",
    "BudgetExceeded",
    "EstimateOnly",
    "Judge",
    "JudgeCache",
    "JudgeError",
    "JudgeEstimate",
    "JudgeUnavailable",
    "MissingKey",
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
    "harmonic_mean",
    "judge_provider",
    "panel_agrees",
    "parse_name",
    "providers",
    "run_panel",
]

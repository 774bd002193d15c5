"""Panel computation: score tables, agreement, validity against Delta and humans."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import pytest

from judges import Judge, NoJudgesError, Rating, RatingRequest, get_judge
from judges.panel import PanelResult, panel_agrees, run_panel
from metrics.stats import Alpha, Correlation, NotEvaluable


class ScriptedJudge(Judge):
    """A judge whose score is a function of the request (no model, no network)."""

    provider = "scripted"

    def __init__(
        self,
        name: str,
        fn: Callable[[RatingRequest], float | None],
        cost: float | None = 0.001,
        hit: bool = False,
    ) -> None:
        super().__init__(name, name)
        self.fn, self.cost, self.hit = fn, cost, hit

    def _rate_batch(self, requests: Sequence[RatingRequest], on_result) -> list[Rating]:
        out = []
        for i, request in enumerate(requests):
            score = self.fn(request)
            rating = Rating(
                score=score,
                raw=str(score),
                input_tokens=100,
                output_tokens=5,
                cost_usd=self.cost,
                latency_s=0.01,
                model=self.name,
                cache_hit=self.hit,
            )
            out.append(rating)
            if on_result:
                on_result(i, rating)
        return out


def samples(n: int = 30, seed: int = 0, human: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    delta = rng.uniform(-0.3, 0.6, n)
    frame = pd.DataFrame(
        {
            "sample_id": [f"s{i:03d}" for i in range(n)],
            "concept": ["dog"] * n,
            "text": [f"text {i} delta={d:.6f}" for i, d in enumerate(delta)],
            "delta": delta,
        }
    )
    if human:
        ratings = np.clip(10 * (delta + 0.3) / 0.9 + rng.normal(0, 0.5, n), 0, 10)
        ratings[::4] = np.nan  # not every sample has a human rating
        frame["human_rating"] = ratings
    return frame


def _delta(request: RatingRequest) -> float:
    return float(request.text.split("delta=")[1])


def tracking(noise: float, seed: int) -> Callable[[RatingRequest], float]:
    rng = np.random.default_rng(seed)
    return lambda r: float(np.clip(10 * (_delta(r) + 0.3) / 0.9 + rng.normal(0, noise), 0, 10))


def _no_nan(result: PanelResult) -> None:
    assert all(math.isfinite(v) for v in result.to_metrics().values())


def test_agreeing_panel(tmp_path):
    judges = [ScriptedJudge(f"j{i}", tracking(0.4, i)) for i in range(3)]
    result = run_panel(judges, samples())
    assert isinstance(result.alpha, Alpha) and result.alpha.value > 0.9
    assert isinstance(result.panel_mean_vs_delta, Correlation)
    assert result.panel_mean_vs_delta.r > 0.9
    assert panel_agrees(result) is True
    assert set(result.pairwise_spearman) == {("j0", "j1"), ("j0", "j2"), ("j1", "j2")}
    assert all(isinstance(c, Correlation) and c.r > 0.8 for c in result.judge_vs_human.values())
    assert result.judge_vs_human["j0"].n == 22  # 30 samples, 8 without a human rating
    assert result.to_metrics()["panel_agrees"] == 1.0
    _no_nan(result)


def test_disagreeing_panel():
    rng = np.random.default_rng(1)
    judges = [
        ScriptedJudge("tracks", tracking(0.3, 0)),
        ScriptedJudge("random", lambda r: float(rng.integers(0, 11))),
    ]
    result = run_panel(judges, samples())
    assert isinstance(result.alpha, Alpha) and result.alpha.value < 0.667
    assert panel_agrees(result) is False


def test_score_table_and_totals():
    judges = [
        ScriptedJudge("a", tracking(0.2, 0)),
        ScriptedJudge("b", tracking(0.2, 1), cost=None, hit=True),
    ]
    data = samples(10)
    result = run_panel(judges, data)
    table = result.scores
    assert list(table.columns[:8]) == [
        "sample_id",
        "judge",
        "score",
        "raw",
        "tokens",
        "cost",
        "latency",
        "cache_hit",
    ]
    assert len(table) == 20 and set(table["judge"]) == {"a", "b"}
    assert result.totals["tokens"] == 20 * 105
    assert result.totals["cost_usd"] == pytest.approx(10 * 0.001)
    assert result.totals["calls_without_price"] == 10
    assert result.totals["cache_hits"] == 10
    assert result.wall_time_s >= 0
    assert list(result.per_sample["sample_id"]) == list(data["sample_id"])
    assert {"panel_mean", "panel_median", "n_scores", "score:a", "score:b"} <= set(
        result.per_sample.columns
    )


def test_abstentions_are_ignored_not_zero():
    judges = [
        ScriptedJudge("always5", lambda r: 5.0),
        ScriptedJudge("sometimes", lambda r: None if r.sample_id in {"s000", "s001"} else 9.0),
        ScriptedJudge("always7", lambda r: 7.0),
    ]
    result = run_panel(judges, samples(5))
    rows = result.per_sample.set_index("sample_id")
    assert rows.loc["s000", "panel_mean"] == 6.0  # (5 + 7) / 2, not (5 + 0 + 7) / 3
    assert rows.loc["s000", "panel_median"] == 6.0
    assert rows.loc["s000", "n_scores"] == 2
    assert rows.loc["s003", "panel_mean"] == 7.0
    assert result.totals["abstentions"] == 2


def test_constant_scores_are_not_evaluable_never_nan():
    judges = [ScriptedJudge("c1", lambda r: 5.0), ScriptedJudge("c2", lambda r: 5.0)]
    result = run_panel(judges, samples(10))
    assert isinstance(result.judge_vs_delta["c1"], NotEvaluable)
    assert "constant" in result.judge_vs_delta["c1"].reason
    assert isinstance(result.alpha, NotEvaluable)
    assert panel_agrees(result) is None
    assert "panel_alpha" in result.not_evaluable()
    _no_nan(result)


def test_too_few_samples_and_single_judge():
    result = run_panel([ScriptedJudge("solo", tracking(0.1, 0))], samples(2, human=False))
    assert isinstance(result.alpha, NotEvaluable) and "2 raters" in result.alpha.reason
    assert isinstance(result.panel_mean_vs_delta, NotEvaluable)
    assert "at least 3" in result.panel_mean_vs_delta.reason
    assert result.pairwise_spearman == {}
    assert isinstance(result.judge_vs_human["solo"], NotEvaluable)
    assert panel_agrees(result) is None
    _no_nan(result)


def test_refuses_to_run_without_judges(no_api_keys):
    from judges import build_panel

    judges, skipped = build_panel(["anthropic/claude-sonnet-4-5"])
    assert judges == [] and skipped
    with pytest.raises(NoJudgesError):
        run_panel(judges, samples(5))


def test_input_validation():
    judge = ScriptedJudge("a", lambda r: 1.0)
    with pytest.raises(ValueError, match="delta"):
        run_panel([judge], samples(5).drop(columns="delta"))
    dup = samples(5)
    dup.loc[1, "sample_id"] = "s000"
    with pytest.raises(ValueError, match="unique"):
        run_panel([judge], dup)
    with pytest.raises(ValueError, match="unique"):
        run_panel([judge, ScriptedJudge("a", lambda r: 2.0)], samples(5))


def test_progress_hears_every_rating():
    heard: list[tuple[int, int]] = []
    result = run_panel(
        [ScriptedJudge("a", tracking(0.1, 0))],
        samples(5),
        progress=lambda done, total: heard.append((done, total)),
    )
    assert len(result.scores) == 5
    assert heard == [(i, 5) for i in range(6)]


def test_judge_params_are_logged_strings():
    result = run_panel([ScriptedJudge("a", tracking(0.1, 0))], samples(5))
    assert result.judge_params["a"]["name"] == "a"


@pytest.mark.judge
@pytest.mark.timeout(60)
def test_real_panel_llama_plus_openai_on_loopback(shared_llama, loopback, api_keys, tmp_path):
    """End to end: the real local judge and the OpenAI judge (real SDK, loopback server)."""
    texts = {
        "dog": [
            "Dogs bark, wag their tails and love long walks with their owners.",
            "The dog chased the ball across the garden and brought it back.",
            "Interest rates rose again and the markets fell.",
            "The printer ran out of paper during the meeting.",
        ],
    }
    rows = []
    for concept, items in texts.items():
        for i, text in enumerate(items):
            rows.append(
                {
                    "sample_id": f"{concept}{i}",
                    "concept": concept,
                    "text": text,
                    "delta": 0.5 if i < 2 else -0.1,
                }
            )
    data = pd.DataFrame(rows)

    def answer(body):
        user = loopback.user_text(body)
        return '{"score": 9}' if ("dog" in user.split("</text>")[0].lower()) else '{"score": 1}'

    with loopback.LoopbackServer(default=loopback.Step("ok", answer=answer)) as server:
        judges = [
            get_judge("llama/embedded", llama=shared_llama, cache=tmp_path / "c"),
            get_judge(
                "openai/gpt-4o-mini",
                base_url=server.openai_url,
                cache=tmp_path / "c",
                max_retries=0,
            ),
        ]
        first = run_panel(judges, data)
        second = run_panel(judges, data)
        assert server.n_requests == len(data)  # the rerun sent nothing
    assert second.totals["cache_hits"] == 2 * len(data)
    assert second.totals["cost_usd"] == 0.0
    scores = first.scores.pivot(index="sample_id", columns="judge", values="score")
    print(scores.round(2))
    on, off = scores.loc[["dog0", "dog1"]], scores.loc[["dog2", "dog3"]]
    assert (on.mean() > off.mean()).all()
    assert isinstance(first.panel_mean_vs_delta, Correlation)
    assert first.panel_mean_vs_delta.r > 0.7
    _no_nan(first)

"""run_panel's bounded concurrency and `limit`, and the dry run `estimate_panel`, with the
real anthropic/openai SDKs against the loopback server."""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from judges import (
    BudgetExceeded,
    EstimateOnly,
    Judge,
    MissingKey,
    Rating,
    RatingRequest,
    Rubric,
    build_panel,
    estimate_panel,
    get_judge,
    pricing,
    run_panel,
)
from judges.prompt import render_api_prompt

# A held (rendezvous) reply must not time out on a busy machine and be retried.
PATIENT = {"timeout": 30.0}


def make_samples(n: int = 12) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "sample_id": [f"s{i:02d}" for i in range(n)],
            "concept": ["dog"] * n,
            "text": [f"Sample text number {i} " + "woof " * (i % 5) for i in range(n)],
            "delta": [i / n for i in range(n)],
        }
    )


def _answer(loopback):
    def answer(body: dict) -> str:
        """The scripted judges' verdict: a function of the rated text only."""
        text = loopback.user_text(body).split("<text>\n", 1)[1].split("\n</text>", 1)[0]
        return f'{{"score": {len(text) % 11}}}'

    return answer


class LocalJudge(Judge):
    """Not thread-safe (like llama): must run in the panel's calling thread."""

    provider = "local-test"
    price = pricing.LOCAL

    def __init__(self) -> None:
        super().__init__("local-test/len", "len")
        self.threads: set[str] = set()

    def _rate_batch(self, requests: Sequence[RatingRequest], on_result) -> list[Rating]:
        self.threads.add(threading.current_thread().name)
        out = []
        for i, request in enumerate(requests):
            out.append(Rating(score=float(len(request.text) % 7), raw="", cost_usd=0.0))
            if on_result:
                on_result(i, out[-1])
        return out


def _cache_files(root: Path) -> set[str]:
    return {p.name for p in root.rglob("*.json")}


def test_concurrent_panel_equals_sequential_panel(loopback, api_keys, make_api_judge, tmp_path):
    data = make_samples(12)
    step = loopback.Step("ok", answer=_answer(loopback))
    runs = {}
    with loopback.LoopbackServer(default=step) as server:
        for label, workers in (("sequential", 1), ("concurrent", 4)):
            cache = tmp_path / label
            local = LocalJudge()
            judges = [
                make_api_judge("anthropic", server, cache=cache, max_concurrency=2, **PATIENT),
                local,
                make_api_judge("openai", server, cache=cache, max_concurrency=2, **PATIENT),
            ]
            before = server.n_requests
            if workers > 1:  # the first two calls wait for each other: proof of overlap
                server.script = [loopback.rendezvous(2, answer=_answer(loopback))] * 2
            ticks: list[tuple[int, int]] = []
            runs[label] = run_panel(
                judges,
                data,
                progress=_recorder(ticks) if label == "concurrent" else None,
                max_concurrency=workers,
            )
            assert server.n_requests - before == 2 * len(data)
            if label == "concurrent":  # every rating reported once, from every thread
                total = len(judges) * len(data)
                assert ticks == [(i, total) for i in range(total + 1)]
            assert local.threads == {threading.main_thread().name}
        assert server.max_in_flight >= 2  # the concurrent run did overlap
    seq, con = runs["sequential"], runs["concurrent"]
    pd.testing.assert_frame_equal(
        seq.scores.drop(columns="latency"), con.scores.drop(columns="latency")
    )
    pd.testing.assert_frame_equal(seq.per_sample, con.per_sample)
    assert seq.scores["score"].notna().all() and seq.scores["score"].nunique() > 3
    assert seq.alpha == con.alpha and seq.totals == con.totals
    # same cache keys: the concurrent run's cache serves the sequential one and vice versa
    assert _cache_files(tmp_path / "sequential") == _cache_files(tmp_path / "concurrent")
    assert len(_cache_files(tmp_path / "sequential")) == 2 * len(data)


def test_api_judges_overlap_across_judges(loopback, api_keys, make_api_judge):
    """Each judge allows one call at a time, so two in flight means two judges at once."""
    data = make_samples(4)
    script = [loopback.rendezvous(2), loopback.rendezvous(2)]
    with loopback.LoopbackServer(script=script) as server:
        judges = [
            make_api_judge("anthropic", server, max_concurrency=1, **PATIENT),
            make_api_judge("openai", server, max_concurrency=1, **PATIENT),
        ]
        result = run_panel(judges, data, max_concurrency=4)
    assert server.max_in_flight == 2
    assert result.scores["score"].eq(7.0).all() and server.n_requests == 8


def test_the_panel_bound_caps_calls_in_flight(loopback, api_keys, make_api_judge):
    data = make_samples(9)
    script = [loopback.rendezvous(3)] * 3
    with loopback.LoopbackServer(script=script, default=loopback.slow(0.05)) as server:
        judge = make_api_judge("openai", server, max_concurrency=8, **PATIENT)
        run_panel([judge], data, max_concurrency=3)
    assert server.max_in_flight == 3 and server.n_requests == 9


def test_max_concurrency_one_is_sequential(loopback, api_keys, make_api_judge):
    with loopback.LoopbackServer(default=loopback.slow(0.02)) as server:
        judges = [make_api_judge("anthropic", server), make_api_judge("openai", server)]
        run_panel(judges, make_samples(4), max_concurrency=1)
    assert server.max_in_flight == 1 and server.n_requests == 8
    with pytest.raises(ValueError, match="max_concurrency"):
        run_panel(judges, make_samples(4), max_concurrency=0)


def test_budget_stop_in_the_pool_raises_and_never_overspends(loopback, api_keys, make_api_judge):
    data = make_samples(20)
    step = loopback.ok(input_tokens=300, output_tokens=10)
    with loopback.LoopbackServer(default=step) as server:
        judge = make_api_judge("anthropic", server, budget_usd=0.01)
        with pytest.raises(BudgetExceeded):
            run_panel([judge, LocalJudge()], data, max_concurrency=4)
        assert 0 < server.n_requests < len(data)
    assert judge.budget.spent_usd <= 0.01


# --------------------------------------------------------------------------- limit


def test_limit_rates_only_the_first_rows(loopback, api_keys, make_api_judge):
    data = make_samples(12)
    with loopback.LoopbackServer() as server:
        judge = make_api_judge("openai", server)
        first = run_panel([judge], data, limit=5)
        assert server.n_requests == 5
        assert list(first.per_sample["sample_id"]) == list(data["sample_id"][:5])
        assert set(first.scores["sample_id"]) == set(data["sample_id"][:5])
        more = run_panel([judge], data, limit=8)
        assert server.n_requests == 8  # the first 5 came from the cache
    assert more.totals["cache_hits"] == 5
    whole = run_panel([LocalJudge()], data, limit=100)
    assert len(whole.per_sample) == len(data)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_limit_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="limit"):
        run_panel([LocalJudge()], make_samples(3), limit=bad)


# --------------------------------------------------------------------------- dry run


@pytest.fixture
def count_connections(monkeypatch):
    """Count every socket connect (loopback included) on top of the network guard."""
    opened: list[object] = []
    real = socket.socket.connect

    def connect(self, address):
        opened.append(address)
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return opened


def _worst_case(texts: list[str], per_mtok: tuple[float, float], max_tokens: int = 20) -> float:
    total = 0.0
    for text in texts:
        prompt = render_api_prompt(RatingRequest(text, "dog"))
        n_in = len(prompt.system.encode()) + len(prompt.user.encode()) + 64
        total += (n_in * per_mtok[0] + max_tokens * per_mtok[1]) / 1e6
    return total


def test_dry_run_sends_nothing_and_counts_calls(
    loopback, api_keys, make_api_judge, cache_dir, count_connections, caplog
):
    data = make_samples(6)
    with loopback.LoopbackServer() as server:
        make_api_judge("openai", server).rate(
            [RatingRequest(t, "dog") for t in data["text"][:2]]
        )  # two samples already cached
        warmed = server.n_requests
        count_connections.clear()
        common = {"cache": cache_dir, "base_url": server.openai_url}
        estimate = estimate_panel(
            ["openai", "openai/served-model", "anthropic/claude-haiku-4-5", "llama/x.gguf"],
            data,
            options={"anthropic/claude-haiku-4-5": {"base_url": server.anthropic_url}},
            **common,
        )
        assert server.n_requests == warmed == 2  # nothing was sent ...
    assert count_connections == []  # ... not even a connection opened
    by = {j.judge: j for j in estimate.judges}
    assert list(by) == ["openai/gpt-4o-mini", "openai/served-model", "anthropic/claude-haiku-4-5"]
    assert "not found" in estimate.skipped["llama/x.gguf"]
    mini, served, haiku = by.values()
    assert (mini.requests, mini.cached, mini.calls) == (6, 2, 4)
    assert (served.cached, served.calls) == (0, 6)
    assert (haiku.cached, haiku.calls) == (0, 6)
    texts = list(data["text"])
    assert mini.cost_usd_max == pytest.approx(_worst_case(texts[2:], (0.15, 0.60)))
    assert haiku.cost_usd_max == pytest.approx(_worst_case(texts, (1.0, 5.0)))
    assert mini.output_tokens_max == 4 * 20 and haiku.output_tokens_max == 6 * 20
    assert 0 < mini.input_tokens_typical < mini.input_tokens_max
    assert mini.price_source.startswith("genai-prices")
    # an unpriced model stays unknown, and so does the panel total - never 0
    assert served.cost_usd_max is None and served.price_source == "unknown"
    assert estimate.cost_usd_max is None and estimate.fits(100.0) is None
    assert estimate.calls == 16 and estimate.samples == 6
    frame = estimate.to_frame()
    assert frame["cost_usd_max"].isna().sum() == 1 and len(frame) == 3


def test_dry_run_with_limit_and_built_judges(loopback, api_keys, make_api_judge):
    data = make_samples(10)
    with loopback.LoopbackServer() as server:
        judge = make_api_judge("anthropic", server)
        local = LocalJudge()
        estimate = estimate_panel([judge, local], data, limit=3)
        assert server.n_requests == 0
    assert judge.cache.stats() == {"hits": 0, "misses": 0}  # peeked, not counted
    api, here = estimate.judges
    assert api.requests == api.calls == 3 and estimate.samples == 3
    # a judge without its own estimate: cache unknown, cost 0 because it is local
    assert here.cached is None and here.calls == 3 and here.cost_usd_max == 0.0
    assert estimate.cost_usd_max == pytest.approx(api.cost_usd_max)
    assert estimate.fits(None) is True and estimate.fits(api.cost_usd_max * 2) is True
    assert estimate.fits(api.cost_usd_max / 2) is False


KEY_VARIABLES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN")
PRICED = {  # a model of each provider in the price table, and the variable it needs
    "anthropic/claude-haiku-4-5": "ANTHROPIC_API_KEY",
    "openai/gpt-4o-mini": "OPENAI_API_KEY",
}


@pytest.mark.parametrize("name", list(PRICED))
def test_a_judge_without_its_key_is_priced_as_with_it(
    name, monkeypatch, cache_dir, count_connections
):
    """The dry run prices an API judge whose key is not set exactly as the same judge with
    a key: calls, token bounds and worst-case USD; only `missing_key` tells them apart."""
    for var in (*KEY_VARIABLES, "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    data = make_samples(5)
    keyless = estimate_panel([name], data, cache=cache_dir)
    (judge,) = keyless.judges
    assert keyless.skipped == {} and judge.judge == name
    assert judge.calls == keyless.calls == len(data) and keyless.samples == len(data)
    assert judge.cost_usd_max is not None and judge.cost_usd_max > 0
    assert judge.missing_key == PRICED[name] and keyless.missing_keys == {name: PRICED[name]}
    assert keyless.to_dict()["missing_keys"] == {name: PRICED[name]}
    assert keyless.to_dict()["judges"][0]["missing_key"] == PRICED[name]

    monkeypatch.setenv(PRICED[name], "sk-test-dummy-never-sent")
    keyed = estimate_panel([name], data, cache=cache_dir)
    (with_key,) = keyed.judges
    assert with_key.missing_key is None and keyed.missing_keys == {}
    assert with_key.cost_usd_max == pytest.approx(judge.cost_usd_max)
    assert keyed.cost_usd_max == pytest.approx(keyless.cost_usd_max)
    assert replace(judge, missing_key=None) == with_key  # every other figure is the same
    assert count_connections == []  # nothing was sent, with or without the key


def test_a_keyless_judge_counts_in_the_panel_total(no_api_keys, tmp_path):
    data = make_samples(4)
    missing = f"llama/{tmp_path}/missing.gguf"
    estimate = estimate_panel([*PRICED, missing], data, cache=False)
    assert [j.judge for j in estimate.judges] == list(PRICED)
    assert "not found" in estimate.skipped[missing] and list(estimate.skipped) == [missing]
    assert estimate.calls == 2 * len(data)
    assert estimate.cost_usd_max == pytest.approx(sum(j.cost_usd_max for j in estimate.judges))
    assert estimate.fits(estimate.cost_usd_max) is True
    assert estimate.fits(estimate.cost_usd_max / 2) is False


@pytest.mark.parametrize("name", list(PRICED))
def test_an_estimate_only_judge_refuses_to_rate(name, monkeypatch):
    """Built without a key (or even with one) for estimating only: no key read, no SDK,
    no client, and every way into rating raises EstimateOnly before anything is sent."""
    monkeypatch.setenv(PRICED[name], "sk-test-SECRET-estimate-only")
    monkeypatch.setitem(sys.modules, name.split("/")[0], None)  # the SDK is not needed
    judge = get_judge(name, estimate_only=True, cache=False)
    assert judge.estimate_only and judge._secret is None and not hasattr(judge, "_client")
    assert "SECRET" not in repr(judge) and "SECRET" not in str(judge.describe())
    request = RatingRequest("Sample text about a dog", "dog")
    assert judge.estimate([request]).calls == 1
    for attempt in (
        lambda: judge.rate([request]),
        lambda: judge.rate([]),
        lambda: judge.rate_one("text", "dog"),
        lambda: judge._rate_one(request),
        lambda: run_panel([judge], make_samples(2)),
    ):
        with pytest.raises(EstimateOnly, match=PRICED[name]):
            attempt()
    judge.close()
    judge.close()  # safe twice, with no client


def test_a_real_run_still_skips_a_judge_without_its_key(no_api_keys):
    judges, skipped = build_panel(list(PRICED))
    assert judges == []
    assert skipped == {name: f"${var} is not set" for name, var in PRICED.items()}
    for name in PRICED:
        with pytest.raises(MissingKey) as caught:
            get_judge(name)
        assert caught.value.key_env == PRICED[name]


def test_a_budget_equal_to_the_worst_case_is_never_exceeded(loopback, api_keys, make_api_judge):
    data = make_samples(8)
    # the worst a real API can bill: one token per prompt byte plus framing, max_tokens out
    prompts = [render_api_prompt(RatingRequest(t, "dog")) for t in data["text"]]
    most = min(len(p.system.encode()) + len(p.user.encode()) for p in prompts) + 64
    with loopback.LoopbackServer(default=loopback.ok(input_tokens=most, output_tokens=20)) as srv:
        probe = make_api_judge("anthropic", srv)
        cap = estimate_panel([probe], data).cost_usd_max * (1 + 1e-9)
        judge = make_api_judge("anthropic", srv, budget_usd=cap, cache=False)
        result = run_panel([judge], data, max_concurrency=4)
        assert srv.n_requests == len(data)
    assert result.scores["score"].notna().all() and judge.budget.spent_usd <= cap


def test_unknown_judge_estimate_is_unknown_not_zero():
    class Opaque(LocalJudge):
        price = None

    estimate = estimate_panel([Opaque()], make_samples(2))
    assert estimate.judges[0].cost_usd_max is None and estimate.cost_usd_max is None


@pytest.mark.judge
@pytest.mark.timeout(120)
def test_llama_dry_run_matches_its_cache(shared_llama, tmp_path):
    judge = get_judge("llama/embedded", llama=shared_llama, cache=tmp_path / "c")
    data = make_samples(3)
    run_panel([judge], data, limit=2, rubric=Rubric())
    estimate = estimate_panel([judge], data)
    (only,) = estimate.judges
    assert (only.requests, only.cached, only.calls) == (3, 2, 1)
    assert only.cost_usd_max == 0.0 and only.price_source.startswith("local")
    fluency = estimate_panel([judge], data, rubric=Rubric(fluency=True)).judges[0]
    assert fluency.cached == 0  # the fluency axis of those texts was never scored


def _recorder(ticks: list[tuple[int, int]]):
    """A progress callback that keeps what it hears."""
    return lambda done, total: ticks.append((done, total))

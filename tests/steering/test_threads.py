"""Torch's thread count: chosen from the free cores when a run starts, and the texts do
not depend on it (issue 55, item 8).

The token ids are the same at 1 and 2 threads, greedy and sampled, on the tiny model and
(integration) on the embedded 270M one: only fp32 attention over the KV cache sums in
another order with another count (docs/scale-out.md), which moves log-probabilities in
their last bits; a sampled token could flip only where a draw falls within such a bit of
a boundary, which these rows (and the 60 rows of `steer-eval run --concepts 4` at 1 and
2 threads) never hit. Because the bits can move, the run's tags record the count
(``steer_eval.threads``) and a resumed run keeps its first count.
"""

from __future__ import annotations

import pytest
import torch

from steering import cpu
from steering.cpu import CpuLoad, _stat_times
from steering.generation import GenerationRow, SamplingConfig, generate_batch
from steering.platform import (
    OMP_THREADS_ENV,
    THREADS_ENV,
    CpuPlatform,
    ThreadsError,
    platform_for,
)

PROMPTS = [
    "tell me about the dog .",
    "here is a story :",
    "cat",
    "a big old tree in the city",
    "the city was quiet and the dog slept",
    "once upon a time",
]
GREEDY = SamplingConfig(max_new_tokens=12, greedy=True)
SAMPLED = SamplingConfig(max_new_tokens=12, temperature=1.0, top_p=0.95)


@pytest.fixture
def threads_restored():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def generate_at(lm, threads: int, sampling: SamplingConfig, layer: int):
    torch.set_num_threads(threads)
    directions = torch.randn(2, lm.hidden_size, generator=torch.Generator().manual_seed(3))
    directions = directions / directions.norm(dim=1, keepdim=True)
    rows = [
        GenerationRow(f"r{i}", p, seed=40 + i, direction=i % 2, coefficient=float(i % 3))
        for i, p in enumerate(PROMPTS)
    ]
    gens, _ = generate_batch(
        lm, rows, directions, layer, "additive", sampling, logprobs_for=[True] * len(rows)
    )
    return [g.token_ids for g in gens], [g.logprobs for g in gens]


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_the_tiny_models_tokens_do_not_depend_on_the_thread_count(
    tiny_lm, sampling, threads_restored
):
    one, one_lp = generate_at(tiny_lm, 1, sampling, layer=1)
    two, two_lp = generate_at(tiny_lm, 2, sampling, layer=1)
    assert one == two
    for a, b in zip(one_lp, two_lp, strict=True):
        assert a == pytest.approx(b, abs=1e-4)


@pytest.mark.integration
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_the_embedded_models_tokens_do_not_depend_on_the_thread_count(
    embedded_lm, sampling, threads_restored
):
    """On the 270M model the matmuls are large enough to split across threads."""
    layer = embedded_lm.default_layer
    one, one_lp = generate_at(embedded_lm, 1, sampling, layer)
    two, two_lp = generate_at(embedded_lm, 2, sampling, layer)
    assert one == two
    for a, b in zip(one_lp, two_lp, strict=True):
        assert a == pytest.approx(b, abs=1e-3)


# ------------------------------------------------------------------- the free cores


STAT = """cpu  300 0 100 500 10 0 0 0 0 0
cpu0 100 0 50 200 5 0 0 0 0 0
cpu1 200 0 50 300 5 0 0 0 0 0
intr 12345
"""


def test_proc_stat_is_read_for_the_cpus_of_the_mask_only():
    assert _stat_times(STAT, {0}) == (150, 355)
    assert _stat_times(STAT, {0, 1}) == (400, 910)
    assert _stat_times(STAT, {1, 7}) == (250, 555)


@pytest.mark.parametrize(
    ("cpus", "busy", "free"),
    [(2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.0, 1), (2, 2.0, 1), (16, 3.2, 13), (4, None, 4)],
)
def test_a_core_counts_as_taken_when_others_keep_it_half_busy(cpus, busy, free):
    assert CpuLoad(cpus, busy, "test").free == free


def test_a_busy_process_is_seen_and_our_own_work_is_not(monkeypatch):
    """Two stat readings 0.3 s apart on 2 CPUs, 0.27 CPU-seconds busy, 0.15 of them ours:
    others kept 0.4 of a core busy, so both cores count as free."""
    readings = iter(
        [
            "cpu0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0\n",
            "cpu0 20 0 0 10 0 0 0 0\ncpu1 7 0 0 23 0 0 0 0\n",
        ]
    )
    own = iter([1.0, 1.15])
    monkeypatch.setattr(cpu, "PROC_STAT", type("P", (), {"read_text": lambda: next(readings)}))
    monkeypatch.setattr(cpu, "_own_cpu_seconds", lambda: next(own))
    monkeypatch.setattr(cpu, "usable_cpus", lambda: {0, 1})
    monkeypatch.setattr(cpu.time, "sleep", lambda _s: None)
    load = cpu.cpu_load(0.3)
    assert load.cpus == 2 and load.busy == pytest.approx(0.4) and load.free == 2


# --------------------------------------------------------------- the platform's choice


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    monkeypatch.delenv(OMP_THREADS_ENV, raising=False)


def busy(monkeypatch, cpus: int, others: float) -> None:
    import steering.platform as platform

    monkeypatch.setattr(platform, "cpu_load", lambda: CpuLoad(cpus, others, "test"))


def test_the_cpu_takes_the_free_cores(monkeypatch, no_env, threads_restored):
    busy(monkeypatch, 2, 1.0)
    choice = CpuPlatform(torch.device("cpu")).choose_threads()
    assert (choice.threads, choice.source) == (1, "free cores")
    assert torch.get_num_threads() == 1
    assert choice.describe() == "free cores: 2 usable CPUs, 1.00 busy with other processes (test)"


def test_the_users_count_wins_and_says_so(monkeypatch, no_env, threads_restored):
    busy(monkeypatch, 2, 1.0)
    monkeypatch.setenv(THREADS_ENV, "2")
    choice = CpuPlatform(torch.device("cpu")).choose_threads(recorded=1)
    assert (choice.threads, choice.describe()) == (2, THREADS_ENV)
    monkeypatch.setenv(THREADS_ENV, "two")
    with pytest.raises(ThreadsError, match="STEER_EVAL_THREADS='two'"):
        CpuPlatform(torch.device("cpu")).choose_threads()
    monkeypatch.delenv(THREADS_ENV)
    monkeypatch.setenv(OMP_THREADS_ENV, "2")
    torch.set_num_threads(2)  # what torch took from it at import
    choice = CpuPlatform(torch.device("cpu")).choose_threads()
    assert (choice.threads, choice.source) == (2, OMP_THREADS_ENV)


def test_a_resumed_run_keeps_its_first_count(monkeypatch, no_env, threads_restored):
    busy(monkeypatch, 2, 0.0)
    choice = CpuPlatform(torch.device("cpu")).choose_threads(recorded=1)
    assert (choice.threads, choice.source, torch.get_num_threads()) == (1, "recorded", 1)


def test_another_device_leaves_torchs_count(threads_restored):
    torch.set_num_threads(1)
    choice = platform_for("meta").choose_threads()
    assert (choice.threads, choice.source) == (1, "unchanged")


# ------------------------------------------------------------------- the run's tags


def test_a_run_records_its_threads_and_a_resume_keeps_them(
    monkeypatch, no_env, threads_restored, tiny_model_dir, tmp_path, mlflow_store
):
    from experiments import tracking
    from experiments.config import load_config
    from experiments.kernel.lifecycle import Resume, open_run
    from experiments.tracking.context import THREADS_FROM_TAG, THREADS_TAG, WAIT_POLICY_TAG

    config = load_config(
        "configs/phase5.yaml",
        [
            f"model={tiny_model_dir}",
            "device=cpu",
            "concepts.limit=2",
            f"tracking.results_dir={tmp_path}",
        ],
    )
    busy(monkeypatch, 2, 1.0)
    with open_run(config, need_embedder=False) as session:
        run_id, _ = session.start("threads-test", "threads", tmp_path)
        session.directory.write_config(session.config)
        assert torch.get_num_threads() == 1
    tags = tracking.get_run(run_id).data.tags
    assert tags[THREADS_TAG] == "1"
    assert tags[THREADS_FROM_TAG].startswith("free cores: 2 usable CPUs, 1.00 busy")
    assert tags[WAIT_POLICY_TAG]
    busy(monkeypatch, 2, 0.0)  # quiet now: the resumed run still computes on one thread
    with open_run(resume=Resume(run_id), need_embedder=False) as session:
        assert session.threads.source == "recorded" and torch.get_num_threads() == 1

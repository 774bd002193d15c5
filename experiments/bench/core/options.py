"""What ``steer-eval bench`` measures and how often: constants, targets and options.

No torch here: the CLI imports this module to build its ``--help``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
DEFAULT_OUT = Path("bench/results.json")
DEFAULT_CONFIG = Path("configs/phase5.yaml")
SECTIONS = (
    "batched",
    "dtype",
    "llama",
    "peers",
    "roofline",
    "profile",
    "head",
    "tuning",
    "scaling",
    "load",
    "e2e",
    "gpu",
)
# sections measured together, interleaved repeat by repeat
SIDE_BY_SIDE = frozenset({"batched", "dtype", "llama", "peers"})
E2E_MARKER = "BENCH_E2E "
HF_BATCHED = "hf_generate_batched"  # the peers section's batched-HF-with-a-hook entry
# the gpu section's arms: ours, and HF generate with the per-row hook, dynamic or static
# compiled cache
GPU_OURS, GPU_HF_DYNAMIC, GPU_HF_COMPILED = "ours", "hf_generate_hook", "hf_generate_hook_static"
# A run record's stages that write what the run shows (MLflow, the folder's figures and
# views): the e2e section's "tracking" group, which issue 39's target bounds.
TRACKING_STAGES = (
    "mlflow_open",
    "traces",
    "evaluation",
    "figures",
    "views",
    "mlflow_parent",
    "child_runs",
)

TARGETS = {
    "batched_vs_per_sample": ("batched / per-sample tokens/s", ">=", 10.0),
    "ours_vs_hf_batched_hook": ("ours / HF generate on the batch with a hook", ">=", 2.0),
    "ours_vs_llama_cpp": ("ours / llama.cpp single-stream tokens/s, fp32 GGUF", ">=", 4.0),
    "fraction_of_peak": ("decode loop, fraction of the fp32 peak", ">=", 0.5),
    "make_run_seconds": ("default make run, warm (s)", "<", 90.0),
    "perplexity_seconds": ("make run's perplexity pass (s)", "<=", 15.0),
    "measurement_seconds": ("make run's measurement stage (s)", "<=", 5.0),
    "tracking_seconds": ("make run's MLflow writes, figures included (s)", "<=", 15.0),
    "peak_memory_gb": ("peak resident memory of make run (GB)", "<", 3.0),
    "load_busy_vs_quiet": (
        "generation beside a busy process / quiet, threads from the free cores",
        "<=",
        1.5,
    ),
}

# The gpu section's targets (issue 32), on one card in one run: key -> (label, op, threshold).
GPU_TARGETS = {
    "ours_vs_hf_dynamic_256": ("ours / HF generate + hook (dynamic cache), 256 rows", ">=", 3.0),
    "ours_vs_hf_compiled_256": ("ours / HF generate + hook, static compiled, 256 rows", ">=", 1.0),
    "ours_vs_hf_compiled_1024": (
        "ours / HF generate + hook, static compiled, 1,024 rows",
        ">=",
        1.0,
    ),
    "ours_first_call_seconds": ("ours, slowest first call (s)", "<", 30.0),
    "matrix_rate_fraction_1024": (
        "ours, fraction of the card's bf16 matrix rate, 1,024 rows",
        ">=",
        0.25,
    ),
}


@dataclass
class BenchOptions:
    """What to measure and how often; ``quick`` shrinks everything to a smoke test."""

    config: Path = DEFAULT_CONFIG
    overrides: list[str] = field(default_factory=list)
    out: Path | None = DEFAULT_OUT
    sections: tuple[str, ...] = SECTIONS
    repeats: int = 3
    e2e_repeats: int = 1
    per_sample_limit: int = 15
    llama_limit: int = 30
    llama_threads: tuple[int, ...] = ()  # () = 1 and every core up to torch's thread count
    llama_f32: bool = True  # also time llama.cpp on the GGUF dequantized to fp32
    device: str | None = None
    dtype: str | None = None
    threads: int | None = None
    quick: bool = False
    scaling_concepts: tuple[int, ...] = (10, 40, 160)  # 90, 360 and 1,440 rows
    scaling_tokens: tuple[int, ...] = (25, 50, 100)
    tuning_tokens: int = 10
    tuning_threads: tuple[int, ...] = ()  # () = 1, torch's current count and every core
    tuning_batch_sizes: tuple[int, ...] = (16, 32)
    load_concepts: int = 4  # section load: the grid's first 4 concepts (60 rows by default)
    agreement_prompts: int = 6
    agreement_tokens: int = 8
    peer_agreement_rows: int = 6  # greedy check that the HF batched peer matches ours
    profile_tokens: int = 8
    head_blocks: tuple[int, ...] = (0, 512, 1024, 2048, 4096)  # 0: one product
    head_block: int | None = None  # the blocked run's block; None: steering.head's default
    work_dir: Path | None = None  # warm classifiers; default <cache>/bench
    gpu_rows: tuple[int, ...] = (256, 1024)  # section gpu: batch sizes
    gpu_tokens: int = 50
    gpu_model: str = "gemma-3-4b-pt"  # a dummy (random-weight) model from this config
    gpu_repeats: int = 2  # timed calls after the first; the best one counts
    gpu_compiled: bool = True  # also HF generate with a static compiled cache (~150 s compile)

    @classmethod
    def quick_defaults(cls, **kwargs: Any) -> BenchOptions:
        base: dict[str, Any] = {
            "overrides": ["concepts.limit=2", "generation.max_new_tokens=8"],
            "repeats": 1,
            "per_sample_limit": 3,
            "llama_limit": 3,
            "quick": True,
            "scaling_concepts": (1, 2, 4),
            "scaling_tokens": (4, 8, 16),
            "tuning_tokens": 4,
            "tuning_batch_sizes": (2,),
            "load_concepts": 1,
            "agreement_prompts": 2,
            "agreement_tokens": 4,
            "peer_agreement_rows": 3,
            "profile_tokens": 4,
            "head_blocks": (0, 256),
            "head_block": 256,
            "gpu_rows": (8, 16),
            "gpu_tokens": 8,
            "gpu_repeats": 1,
        }
        extra = list(kwargs.pop("overrides", []) or [])
        base.update(kwargs)
        base["overrides"] = [*base["overrides"], *extra]
        return cls(**base)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly copy for the results file (paths as strings, tuples as lists)."""
        out: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            out[k] = str(v) if isinstance(v, Path) else (list(v) if isinstance(v, tuple) else v)
        return out


def parse_sections(only: str | None, skip: str | None) -> tuple[str, ...]:
    """The sections ``--only``/``--skip`` pick, in run order; ValueError names unknown ones."""

    def parse(text: str) -> set[str]:
        names = {s.strip() for s in text.split(",") if s.strip()}
        unknown = names - set(SECTIONS)
        if unknown:
            raise ValueError(
                f"unknown bench section(s) {', '.join(sorted(unknown))}; use {', '.join(SECTIONS)}"
            )
        return names

    chosen = parse(only) if only else set(SECTIONS)
    if skip:
        chosen -= parse(skip)
    return tuple(s for s in SECTIONS if s in chosen)


def parse_rows(text: str) -> tuple[int, ...]:
    """``"256,1024"`` -> (256, 1024): positive batch sizes, in the order given."""
    try:
        rows = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        rows = ()
    if not rows or min(rows) < 1:
        raise ValueError(f"rows {text!r}: give comma-separated positive integers")
    return rows

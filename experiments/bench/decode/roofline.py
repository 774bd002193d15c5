"""Section ``roofline``: the floating-point work of the decode loop against the CPU's peak.

The work is counted from the model's shape, row by row at each row's real context: every
matmul of the decoder layers (q, k, v, o, gate, up, down), the attention scores and
values, and the output head (262,144 x 640 on the embedded model, about 60% of the work
per token). Achieved GFLOP/s is that work over the measured wall time of our batched run;
the peak comes from the CPU's vector width, FMA units, cores and clock (steering.cpu).

That clock is the nominal one a VM reports, and boost runs higher: on the 2-core EPYC
of the committed results (2.6 GHz nominal, a 166 GFLOP/s model) plain ``torch.mm`` ran
at up to 196 GFLOP/s. So the section also measures a matmul ceiling, the best of a few
shapes MKL runs well, and the fraction of peak divides by whichever is higher.

That ceiling is the best single product, while the decode loop's rate is a median over
runs of half a minute, and on a shared VM the matmul rate itself drifts: 1-second
windows of one shape ranged from 152 to 195 GFLOP/s within a minute on the machine
above. So the side-by-side rounds also time a sustained matmul between the batched runs
(:func:`run_sustained_matmul`), and the section reports the loop's fraction of that rate
next to the strict fraction of peak, which the target keeps using.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from experiments.bench.core.measure import Measurement, median, ratio, rounded
from experiments.bench.core.workload import Workload, batches_of
from steering.cpu import cpu_features
from steering.generation import Generation
from steering.head import reused_logits
from steering.models import LoadedModel

PARTS = ("layers", "attention", "head")

HOW = (
    "useful FLOPs (2 per multiply-add): the linear maps of every decoder layer (q, k, v, o, "
    "gate, up, down) at every position, attention scores and values at each row's real "
    "context (causal; sliding-window layers capped at the window), and the output head at "
    "each position that predicts a token; the prompt's prefill is included. Not counted: "
    "norms, activations, RoPE, the steering hook, sampling, and finished rows that still "
    "ride in a batch"
)


@dataclass(frozen=True)
class ModelShape:
    """The sizes that decide a decoder-only transformer's FLOPs per token."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    windows: tuple[int | None, ...]  # per layer: the sliding window, or None (full attention)
    mlp_matrices: int = 3  # gated MLP: gate, up, down

    @classmethod
    def of(cls, lm: LoadedModel) -> ModelShape:
        config = lm.model.config
        c = config.get_text_config() if hasattr(config, "get_text_config") else config
        heads = int(c.num_attention_heads)
        window = getattr(c, "sliding_window", None)
        types = getattr(c, "layer_types", None) or ["full_attention"] * lm.n_layers
        return cls(
            hidden=int(c.hidden_size),
            intermediate=int(c.intermediate_size),
            heads=heads,
            kv_heads=int(getattr(c, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(c, "head_dim", None) or c.hidden_size // heads),
            vocab=int(lm.model.get_output_embeddings().weight.shape[0]),
            windows=tuple(window if t == "sliding_attention" else None for t in types),
        )

    @property
    def n_layers(self) -> int:
        return len(self.windows)

    @property
    def layer_flops(self) -> int:
        """The linear maps of all decoder layers, per position."""
        h, hd = self.hidden, self.head_dim
        qkv = h * (self.heads + 2 * self.kv_heads) * hd
        out = self.heads * hd * h
        mlp = self.mlp_matrices * h * self.intermediate
        return 2 * (qkv + out + mlp) * self.n_layers

    def attention_flops(self, context: int) -> int:
        """Scores (q.k) and values (p.v) of one query over ``context`` keys, all layers."""
        per_key = 4 * self.heads * self.head_dim
        return sum(per_key * (context if w is None else min(context, w)) for w in self.windows)

    @property
    def head_flops(self) -> int:
        """The output head, per position whose logits are computed."""
        return 2 * self.hidden * self.vocab


def forward_flops(
    shape: ModelShape, positions: int, cached: int, head_positions: int
) -> dict[str, int]:
    """One row's forward pass over ``positions`` new tokens after ``cached`` ones."""
    return {
        "layers": positions * shape.layer_flops,
        "attention": sum(shape.attention_flops(cached + i + 1) for i in range(positions)),
        "head": head_positions * shape.head_flops,
    }


def generation_flops(shape: ModelShape, gens: Sequence[Generation]) -> dict[str, dict[str, int]]:
    """The work behind ``gens``, as our decode loop does it: a prefill over the prompt with
    the head at its last position, then one single-token step per further forward pass.
    A row that stopped at EOS ran one forward pass more than it kept tokens."""
    prefill: Counter[str] = Counter(dict.fromkeys(PARTS, 0))
    decode: Counter[str] = Counter(dict.fromkeys(PARTS, 0))
    for g in gens:
        forwards = g.n_new_tokens + int(g.stopped_at_eos)
        if forwards == 0:
            continue
        prefill.update(forward_flops(shape, g.n_prompt_tokens, 0, 1))
        for k in range(1, forwards):
            decode.update(forward_flops(shape, 1, g.n_prompt_tokens + k - 1, 1))
    total = {p: prefill[p] + decode[p] for p in PARTS}
    return {"prefill": prefill, "decode": decode, "total": total}


def per_token(shape: ModelShape, context: int) -> dict[str, Any]:
    """FLOPs of one decode step of one row at ``context``, by part, with each part's share."""
    parts = forward_flops(shape, 1, context - 1, 1)
    total = sum(parts.values())
    return {
        "context": context,
        **{f"{k}_mflop": round(v / 1e6, 3) for k, v in parts.items()},
        "total_mflop": round(total / 1e6, 3),
        "share": {k: round(v / total, 4) for k, v in parts.items()},
    }


def machine_peak(dtype: str) -> dict[str, Any]:
    """The CPU's flags, cores and clock, and its peak GFLOP/s for ``dtype``."""
    f = cpu_features()
    peak, how = f.peak_gflops(dtype)
    return {
        "cpu": f.model,
        "vendor": f.vendor,
        "flags": f.reported_flags(),
        "vector_bits": f.vector_bits,
        "datapath_bits": f.datapath_bits,
        "physical_cores": f.physical_cores,
        "logical_cpus": f.logical_cpus,
        "clock_ghz": None if f.mhz is None else round(f.mhz / 1000, 3),
        "peak_gflops": rounded(peak, 1) if peak else None,
        "peak_how": how,
    }


# (m, k, n): a square product and the decode loop's largest layer product at a prefill size
CEILING_SHAPES = ((2048, 2048, 2048), (512, 640, 2048), (512, 2048, 640))


@torch.inference_mode()
def matmul_ceiling(
    dtype: torch.dtype = torch.float32, seconds_per_shape: float = 0.5
) -> dict[str, Any]:
    """Best GFLOP/s of ``torch.mm`` over :data:`CEILING_SHAPES`, measured now on the CPU."""
    gen = torch.Generator().manual_seed(0)
    best: dict[str, float] = {}
    for m, k, n in CEILING_SHAPES:
        a = torch.randn(m, k, generator=gen).to(dtype)
        b = torch.randn(n, k, generator=gen).to(dtype)
        flop = 2 * m * k * n
        torch.mm(a, b.t())  # warm-up
        rates: list[float] = []
        spent = 0.0
        while spent < seconds_per_shape or len(rates) < 3:
            start = time.perf_counter()
            torch.mm(a, b.t())
            dt = time.perf_counter() - start
            spent += dt
            rates.append(flop / dt / 1e9)
        best[f"{m}x{k}x{n}"] = round(max(rates), 1)
    return {"gflops": max(best.values()), "by_shape": best}


SUSTAINED = "matmul_sustained"  # its name among the side-by-side runs
SUSTAINED_SECONDS = 3.0  # per ceiling shape and round


@torch.inference_mode()
def sustained_matmul(seconds_per_shape: float = SUSTAINED_SECONDS) -> dict[str, float]:
    """GFLOP/s of back-to-back fp32 ``torch.mm`` calls per :data:`CEILING_SHAPES` shape,
    as total work over total time: what the machine keeps up, not its best moment."""
    gen = torch.Generator().manual_seed(0)
    rates: dict[str, float] = {}
    for m, k, n in CEILING_SHAPES:
        a = torch.randn(m, k, generator=gen)
        b = torch.randn(n, k, generator=gen)
        torch.mm(a, b.t())  # warm-up
        calls, start = 0, time.perf_counter()
        while calls < 3 or time.perf_counter() - start < seconds_per_shape:
            torch.mm(a, b.t())
            calls += 1
        spent = time.perf_counter() - start
        rates[f"{m}x{k}x{n}"] = round(2 * m * k * n * calls / spent / 1e9, 1)
    return rates


def run_sustained_matmul(
    m: Measurement | None, seconds_per_shape: float = SUSTAINED_SECONDS
) -> Measurement:
    """One round of :func:`sustained_matmul`, appended to ``m`` (a side-by-side run): its
    best shape's rate goes to ``extra["gflops"]``, one entry per round."""
    m = m or Measurement()
    start = time.perf_counter()
    rates = sustained_matmul(seconds_per_shape)
    m.add(time.perf_counter() - start, 0)
    m.extra.setdefault("gflops", []).append(max(rates.values()))
    m.extra.setdefault("by_shape", []).append(rates)
    return m


@dataclass(frozen=True)
class LoopBatch:
    """One batch as the decode loop ran it: every row rides along until the last stops."""

    rows: int
    width: int  # the prompt's padded width, the prefill's positions per row
    passes: int  # forward passes: the prefill, then one per further step


def loop_batches(lm: LoadedModel, wl: Workload, gens: Sequence[Generation]) -> list[LoopBatch]:
    """The batches of :func:`~experiments.bench.decode.batched.run_batched` over ``wl``'s rows, with
    the widths and forward passes its generations ``gens`` took."""
    by_key = {g.key: g for g in gens}
    out = []
    for batch in batches_of(lm, wl.rows, wl.batch_size):
        ours = [by_key[r.key] for r in batch if r.key in by_key]
        if ours:
            passes = max(g.n_new_tokens + int(g.stopped_at_eos) for g in ours)
            out.append(LoopBatch(len(ours), max(g.n_prompt_tokens for g in ours), passes))
    return out


PRODUCTS = "products_only"  # its name among the side-by-side runs


@torch.inference_mode()
def products_only(lm: LoadedModel, batches: Sequence[LoopBatch]) -> float:
    """Seconds of the decode loop's matrix products alone: per
    batch, every linear map of every decoder layer at ``rows x width`` positions for the
    prefill and ``rows`` per further pass, and the output head (as the decode runs it,
    blocks and reused logits included) at ``rows`` positions per pass, on the model's own
    weights with random inputs. Everything else the loop does (norms, activations,
    attention, the KV cache, sampling) is left out, so the loop's useful FLOPs over this
    time bound what the loop could reach with its products as they are."""
    linears = [m for layer in lm.layers for m in layer.modules() if isinstance(m, nn.Linear)]
    head = lm.model.get_output_embeddings()
    gen = torch.Generator().manual_seed(0)
    inputs: dict[tuple[int, int], torch.Tensor] = {}

    def x(positions: int, features: int) -> torch.Tensor:
        if (positions, features) not in inputs:
            inputs[positions, features] = torch.randn(positions, features, generator=gen).to(
                device=lm.device, dtype=lm.dtype
            )
        return inputs[positions, features]

    start = time.perf_counter()
    with reused_logits(lm.model):
        for b in batches:
            for positions in [b.rows * b.width] + [b.rows] * (b.passes - 1):
                for linear in linears:
                    linear(x(positions, linear.in_features))
                head(x(b.rows, head.in_features))
    return time.perf_counter() - start


def run_products_only(
    lm: LoadedModel, wl: Workload, loop: Measurement, m: Measurement | None = None
) -> Measurement:
    """One replay of :func:`products_only` over the batches of ``loop``'s last repeat (run
    just before it, in the same round), appended to ``m``: the bound and the loop it
    bounds meet the same drift of a shared machine."""
    m = m or Measurement()
    m.add(products_only(lm, loop_batches(lm, wl, loop.generations or [])), 0)
    return m


def achieved(
    shape: ModelShape,
    m: Measurement,
    dtype: str,
    on_cpu: bool,
    ceiling: float | None = None,
    sustained: float | None = None,
    products: float | None = None,
) -> dict[str, Any]:
    """Work, median seconds and GFLOP/s of one measured run, against the peak on a CPU
    (and against ``sustained``, the matmul rate kept up in the same rounds, if timed; and
    the bound its products alone set, ``products`` seconds, if timed)."""
    gens = m.generations or []
    work = generation_flops(shape, gens)
    total = sum(work["total"].values())
    seconds = m.median_seconds
    gflops = ratio(total / 1e9, seconds)
    out: dict[str, Any] = {
        "rows": len(gens),
        "tokens": sum(g.n_new_tokens for g in gens),
        "median_seconds": rounded(seconds),
        "gflop": {
            stage: {k: round(v / 1e9, 3) for k, v in parts.items()} for stage, parts in work.items()
        },
        "flop_total": total,
        "gflop_total": round(total / 1e9, 3),
        "share_of_work": {k: round(v / total, 4) for k, v in work["total"].items()}
        if total
        else {},
        "achieved_gflops": rounded(gflops, 3),
    }
    if on_cpu:
        modelled = machine_peak(dtype)["peak_gflops"]
        known = [p for p in (modelled, ceiling) if p]
        peak = max(known) if known else None
        out["modelled_peak_gflops"] = modelled
        out["matmul_ceiling_gflops"] = ceiling
        out["peak_gflops"] = peak
        out["fraction_of_peak"] = rounded(ratio(gflops, peak), 4)
        out["fraction_of_modelled_peak"] = rounded(ratio(gflops, modelled), 4)
        out["sustained_matmul_gflops"] = rounded(sustained, 1)
        out["fraction_of_sustained_matmul"] = rounded(ratio(gflops, sustained), 4)
        if products is not None:
            bound = ratio(total / 1e9, products)
            out["products_only"] = {
                "seconds": rounded(products, 6),
                "share_of_loop": rounded(ratio(products, seconds), 4),
                "gflops_bound": rounded(bound, 3),
                "fraction_of_peak_bound": rounded(ratio(bound, peak), 4),
            }
    return out


def section_roofline(
    lm: LoadedModel, measured: dict[str, Measurement], dtypes: Sequence[str]
) -> dict[str, Any]:
    """Achieved GFLOP/s of our batched run (and the other dtype's) against the CPU's peak,
    against the sustained matmul rate when ``measured`` has :data:`SUSTAINED` rounds, and
    against the bound its matrix products alone set when it has :data:`PRODUCTS` rounds
    (the first dtype, on a CPU)."""
    shape = ModelShape.of(lm)
    on_cpu = lm.device.type == "cpu"
    base = dtypes[0]
    gens = measured[base].generations or []
    mean_context = (
        round(sum(g.n_prompt_tokens + g.n_new_tokens / 2 for g in gens) / len(gens)) if gens else 1
    )
    # fp32 only: a bf16 product on a CPU without bf16 instructions runs ~200x slower
    ceilings = {"float32": matmul_ceiling()} if on_cpu and "float32" in dtypes else {}
    rounds = measured[SUSTAINED].extra.get("gflops", []) if SUSTAINED in measured else []
    sustained = {"float32": median(rounds)} if on_cpu and rounds else {}
    replays = measured[PRODUCTS].seconds if PRODUCTS in measured else []
    products = {base: median(replays)} if on_cpu and replays else {}
    result: dict[str, Any] = {
        "how": HOW,
        "model_shape": {**asdict(shape), "windows": sorted({str(w) for w in shape.windows})},
        "per_token": per_token(shape, max(1, mean_context)),
        "runs": {
            d: achieved(
                shape,
                measured[d],
                d,
                on_cpu,
                ceilings.get(d, {}).get("gflops"),
                sustained.get(d),
                products.get(d),
            )
            for d in dtypes
            if d in measured
        },
        "torch_threads": torch.get_num_threads(),
    }
    if on_cpu:
        result["machine"] = machine_peak(base)
        result["matmul_ceiling"] = {
            **ceilings,
            "how": "the best of repeated torch.mm calls per shape (m x k x n), measured in "
            "this section; the peak is the higher of it and the modelled peak",
        }
        if rounds:
            result["sustained_matmul"] = {
                "float32": {
                    "gflops": rounded(median(rounds), 1),
                    "rounds": rounds,
                    "by_shape": measured[SUSTAINED].extra.get("by_shape", []),
                },
                "how": f"fp32 torch.mm back to back for {SUSTAINED_SECONDS:g} s per shape "
                "(total work over total time), timed in every side-by-side round between "
                "the batched runs; the median over rounds of the best shape",
            }
        if products:
            result["products_only_how"] = (
                "the loop's matrix products alone, replayed at its shapes (every decoder "
                "layer's linear maps and the blocked output head, all rows of each batch at "
                "its padded prefill and every further pass) on the model's weights with "
                "random inputs, right after the loop in every side-by-side round, the "
                f"median of {len(replays)}: the loop's useful FLOPs over that time bound "
                "what it could reach if norms, activations, attention, the KV cache and "
                "sampling cost nothing, with its products as they are"
            )
        result["clock_assumption"] = (
            "the modelled peak takes the cpu MHz of /proc/cpuinfo for every core at once; a "
            "VM reports its nominal clock and boost runs higher, which the measured matmul "
            "ceiling catches when it exceeds the model"
        )
    else:
        result["machine"] = {"device": str(lm.device), "peak_gflops": None}
        result["note"] = "no peak modelled for GPUs: achieved GFLOP/s only"
    return result

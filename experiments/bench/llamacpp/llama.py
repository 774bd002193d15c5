"""Section ``llama`` (b): llama.cpp (llama-cpp-python) on the same GGUF.

One stream at a time with a control vector at the same layer, timed in chunks between
our batched repeats, and the agreement of its steering with our hook.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from experiments.bench.core.measure import Measurement, rounded, speedup
from experiments.bench.core.options import BenchOptions
from experiments.bench.core.workload import Workload
from experiments.bench.llamacpp.gguf_f32 import f32_path
from steering.generation import GenerationRow, generate_batch
from steering.models import LoadedModel

SINGLE_STREAM = "llama.cpp/"  # + thread count: the measured single-stream runs
SINGLE_STREAM_F32 = "llama.cpp_f32/"  # the same on the dequantized fp32 GGUF


def llama_layer_index(layer: int) -> int:
    """llama.cpp adds control vector il to the *output* of decoder layer il (0-based, after
    the residual add; ``build_cvec(cur, il)`` at the end of each layer), which is what our
    hook on ``lm.layer(layer)`` edits: il = layer. Its buffer holds one n_embd row per
    layer starting at layer 1 (layer 0 cannot be steered), so il's row is at
    ``(il - 1) * n_embd``."""
    if layer < 1:
        raise ValueError("llama.cpp control vectors cannot steer decoder layer 0")
    return layer


def set_cvec(
    ctx: Any,
    n_embd: int,
    direction: torch.Tensor | None,
    coefficient: float,
    il: int,
    n_layers: int,
) -> None:
    """Add ``coefficient * direction`` to layer il's output (None or 0 clears the vector),
    on a raw ``llama_context`` (``Llama.ctx``): one vector for the whole context."""
    import llama_cpp
    import numpy as np

    if direction is None or coefficient == 0.0:
        rc = llama_cpp.llama_set_adapter_cvec(ctx, None, 0, n_embd, -1, -1)
    else:
        buf = np.zeros(n_layers * n_embd, dtype=np.float32)
        buf[(il - 1) * n_embd : il * n_embd] = coefficient * direction.float().numpy()
        rc = llama_cpp.llama_set_adapter_cvec(
            ctx, buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), buf.size, n_embd, il, il
        )
    if rc != 0:
        raise RuntimeError(f"llama_set_adapter_cvec failed with {rc}")


def open_llama(gguf: Path, threads: int, logits_all: bool = False, gpu: bool = False) -> Any:
    """The peer's context, loaded as the local judge loads it (never on the AMX path)."""
    from judges.llama_runtime import open_llama as open_safely

    return open_safely(
        gguf,
        n_ctx=512,
        n_threads=threads,
        n_threads_batch=threads,
        n_gpu_layers=-1 if gpu else 0,
        logits_all=logits_all,
        seed=0,
        verbose=False,
    )


def close(llm: Any) -> None:
    if hasattr(llm, "close"):
        llm.close()


def run_llama(llm: Any, wl: Workload, rows: Sequence[GenerationRow], n_layers: int) -> Measurement:
    """One stream at a time, as a llama.cpp user runs it: a fresh context per sample."""
    il = llama_layer_index(wl.layer)
    s = wl.sampling
    m = Measurement(rows=len(rows))
    total, tokens = 0.0, 0
    for row in rows:
        vector = wl.vectors[row.direction]
        coefficient = float(vector.coefficients(wl.strengths[row.key])[0])
        start = time.perf_counter()
        set_cvec(llm.ctx, llm.n_embd(), vector.direction, coefficient, il, n_layers)
        llm.reset()
        out = llm.create_completion(
            row.prompt,
            max_tokens=s.max_new_tokens,
            temperature=0.0 if s.greedy else s.temperature,
            top_p=s.top_p,
            top_k=0,
            min_p=0.0,
            typical_p=1.0,
            repeat_penalty=1.0,
            seed=row.seed % (2**31),
        )
        total += time.perf_counter() - start
        tokens += int(out["usage"]["completion_tokens"])
    set_cvec(llm.ctx, llm.n_embd(), None, 0.0, il, n_layers)
    m.add(total, tokens)
    return m


@torch.inference_mode()
def steering_agreement(
    lm: LoadedModel, llm: Any, wl: Workload, n_prompts: int, n_tokens: int, n_layers: int
) -> dict[str, Any]:
    """Greedy top-1 agreement between our hook and llama.cpp's control vector.

    For each prompt (one per concept and generation prompt) and strength, our greedy
    continuation of ``n_tokens`` is fed to both models (teacher forcing, the same token ids)
    and the argmax at each continuation position compared; the first position is the plain
    greedy next token. At a nonzero strength the layer below and above is tried too: the
    right mapping is the one that agrees best.
    """
    import numpy as np

    tok = lm.tokenizer
    il = llama_layer_index(wl.layer)
    by_case: dict[tuple[str, int], GenerationRow] = {}
    for r in wl.rows:
        by_case.setdefault((r.prompt, r.direction), r)
    cases = list(by_case.values())[:n_prompts]
    strengths = sorted(set(wl.strengths.values()))
    moderate = min((s for s in strengths if s != 0.0), key=abs, default=None)
    layer_options = [il] + [x for x in (il - 1, il + 1) if 1 <= x < n_layers]
    results: dict[str, dict[str, Any]] = {}
    for s in strengths:
        for cand in layer_options if s == moderate else [il]:
            first, pos_agree, pos_total = 0, 0, 0
            for row in cases:
                vector = wl.vectors[row.direction]
                coefficient = float(vector.coefficients(s)[0])
                greedy = replace(wl.sampling, greedy=True, max_new_tokens=n_tokens)
                steer_row = replace(row, coefficient=coefficient)
                gens, _ = generate_batch(lm, [steer_row], wl.directions, wl.layer, wl.mode, greedy)
                prompt_ids = tok(row.prompt)["input_ids"]
                seq = prompt_ids + gens[0].token_ids
                first_pos = len(prompt_ids) - 1  # the position predicting the first new token
                with vector.apply(lm, s):
                    logits = lm.model(input_ids=torch.tensor([seq], device=lm.device)).logits
                ours = logits[0, first_pos:].argmax(-1).cpu()
                set_cvec(llm.ctx, llm.n_embd(), vector.direction, coefficient, cand, n_layers)
                llm.reset()
                llm.eval(seq)
                scores = np.asarray(llm.scores[first_pos : len(seq)])
                theirs = torch.from_numpy(scores.argmax(-1))
                agree = (ours == theirs).tolist()
                first += int(agree[0])
                pos_agree += sum(agree)
                pos_total += len(agree)
            key = f"s={s:+g}" + ("" if cand == il else f" il={cand}")
            results[key] = {
                "strength": s,
                "llama_il": cand,
                "next_token_agreement": f"{first}/{len(cases)}",
                "teacher_forced_agreement": rounded(pos_agree / max(1, pos_total), 3),
                "positions": pos_total,
            }
    set_cvec(llm.ctx, llm.n_embd(), None, 0.0, il, n_layers)
    return {
        "prompts": len(cases),
        "tokens": n_tokens,
        "moderate_strength": moderate,
        "our_layer": wl.layer,
        "llama_il": il,
        "by_strength": results,
    }


def open_llamas(
    lm: LoadedModel, gguf: Path, opts: BenchOptions, wl: Workload
) -> tuple[dict[int, Any], bool]:
    """One llama.cpp context per thread setting, warmed up."""
    import llama_cpp

    gpu = lm.device.type == "cuda" and bool(llama_cpp.llama_supports_gpu_offload())
    llamas = {}
    for t in opts.llama_threads or sorted({1, max(1, torch.get_num_threads())}):
        llm = open_llama(gguf, t, gpu=gpu)
        if int(llama_cpp.llama_model_n_layer(llm.model)) != lm.n_layers:
            raise RuntimeError("the GGUF and the torch model have different layer counts")
        run_llama(llm, wl.with_tokens(2), wl.rows[:1], lm.n_layers)  # warm-up
        llamas[t] = llm
    return llamas, gpu


def gguf_for(model: str) -> Path | None:
    """The GGUF file llama.cpp loads for a model spec (None: the model has none)."""
    from steering.models import EMBEDDED

    if model == EMBEDDED:
        from steering.assets import embedded_gguf_path

        return embedded_gguf_path()
    if model.endswith(".gguf"):
        return Path(model)
    return None


def llama_unavailable(gguf: Path | None, wl: Workload) -> str | None:
    """Why llama.cpp cannot run this workload, or None when it can."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed (pip install 'steer-eval[judge]')"
    if gguf is None or not gguf.is_file():
        return f"no GGUF file for this model ({gguf})"
    from judges.llama_runtime import LlamaCrash, check_decodes

    try:  # a native crash in llama.cpp would end the whole bench
        check_decodes(gguf)
    except LlamaCrash as exc:
        return str(exc)
    if wl.mode != "additive":
        return "projection steering is not a constant control vector"
    if wl.layer < 1:
        return "llama.cpp control vectors cannot steer layer 0"
    return None


def section_llama(
    lm: LoadedModel,
    wl: Workload,
    opts: BenchOptions,
    gguf: Path,
    measured: dict[str, Measurement],
    ours: str,
    subset: Sequence[GenerationRow],
    gpu: bool,
    say: Callable[[str], None] = lambda _m: None,
    other_dtypes: Sequence[str] = (),
) -> dict[str, Any]:
    """(b): our batched tokens/s against llama.cpp's single stream, and steering agreement."""
    import llama_cpp

    by_threads = runs_by_threads(measured, SINGLE_STREAM)
    best_t = fastest(by_threads)
    best = by_threads[best_t]
    f32 = runs_by_threads(measured, SINGLE_STREAM_F32)
    say("steering agreement between our hook and the llama.cpp control vector")
    llm = open_llama(gguf, best_t, logits_all=True, gpu=gpu)
    agreement = steering_agreement(
        lm, llm, wl, opts.agreement_prompts, opts.agreement_tokens, lm.n_layers
    )
    close(llm)
    mine = measured[ours]
    result: dict[str, Any] = {
        "gguf": gguf.name,
        "llama_cpp_version": getattr(llama_cpp, "__version__", "unknown"),
        "gpu_offload": gpu,
        "how": "llama-cpp-python create_completion one sample at a time (fresh KV per sample), "
        f"temperature {wl.sampling.temperature}, top_p {wl.sampling.top_p}, top_k off, "
        f"min_p off, repeat penalty off, {wl.sampling.max_new_tokens} tokens; control vector "
        f"set per sample with llama_set_adapter_cvec at il={llama_layer_index(wl.layer)} "
        f"(= our layer {wl.layer}); {len(subset)} stratified samples in chunks interleaved "
        "with our batched repeats; the best thread count is compared",
        "layer_mapping": "our layer L = output of decoder layer L (0-based) = llama.cpp il=L; "
        "the cvec buffer starts at layer 1, so layer L's row is at offset (L-1)*n_embd",
        "timed_samples": len(subset),
        "by_threads": {str(t): m.to_dict() for t, m in sorted(by_threads.items())},
        "best_threads": best_t,
        "llama_cpp": best.to_dict(),
        "ours_batched_tokens_per_second": rounded(mine.tokens_per_second),
        "ratio_ours_vs_llama_cpp": speedup(mine, best),
        **{
            f"ratio_ours_{name}_vs_llama_cpp": speedup(measured[name], best)
            for name in other_dtypes
        },
    }
    if f32:
        best_f32 = fastest(f32)
        result["f32"] = {
            "gguf": f32_path(gguf).name,
            "how": "the same GGUF with every tensor dequantized to fp32 (our weights exactly), "
            "timed like the quantized one",
            "by_threads": {str(t): m.to_dict() for t, m in sorted(f32.items())},
            "best_threads": best_f32,
            "llama_cpp": f32[best_f32].to_dict(),
        }
        result["ratio_ours_vs_llama_cpp_f32"] = speedup(mine, f32[best_f32])
    result["agreement"] = agreement
    return result


def runs_by_threads(measured: dict[str, Measurement], prefix: str) -> dict[int, Measurement]:
    """The runs named ``prefix<threads>``, by thread count."""
    return {int(k.removeprefix(prefix)): m for k, m in measured.items() if k.startswith(prefix)}


def fastest(runs: dict[int, Measurement]) -> int:
    """The thread count of the run with the most tokens/s."""
    return max(runs, key=lambda t: runs[t].tokens_per_second or 0.0)

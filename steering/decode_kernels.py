"""Which kernels the CUDA decode step runs: the native ones, or two measured swaps.

The H100 profile of one 1,024-row decode step of Gemma 3 4B (bench/README.md, "GPU:
H100") found two kinds of kernel work the step need not do, and ``gpu_levers`` measured
what swapping each buys (bench/results-gpu-h100.json, "levers"):

- attention: SDPA's cuDNN flash kernel, tiled for long queries, read the KV cache of a
  one-token query at about a quarter of the card's bandwidth; the memory-efficient
  backend does the same masked attention 1.09x (256 rows) and 1.11x (1,024 rows) faster
  over the whole decode;
- RMS norms: the eager norm is about ten kernels (casts to fp32 and back, square, mean,
  add, rsqrt, ``1 + w``, multiplies), six norms a layer; :func:`gemma_rms_norm` compiled
  with ``torch.compile`` is one, 1.20x and 1.14x. Only norm classes whose forward is written
  out here are swapped (``NORMS``), so another architecture keeps its own.

Both together: 1.35x and 1.29x. :data:`NATIVE` is the reference the tests hold the
policy to; :data:`FUSED` is the CUDA policy's default. The swaps change the last bits of
a norm's reduction and of attention's softmax, not what is computed. A compile that
fails (no Triton, an unsupported platform) warns once and the native norm runs.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from steering.models import LoadedModel


@dataclass(frozen=True)
class DecodeKernels:
    """``attention``: SDPA pinned to its memory-efficient backend (math where that cannot
    run); ``norms``: known RMS norms compiled into one kernel each; ``backend``: the
    compiler's (tests trace with ``eager``, which needs no C compiler)."""

    attention: bool = False
    norms: bool = False
    backend: str = "inductor"

    def describe(self) -> str:
        swaps = {"efficient attention": self.attention, "compiled norms": self.norms}
        return ", ".join(name for name, on in swaps.items() if on) or "native kernels"


NATIVE = DecodeKernels()
FUSED = DecodeKernels(attention=True, norms=True)


def gemma_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' ``Gemma3RMSNorm.forward``, op for op: fp32, ``(1 + w)``, cast back."""
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (out * (1.0 + weight.float())).type_as(x)


# Norm classes (by name) and the function that computes each's forward.
NORMS: dict[str, Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]] = {
    "Gemma3RMSNorm": gemma_rms_norm,
}


class NormCompileWarning(RuntimeWarning):
    """Compiling the RMS norm failed; the native norm runs (the same numbers, slower)."""


# Compiles of the norm per process: (norm widths x dtypes x {one row, many}) per model.
COMPILE_LIMIT = 64


class _Compiled:
    """One compiled norm function shared by every module (weights are inputs, so modules
    share its compiled code); after a failure, the native function with one warning.

    It sees its input as ``[rows, width]`` with ``rows`` dynamic, so it compiles once per
    norm width and dtype (and once more for a single row), not once per batch, prompt
    width and head layout: dynamo otherwise recompiled per shape and, past its limit,
    failed (``fullgraph``) on the tests' mixed shapes. Dynamo's limit (8) counts the
    compiles of the function's code in the whole process, so two models (a test run, a
    pipeline with two model sizes) can pass it: it is raised to ``COMPILE_LIMIT`` for
    these calls only (the CUDA card's check had hit it on its fourth model)."""

    def __init__(
        self, fn: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor], backend: str
    ) -> None:
        self.fn = fn
        self.compiled = torch.compile(fn, fullgraph=True, backend=backend)
        self.failed = False

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if not self.failed:
            try:
                flat = x.reshape(-1, x.shape[-1])
                torch._dynamo.maybe_mark_dynamic(flat, 0)
                with torch._dynamo.config.patch(recompile_limit=COMPILE_LIMIT):
                    normed: torch.Tensor = self.compiled(flat, weight, eps)
                    return normed.view(x.shape)
            except Exception as exc:  # whatever stops a compile, the native norm can do
                self.failed = True
                warnings.warn(
                    f"compiling the RMS norm failed ({exc.__class__.__name__}: {exc}); "
                    "the native norm runs instead",
                    NormCompileWarning,
                    stacklevel=2,
                )
        return self.fn(x, weight, eps)


@functools.cache
def _compiled(cls: str, backend: str) -> _Compiled:
    return _Compiled(NORMS[cls], backend)


@contextlib.contextmanager
def compiled_norms(lm: LoadedModel, backend: str = "inductor") -> Iterator[int]:
    """Inside, every norm module of a class in :data:`NORMS` runs its compiled function;
    the modules' own ``forward`` comes back on exit. Yields how many were swapped."""
    swapped = []
    for module in lm.model.modules():
        cls = type(module).__name__
        if cls in NORMS and "forward" not in vars(module):
            module.forward = lambda x, m=module, f=_compiled(cls, backend): f(x, m.weight, m.eps)
            swapped.append(module)
    try:
        yield len(swapped)
    finally:
        for module in swapped:
            del module.forward


def efficient_attention() -> contextlib.AbstractContextManager[None]:
    """SDPA limited to its memory-efficient backend, and math where that cannot run."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


@contextlib.contextmanager
def decode_kernels(lm: LoadedModel, kernels: DecodeKernels) -> Iterator[None]:
    """The decode step's kernels inside the block: ``kernels``' swaps (the attention pin
    only on CUDA, where the backend exists)."""
    with contextlib.ExitStack() as stack:
        if kernels.attention and lm.device.type == "cuda":
            stack.enter_context(efficient_attention())
        if kernels.norms:
            stack.enter_context(compiled_norms(lm, kernels.backend))
        yield

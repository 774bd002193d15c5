"""How every bench section times things: medians over repeats, interleaving, load (why:
the package's docstring)."""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from steering.generation import Generation, GenerationRow


def median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def rounded(value: float | None, digits: int = 4) -> float | None:
    """``round`` that lets None (not measured) through."""
    return None if value is None else round(float(value), digits)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is not positive."""
    if a is None or b is None or b <= 0:
        return None
    return a / b


@dataclass
class Measurement:
    """Wall seconds and generated tokens per repeat; medians over the repeats."""

    seconds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    rows: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    generations: list[Generation] | None = None  # the last repeat's (not serialised)

    def add(self, seconds: float, tokens: int) -> None:
        self.seconds.append(float(seconds))
        self.tokens.append(int(tokens))

    @property
    def median_seconds(self) -> float | None:
        return median(self.seconds)

    @property
    def tokens_per_second(self) -> float | None:
        """The median of the per-repeat rates (not total tokens over total time)."""
        return median([t / s for t, s in zip(self.tokens, self.seconds, strict=True) if s > 0])

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "repeats": len(self.seconds),
            "seconds": [round(s, 6) for s in self.seconds],
            "tokens": self.tokens,
            "median_seconds": rounded(self.median_seconds),
            "tokens_per_second": rounded(self.tokens_per_second),
            **self.extra,
        }


def speedup(a: Measurement, b: Measurement) -> float | None:
    """a's tokens/s over b's, to 3 digits (None: either not measured)."""
    return rounded(ratio(a.tokens_per_second, b.tokens_per_second), 3)


Run = Callable[[Measurement | None], Measurement]
"""A timed pass that appends one repeat to the measurement it is given (None: a new one)."""


def sync(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def gpu_peak(device: torch.device, extra: dict[str, Any]) -> Iterator[None]:
    """Peak GPU memory allocated inside the block (CUDA only) into ``extra``."""
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.cuda.reset_peak_memory_stats(device)
    yield
    if on_cuda:
        extra["gpu_peak_bytes"] = max(
            extra.get("gpu_peak_bytes", 0), int(torch.cuda.max_memory_allocated(device))
        )


def timed_pass(device: torch.device, m: Measurement, work: Callable[[], int]) -> Measurement:
    """One repeat of ``work`` (it returns the tokens it made) appended to ``m``: the device
    synced before and after, its peak GPU memory kept (:func:`gpu_peak`)."""
    with gpu_peak(device, m.extra):
        sync(device)
        start = time.perf_counter()
        tokens = work()
        sync(device)
        m.add(time.perf_counter() - start, tokens)
    return m


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` inside the block (None: unchanged)."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages (as ``uptime`` prints them)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on Linux
        return None


def cpu_pressure() -> float | None:
    """Linux PSI: the share of the last 60 s in which some runnable task waited for a CPU."""
    try:
        first = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return float(dict(kv.split("=") for kv in first.split()[1:])["avg60"])
    except (OSError, IndexError, KeyError, ValueError):
        return None


def contention() -> dict[str, Any]:
    return {"load_average": load_average(), "cpu_pressure_avg60": cpu_pressure()}


def interleaved(runs: dict[str, Run], repeats: int) -> dict[str, Measurement]:
    """Repeat each run in turn (A B A B ...), so load that drifts hits every variant alike."""
    out: dict[str, Measurement | None] = dict.fromkeys(runs)
    for _ in range(repeats):
        for name, fn in runs.items():
            out[name] = fn(out[name])
    return {k: v for k, v in out.items() if v is not None}


@dataclass
class Stream:
    """A one-sample-at-a-time baseline, timed in chunks between the batched repeats."""

    rows: list[GenerationRow]
    run: Callable[[Sequence[GenerationRow]], Measurement]


def contiguous_chunks(rows: Sequence[GenerationRow], k: int) -> list[list[GenerationRow]]:
    """``k`` consecutive slices (of a stratified subset, so each mixes the strengths)."""
    n = len(rows)
    return [list(rows[i * n // k : (i + 1) * n // k]) for i in range(k)]


def measure_side_by_side(
    batched: dict[str, Run],
    streams: dict[str, Stream],
    repeats: int,
    say: Callable[[str], None] = lambda _m: None,
) -> dict[str, Measurement]:
    """Each repeat runs every batched variant over the whole grid, then one chunk of every
    single-stream baseline: load that drifts during the run hits all of them alike. A
    baseline's repeats are its chunks (its tokens/s is the median over chunks)."""
    splits = {name: contiguous_chunks(st.rows, repeats) for name, st in streams.items()}
    out: dict[str, Measurement] = {}
    for r in range(repeats):
        for name, fn in batched.items():
            say(f"repeat {r + 1}/{repeats}: {name} batched")
            out[name] = fn(out.get(name))
        for name, st in streams.items():
            part = splits[name][r]
            if not part:
                continue
            say(f"repeat {r + 1}/{repeats}: {name}, {len(part)} samples")
            m = st.run(part)
            total = out.setdefault(name, Measurement(rows=len(st.rows)))
            total.add(m.seconds[0], m.tokens[0])
            for key, value in m.extra.items():
                if key == "gpu_peak_bytes":
                    total.extra[key] = max(total.extra.get(key, 0), value)
    return out


ISA_ENV = ("MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


def machine_info(device: torch.device) -> dict[str, Any]:
    """The machine the numbers were taken on: CPU, cores, threads, versions."""
    from importlib import metadata

    info: dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
    }
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        for line in cpuinfo.splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        flags = next((x for x in cpuinfo.splitlines() if x.startswith("flags")), "").split()
        info["cpu_bf16"] = [f for f in ("avx512_bf16", "amx_bf16", "avx512f") if f in flags]
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        info["memory_gb"] = round(int(mem) * 1024 / 1e9, 1)
    except (OSError, StopIteration, IndexError, ValueError):  # pragma: no cover
        pass
    for pkg in ("torch", "transformers", "llama-cpp-python"):
        try:
            info[f"version.{pkg}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[f"version.{pkg}"] = None
    # What the kernels actually use: the flags above are the CPU's, and these environment
    # variables restrict torch and MKL to fewer (an AVX2-only machine, emulated).
    info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    info["isa_env"] = {k: os.environ[k] for k in ISA_ENV if k in os.environ}
    try:
        import llama_cpp

        from judges.llama_runtime import llama_options

        info.update(llama_options())
        info["llama_cpp_path"] = str(Path(llama_cpp.__file__).parent)
    except Exception:  # not installed, or its library does not load
        info["llama_cpp_system_info"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["gpu"] = props.name
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["torch_cuda"] = torch.version.cuda
        info["gpu_driver"] = gpu_driver()
    return info


def gpu_driver() -> str | None:
    """The NVIDIA driver's version, max SM clock and power limit (nvidia-smi), or None."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
             "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None

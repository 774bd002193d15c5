"""What a device is to the suite, decided once: a :class:`Platform` per device type.

Like vLLM's ``current_platform``: the loader picks the platform of the model's device
(``platform_for``) and keeps it on the loaded model, and everything that used to ask
``device.type == "cuda"`` on its own asks the platform instead: the default dtype and
the dtypes the device can compute in, the decode policy, the free memory that batch
sizes come from, where the embedder runs and the torch thread count (which sets a
row's last bits on the CPU, so Ray actors take it from here; on the CPU it is chosen when a
run starts from the cores then free, :meth:`CpuPlatform.choose_threads`). ``--device cpu`` on a GPU
host is then the CPU platform for everything, the embedder included. A new device is a
platform here plus a decode policy (steering/decode*.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

import torch

from steering.cpu import CpuLoad, cpu_load
from steering.registry import Registry

# The user's torch thread count for a run; wins over the free cores (and OMP_NUM_THREADS).
THREADS_ENV = "STEER_EVAL_THREADS"
OMP_THREADS_ENV = "OMP_NUM_THREADS"
WAIT_POLICY_ENV = "OMP_WAIT_POLICY"


class DtypeError(ValueError):
    """A dtype the chosen device cannot compute in; the message names the ones it can."""


class ThreadsError(ValueError):
    """An unusable :data:`THREADS_ENV` value."""


@dataclass(frozen=True)
class ThreadChoice:
    """Torch's thread count for a run, and why: what the run's tags record.

    ``source``: ``free cores`` (measured, ``load`` says how), :data:`THREADS_ENV` or
    :data:`OMP_THREADS_ENV` (the user's), ``recorded`` (a resumed run keeps its first
    start's count, so its rows' last bits match), or ``unchanged`` (a device that leaves
    torch's own count, or a model the caller loaded and threaded itself)."""

    threads: int
    source: str
    load: CpuLoad | None = None

    @property
    def wait_policy(self) -> str:
        """OpenMP's wait policy as this process's environment gives it. Torch's OpenMP
        (libgomp) reads it once, when torch is imported, so only a value set before then
        counts; the suite never sets it (see :meth:`CpuPlatform.choose_threads`)."""
        return os.environ.get(WAIT_POLICY_ENV) or "unset (libgomp: spin, then sleep)"

    def describe(self) -> str:
        """One line for the run's tags: the source and, when measured, the load."""
        if self.load is None:
            return self.source
        busy = "unknown" if self.load.busy is None else f"{self.load.busy:.2f}"
        return (
            f"{self.source}: {self.load.cpus} usable CPUs, {busy} busy with other "
            f"processes ({self.load.read})"
        )

    @classmethod
    def unchanged(cls) -> ThreadChoice:
        return cls(torch.get_num_threads(), "unchanged")


def env_threads() -> int | None:
    """:data:`THREADS_ENV` as a count (None when unset or empty)."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ThreadsError(f"{THREADS_ENV}={text!r}: give a positive whole number of threads")
    return int(text)


@dataclass(frozen=True)
class Platform:
    """The reference platform: any device without its own (``mps``, ``meta``, ...).

    Decodes with the reference policy, fp32 by default, no memory probe (the callers'
    CPU-tuned batch sizes), the embedder beside the model."""

    device: torch.device
    name: ClassVar[str] = "reference"
    decode_policy: ClassVar[str] = "reference"
    on_card: ClassVar[bool] = False

    def default_dtype(self) -> torch.dtype:
        return torch.float32

    def check_dtype(self, dtype: torch.dtype) -> None:
        """Raise :class:`DtypeError` for a dtype this device cannot compute in."""

    def free_bytes(self) -> int | None:
        """Free memory for batch sizing; None where the callers' defaults hold."""
        return None

    @property
    def embedder_device(self) -> str:
        return str(self.device)

    @property
    def torch_threads(self) -> int:
        """Torch's intra-op threads in this process: on the CPU a row's last bits depend
        on it, so a Ray actor must compute with the driver's count."""
        return torch.get_num_threads()

    def choose_threads(self, recorded: int | None = None) -> ThreadChoice:
        """Torch's thread count for a run starting now; this device leaves torch's own."""
        return ThreadChoice.unchanged()


@dataclass(frozen=True)
class CpuPlatform(Platform):
    """The CPU: fp32 (bf16 emulated where the CPU lacks it, with a warning), the tuned
    CPU decode policy, the suite's constant batch sizes."""

    name: ClassVar[str] = "cpu"
    decode_policy: ClassVar[str] = "cpu"

    @property
    def embedder_device(self) -> str:
        return "cpu"

    def choose_threads(self, recorded: int | None = None) -> ThreadChoice:
        """Set torch's thread count for a run starting now and say why.

        First the user's: :data:`THREADS_ENV`, then :data:`OMP_THREADS_ENV` (torch took
        it at import). Then ``recorded``, a resumed run's first count (a row's last bits
        depend on it). Otherwise the cores free now (``steering.cpu.cpu_load``: the
        affinity mask's CPUs less those other processes keep busy, from ``/proc/stat``
        over 0.3 s): torch's default, one thread per core, makes every parallel region
        wait for the thread that shares its core with a busy process (3.5× slower on
        2 cores with one held; one thread: 1.5×, the same texts).

        OpenMP's wait policy is left alone and recorded: torch's libgomp reads
        ``OMP_WAIT_POLICY`` once, when torch is imported, which has happened before any
        platform exists, so setting ``PASSIVE`` here would do nothing (a user sets it in
        the environment). It matters less once the thread count fits the free cores:
        no spinning thread then shares a core with the other process, and one thread
        has no worker to spin."""
        given = env_threads()
        if given is not None:
            choice = ThreadChoice(given, THREADS_ENV)
        elif os.environ.get(OMP_THREADS_ENV, "").strip():
            choice = ThreadChoice(torch.get_num_threads(), OMP_THREADS_ENV)
        elif recorded is not None:
            choice = ThreadChoice(recorded, "recorded")
        else:
            load = cpu_load()
            choice = ThreadChoice(load.free, "free cores", load)
        torch.set_num_threads(choice.threads)
        return choice


@dataclass(frozen=True)
class CudaPlatform(Platform):
    """A CUDA card: bf16 (fp16 on a card without it), the static-cache, graph-captured
    decode policy, batch sizes from the card's free memory."""

    name: ClassVar[str] = "cuda"
    decode_policy: ClassVar[str] = "cuda"
    on_card: ClassVar[bool] = True

    def default_dtype(self) -> torch.dtype:
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        return torch.bfloat16 if bf16 else torch.float16  # fp16 on cards before Ampere

    def check_dtype(self, dtype: torch.dtype) -> None:
        if dtype != torch.bfloat16 or torch.cuda.is_bf16_supported(including_emulation=False):
            return
        name = torch.cuda.get_device_name(self.device)
        major, minor = torch.cuda.get_device_capability(self.device)
        raise DtypeError(
            f"dtype bfloat16: the card {self.device} ({name}, compute capability "
            f"{major}.{minor}) has no bf16; use --set dtype=float16 (or float32), or a card "
            "of compute capability 8.0 or newer"
        )

    def free_bytes(self) -> int | None:
        free, _total = torch.cuda.mem_get_info(self.device)
        return int(free)


PLATFORMS: Registry[type[Platform]] = Registry("platform")
PLATFORMS.register("cpu", CpuPlatform)
PLATFORMS.register("cuda", CudaPlatform)


def platform_for(device: torch.device | str) -> Platform:
    """The platform of ``device``: its own for ``cpu`` and ``cuda``, else the reference."""
    device = torch.device(device)
    kind: type[Platform] = PLATFORMS.get(device.type, Platform)
    return kind(device)

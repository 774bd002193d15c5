"""What this CPU does natively: vector width, FMA, bf16 instructions, cores and clock.

bf16 on a CPU without bf16 instructions (``avx512_bf16`` or ``amx_bf16``) is emulated
through fp32 conversions and runs slower than fp32, so the loader warns, naming what is
missing. The bench uses the same facts for the machine's peak floating-point rate.

Also how many of this process's CPUs others keep busy right now (:func:`cpu_load`), from
which the CPU platform picks torch's thread count when a run starts.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
BF16_INSTRUCTIONS = ("avx512_bf16", "amx_bf16")
REPORTED_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


class SlowBf16Warning(RuntimeWarning):
    """bf16 was asked for on a CPU that has to emulate it."""


@dataclass(frozen=True)
class CpuFeatures:
    """The facts of ``/proc/cpuinfo`` that decide dense matmul speed."""

    vendor: str = ""
    model: str = ""
    flags: frozenset[str] = frozenset()
    physical_cores: int = 1
    logical_cpus: int = 1
    mhz: float | None = None

    @property
    def known(self) -> bool:
        """Whether any flags were read (not on macOS, Windows or an unreadable cpuinfo)."""
        return bool(self.flags)

    @property
    def vector_bits(self) -> int:
        """The widest SIMD registers: 512 (AVX-512), 256 (AVX/AVX2) or 128 (SSE/NEON)."""
        if "avx512f" in self.flags:
            return 512
        if "avx2" in self.flags or "avx" in self.flags:
            return 256
        return 128

    @property
    def datapath_bits(self) -> int:
        """The width the FMA units execute per cycle. AMD Zen 4 (AVX-512 without
        ``avx512_vp2intersect``) runs 512-bit instructions as two 256-bit halves."""
        if (
            self.vector_bits == 512
            and self.vendor == "AuthenticAMD"
            and "avx512_vp2intersect" not in self.flags
        ):
            return 256
        return self.vector_bits

    @property
    def fma(self) -> bool:
        return "fma" in self.flags or "avx512f" in self.flags

    @property
    def native_bf16(self) -> bool:
        return any(f in self.flags for f in BF16_INSTRUCTIONS)

    def missing_bf16(self) -> list[str]:
        """The bf16 instructions this CPU lacks (empty when it has either)."""
        return [] if self.native_bf16 else list(BF16_INSTRUCTIONS)

    def reported_flags(self) -> list[str]:
        return [f for f in REPORTED_FLAGS if f in self.flags]

    def peak_gflops(self, dtype: str = "float32", cores: int | None = None) -> tuple[float, str]:
        """Peak GFLOP/s and the assumptions behind it.

        Two FMA units per core, each doing ``datapath_bits / 32`` fp32 lanes x 2 FLOP per
        cycle (without FMA: one multiply and one add), at the ``cpu MHz`` of /proc/cpuinfo
        (a VM shows its nominal clock; boost may run higher). ``avx512_bf16`` dot products
        double the rate for bf16; AMX tiles are not modelled."""
        cores = cores or self.physical_cores
        ghz = (self.mhz or 0.0) / 1000.0
        lanes = self.datapath_bits // 32
        per_cycle = 2 * lanes * 2 if self.fma else lanes * 2
        bf16 = dtype in ("bfloat16", "bf16") and "avx512_bf16" in self.flags
        if bf16:
            per_cycle *= 2
        how = (
            f"{cores} cores x {ghz:.2f} GHz (cpu MHz in /proc/cpuinfo) x {per_cycle} "
            f"FLOP/cycle ({'2 FMA units' if self.fma else 'mul + add'} x {lanes} fp32 lanes of "
            f"a {self.datapath_bits}-bit datapath"
            + (" x 2 for avx512_bf16 dot products" if bf16 else "")
            + "; AMX not modelled)"
        )
        return cores * ghz * per_cycle, how


def parse_cpuinfo(text: str) -> CpuFeatures:
    """The first processor's vendor, model, flags and clock, and the core counts."""
    fields: dict[str, str] = {}
    cores: set[tuple[str, str]] = set()
    logical = 0
    physical_id = core_id = ""
    for line in [*text.splitlines(), ""]:
        if not line.strip():  # the end of one processor's block
            if core_id or physical_id:
                cores.add((physical_id, core_id))
            physical_id = core_id = ""
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            logical += 1
        elif key == "physical id":
            physical_id = value
        elif key == "core id":
            core_id = value
        fields.setdefault(key, value)
    flags = fields.get("flags") or fields.get("Features") or ""
    try:
        mhz = float(fields["cpu MHz"])
    except (KeyError, ValueError):
        mhz = None
    logical = logical or 1
    return CpuFeatures(
        vendor=fields.get("vendor_id", ""),
        model=fields.get("model name", ""),
        flags=frozenset(flags.split()),
        physical_cores=len(cores) or logical,
        logical_cpus=logical,
        mhz=mhz,
    )


@functools.lru_cache(maxsize=4)
def _read(path: Path) -> CpuFeatures:
    try:
        return parse_cpuinfo(path.read_text())
    except OSError:  # not Linux
        return CpuFeatures(logical_cpus=os.cpu_count() or 1, physical_cores=os.cpu_count() or 1)


def cpu_features() -> CpuFeatures:
    """This machine's CPU (read once per process)."""
    return _read(CPUINFO)


def bf16_warning(features: CpuFeatures | None = None) -> str | None:
    """A message when this CPU would emulate bf16, else None (also None when unknown)."""
    features = features or cpu_features()
    if not features.known or features.native_bf16:
        return None
    return (
        f"bfloat16 on this CPU ({features.model or 'unknown model'}) is emulated: it lacks "
        f"{' and '.join(features.missing_bf16())}, so bf16 matmuls convert through fp32 and "
        "run slower than float32. Use --set dtype=float32 (the CPU default)."
    )


# --- the cores free when a run starts (issue 55, item 8) ------------------------------

PROC_STAT = Path("/proc/stat")
LOAD_WINDOW_SECONDS = 0.3
# /proc/stat's per-CPU columns: user nice system idle iowait irq softirq steal (guest
# time is already inside user and nice). Busy: all but idle and iowait; steal counts as
# busy, since a core the hypervisor lends elsewhere is no core of ours.
_IDLE_COLUMNS = (3, 4)


@dataclass(frozen=True)
class CpuLoad:
    """How many CPUs this process may use and how many of them others keep busy."""

    cpus: int  # the CPUs this process may run on (its affinity mask)
    busy: float | None  # cores busy with other processes over the window; None: unknown
    read: str  # what ``busy`` was read from, for the run's tags

    @property
    def free(self) -> int:
        """The CPUs left once each core that others keep at least half busy is taken out;
        at least one, and all of them when the load is unknown."""
        return self.cpus if self.busy is None else max(1, self.cpus - int(self.busy + 0.5))


def usable_cpus() -> set[int]:
    """The CPUs this process may run on: its affinity mask (``taskset``, a container's
    cpuset), not the machine's count; every CPU where the platform has no mask."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return set(range(os.cpu_count() or 1))


def _stat_times(text: str, cpus: set[int]) -> tuple[int, int]:
    """(busy, total) jiffies summed over ``cpus`` from the text of ``/proc/stat``."""
    busy = total = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        values = [int(v) for v in rest.split()[:8]]
        total += sum(values)
        busy += sum(v for i, v in enumerate(values) if i not in _IDLE_COLUMNS)
    return busy, total


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def cpu_load(window: float = LOAD_WINDOW_SECONDS) -> CpuLoad:
    """The cores other processes keep busy now, measured over ``window`` seconds.

    Reads ``/proc/stat`` (every CPU's busy and idle time) before and after the window on
    the CPUs of this process's affinity mask, and takes out this process's own CPU time
    over it (``os.times``: a thread of ours still spinning from the model load is not
    someone else's load). Not the load average: ``/proc/loadavg``'s 1-minute figure is an
    exponential mean that trails a process started seconds ago by a minute and counts
    this process's own model load, so it neither sees a fresh competitor nor leaves out
    ourselves. Without ``/proc/stat`` (macOS, Windows) the load is unknown and every
    usable CPU counts as free. A cgroup CPU quota (``cpu.max``) is not read.
    """
    cpus = usable_cpus()
    try:
        first = PROC_STAT.read_text()
    except OSError:
        return CpuLoad(len(cpus), None, "unknown (no /proc/stat)")
    own = _own_cpu_seconds()
    time.sleep(window)
    second = PROC_STAT.read_text()
    own = _own_cpu_seconds() - own
    busy0, total0 = _stat_times(first, cpus)
    busy1, total1 = _stat_times(second, cpus)
    if total1 <= total0:
        return CpuLoad(len(cpus), None, "unknown (/proc/stat did not move)")
    # jiffies to seconds: the window's total jiffies are len(cpus) × its length
    seconds_per_jiffy = window * len(cpus) / (total1 - total0)
    others = (busy1 - busy0) * seconds_per_jiffy - own
    busy = max(0.0, others / window)
    return CpuLoad(len(cpus), round(busy, 2), f"/proc/stat over {window:g} s")

"""What this CPU does natively: vector width, FMA, bf16 instructions, cores and clock.

bf16 on a CPU without bf16 instructions (``avx512_bf16`` or ``amx_bf16``) is emulated
through fp32 conversions and runs slower than fp32, so the loader warns, naming what is
missing. The bench uses the same facts for the machine's peak floating-point rate.
"""

from __future__ import annotations

import functools
import os
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

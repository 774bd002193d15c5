"""steering.cpu: cpuinfo parsing, the peak-rate arithmetic, and the bf16 warning."""

from __future__ import annotations

import warnings

import pytest
import torch

from steering import cpu
from steering.models import pick_dtype

ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
cpu MHz\t\t: 2600.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
cpu MHz\t\t: 2600.000
physical id\t: 0
core id\t\t: 1
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni
"""

HASWELL = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz
cpu MHz\t\t: 2500.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse2 avx avx2 fma

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz
cpu MHz\t\t: 2500.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse2 avx avx2 fma
"""


def test_parse_zen4_counts_cores_and_halves_the_avx512_datapath():
    f = cpu.parse_cpuinfo(ZEN4)
    assert (f.vendor, f.logical_cpus, f.physical_cores, f.mhz) == ("AuthenticAMD", 2, 2, 2600.0)
    assert f.vector_bits == 512 and f.datapath_bits == 256 and f.fma and f.native_bf16
    peak, how = f.peak_gflops()
    assert peak == pytest.approx(2 * 2.6 * 32)  # 2 FMA units x 8 lanes x 2 FLOP
    assert "2 cores" in how and "256-bit" in how
    assert f.peak_gflops("bfloat16")[0] == pytest.approx(2 * peak)
    assert f.reported_flags() == ["avx2", "fma", "avx512f", "avx512_bf16"]


def test_hyperthreads_share_a_core_and_avx2_has_no_bf16():
    f = cpu.parse_cpuinfo(HASWELL)
    assert (f.logical_cpus, f.physical_cores) == (2, 1)  # two threads on core 0
    assert f.vector_bits == f.datapath_bits == 256
    assert f.peak_gflops()[0] == pytest.approx(1 * 2.5 * 32)
    assert f.peak_gflops("bfloat16")[0] == f.peak_gflops()[0]  # emulated: no gain
    assert f.missing_bf16() == ["avx512_bf16", "amx_bf16"]
    message = cpu.bf16_warning(f)
    assert message and "avx512_bf16 and amx_bf16" in message and "E5-2680" in message


def test_no_warning_with_native_bf16_or_unknown_cpu():
    assert cpu.bf16_warning(cpu.parse_cpuinfo(ZEN4)) is None
    assert cpu.bf16_warning(cpu.CpuFeatures()) is None  # nothing known: say nothing


def test_loader_warns_for_bf16_on_a_cpu_without_it(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text(HASWELL)
    monkeypatch.setattr(cpu, "CPUINFO", info)
    with pytest.warns(cpu.SlowBf16Warning, match="lacks avx512_bf16 and amx_bf16"):
        assert pick_dtype(torch.device("cpu"), "bfloat16") == torch.bfloat16
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pick_dtype(torch.device("cpu"), "float32") == torch.float32
        assert pick_dtype(torch.device("cpu")) == torch.float32
    info_bf16 = tmp_path / "cpuinfo-zen4"
    info_bf16.write_text(ZEN4)
    monkeypatch.setattr(cpu, "CPUINFO", info_bf16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pick_dtype(torch.device("cpu"), "bf16") == torch.bfloat16


def test_this_machine_is_read():
    f = cpu.cpu_features()
    assert f.logical_cpus >= 1 and f.physical_cores >= 1

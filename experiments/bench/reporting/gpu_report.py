"""What section gpu says, as plain tables: every arm at every batch size, the targets.

No torch here (the report's rule): the section's numbers come from
:mod:`experiments.bench.gpu.gpu`, these tables from its results entry.
"""

from __future__ import annotations

from typing import Any

from experiments.bench.core.options import GPU_HF_COMPILED, GPU_HF_DYNAMIC, GPU_OURS, GPU_TARGETS
from experiments.bench.reporting.report import NOT_MEASURED, Table, fmt, rate, targets_met, verdict

GPU_ARM_LABELS = {
    GPU_OURS: "ours (CUDA policy: static cache, CUDA graph)",
    GPU_HF_DYNAMIC: "HF generate + per-row hook, dynamic cache",
    GPU_HF_COMPILED: "HF generate + per-row hook, static cache, compiled",
}


def gpu_targets(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's GPU targets from a gpu section (None where a value was not measured)."""
    runs: dict[str, dict[str, dict[str, Any]]] = gpu.get("runs", {})

    def arm(rows: int, name: str) -> dict[str, Any]:
        return runs.get(str(rows), {}).get(name, {})

    firsts = [
        a[GPU_OURS]["first_call_seconds"]
        for a in runs.values()
        if a.get(GPU_OURS, {}).get("first_call_seconds") is not None
    ]
    values = {
        "ours_vs_hf_dynamic_256": arm(256, GPU_HF_DYNAMIC).get("ours_over_this"),
        "ours_vs_hf_compiled_256": arm(256, GPU_HF_COMPILED).get("ours_over_this"),
        "ours_vs_hf_compiled_1024": arm(1024, GPU_HF_COMPILED).get("ours_over_this"),
        "ours_first_call_seconds": max(firsts) if firsts else None,
        "matrix_rate_fraction_1024": arm(1024, GPU_OURS).get("fraction_of_matrix_rate"),
    }
    return targets_met(GPU_TARGETS, values)


def gpu_table(gpu: dict[str, Any]) -> Table:
    """Section gpu: every arm at every batch size, then the targets."""
    table = Table(
        f"gpu: {gpu['model']} ({gpu['dtype']}) on {gpu['gpu']}, {gpu['tokens']} new tokens; "
        f"measured bf16 matrix rate {fmt(gpu['bf16_matrix_tflops'])} TFLOP/s, "
        f"{fmt(gpu['gflop_per_token'], 2)} GFLOP per token",
        ["rows", "arm", "first call (s)", "tok/s", "peak GiB", "of matrix rate", "ours ÷ arm"],
    )
    for rows, arms in gpu["runs"].items():
        for name, arm in arms.items():
            table.rows.append(
                [
                    rows,
                    GPU_ARM_LABELS.get(name, name),
                    fmt(arm.get("first_call_seconds"), 1),
                    rate(arm.get("tokens_per_second")),
                    fmt(arm.get("peak_gib"), 1),
                    fmt(100 * arm["fraction_of_matrix_rate"], 1, "%")
                    if arm.get("fraction_of_matrix_rate") is not None
                    else NOT_MEASURED,
                    fmt(arm.get("ours_over_this"), 2, "x") if name != GPU_OURS else "",
                ]
            )
    return table


def gpu_targets_table(gpu: dict[str, Any]) -> Table:
    table = Table("gpu: targets (issue 32)", ["target", "value", "wanted", "met"], verdict_column=3)
    for t in gpu_targets(gpu):
        table.rows.append([t["label"], fmt(t["value"], 2), t["target"], verdict(t["met"])])
    return table


def gpu_tables(results: dict[str, Any]) -> list[Table]:
    """The gpu section's tables, when it ran."""
    gpu = results.get("sections", {}).get("gpu")
    if not gpu or "skipped" in gpu:
        return []
    return [gpu_table(gpu), gpu_targets_table(gpu)]

"""What the bench results say, as a plain table: the comparisons and their targets.

No rich and no torch here: each table is a title, column names and rows of strings, and
the CLI renders them (colouring the verdict column). The tests read them as text.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping
from dataclasses import astuple, dataclass, field
from typing import Any

from experiments.bench.core.options import HF_BATCHED, TARGETS

YES, NO, NOT_MEASURED = "yes", "no", "n/a"
COMPARE = {">=": operator.ge, "<": operator.lt, "<=": operator.le}

# the peers shown in the main table (the others have their own rows already)
PEER_ROWS = {
    HF_BATCHED: "HF generate, whole batch, per-row hook",
    "llama.cpp_multi_sequence": "llama.cpp, several sequences per batch",
}


@dataclass
class Table:
    """One table of the report; ``verdict_column`` holds yes/no/n/a cells (or is None)."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    verdict_column: int | None = None


@dataclass
class Comparison:
    """One row of the main table: ours against a baseline, and the target it answers to."""

    label: str
    ours: str
    baseline: str
    ratio: str = ""
    target: str = ""
    met: str = ""


def evaluate_targets(sections: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of :data:`TARGETS` with its measured value and whether it is met."""

    def get(*path: str) -> Any:
        node: Any = sections
        for p in path:
            if not isinstance(node, dict) or p not in node:
                return None
            node = node[p]
        return node

    values = {
        "batched_vs_per_sample": get("batched", "ratio_batched_vs_per_sample"),
        "ours_vs_hf_batched_hook": get("peers", "peers", HF_BATCHED, "ratio_ours_vs_peer"),
        "ours_vs_llama_cpp": get("llama", "ratio_ours_vs_llama_cpp_f32"),
        "fraction_of_peak": get("roofline", "runs", "float32", "fraction_of_peak"),
        "make_run_seconds": get("e2e", "median_process_wall_seconds"),
        "perplexity_seconds": get("e2e", "stage_groups_seconds", "perplexity"),
        "measurement_seconds": get("e2e", "stage_groups_seconds", "measurement"),
        "tracking_seconds": get("e2e", "stage_groups_seconds", "tracking"),
        "peak_memory_gb": get("e2e", "peak_rss_gb"),
        "load_busy_vs_quiet": get("load", "ratio_busy_vs_quiet_after"),
    }
    return targets_met(TARGETS, values)


def targets_met(
    targets: Mapping[str, tuple[str, str, float]], values: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Each target (key -> label, op, threshold) with its measured value (None: not
    measured) and whether it is met."""
    out = []
    for key, (label, op, threshold) in targets.items():
        value = values[key]
        met = None if value is None else COMPARE[op](value, threshold)
        out.append(
            {
                "key": key,
                "label": label,
                "target": f"{op} {threshold:g}",
                "value": value,
                "met": met,
            }
        )
    return out


def fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return NOT_MEASURED
    if isinstance(value, float):
        return f"{value:,.{digits}f}{suffix}"
    return f"{value}{suffix}"


def verdict(met: bool | None) -> str:
    return NOT_MEASURED if met is None else (YES if met else NO)


def rate(value: Any) -> str:
    return f"{fmt(value)} tok/s"


def _variants(
    section: dict[str, Any],
    prefix: str,
    main_key: str,
    label: str,
    rates: dict[str, Any],
    baseline: str,
) -> Iterator[Comparison]:
    """The other-dtype rows of a comparison: keys ``{prefix}{name}_vs_...`` beside the main."""
    for key, value in section.items():
        if key.startswith(prefix) and key != main_key and not key.startswith(prefix + "vs_"):
            name = key.removeprefix(prefix).split("_vs_")[0]
            yield Comparison(
                label.format(name=name),
                rate(rates.get(name, {}).get("tokens_per_second")),
                baseline,
                fmt(value, 2, "x"),
            )


def comparisons(results: dict[str, Any]) -> Iterator[Comparison]:
    """The main table's rows, section by section, each with its target when it has one."""
    sec = results.get("sections", {})
    targets = {t["key"]: t for t in results.get("targets", [])}
    dtype_rates = sec.get("dtype", {}).get("generation", {})

    def goal(key: str) -> tuple[str, str]:
        """The target column and its verdict (a target not evaluated: not measured)."""
        if key in targets:
            return targets[key]["target"], verdict(targets[key]["met"])
        return "", NOT_MEASURED

    b = sec.get("batched")
    if b:
        ps = b["per_sample"]
        loop = rate(ps["tokens_per_second"])
        subset = (
            f" ({ps['timed_samples']}/{ps['of_samples']} samples)" if ps["extrapolated"] else ""
        )
        yield Comparison(
            "(a) batched vs per-sample HF generate",
            rate(b["batched"]["tokens_per_second"]),
            loop + subset,
            fmt(b["ratio_batched_vs_per_sample"], 2, "x"),
            *goal("batched_vs_per_sample"),
        )
        yield from _variants(
            b,
            "ratio_batched_",
            "ratio_batched_vs_per_sample",
            "    batched {name} vs the same per-sample loop",
            dtype_rates,
            loop,
        )
        yield Comparison(
            "    ours one row at a time vs per-sample",
            rate(b["ours_one_row_at_a_time"]["tokens_per_second"]),
            loop,
            fmt(b["ratio_one_row_at_a_time_vs_per_sample"], 2, "x"),
        )
    ll = sec.get("llama")
    if ll and "skipped" in ll:
        yield Comparison("(b) ours vs llama.cpp", "skipped", ll["skipped"])
    elif ll:
        theirs = rate(ll["llama_cpp"]["tokens_per_second"])
        ours = rate(ll["ours_batched_tokens_per_second"])
        yield Comparison(
            f"(b) ours vs llama.cpp single stream, {ll['gguf']}",
            ours,
            f"{theirs} ({ll['best_threads']} thr)",
            fmt(ll["ratio_ours_vs_llama_cpp"], 2, "x"),
        )
        f32 = ll.get("f32")
        yield Comparison(
            "(b) ours vs llama.cpp single stream, fp32 GGUF",
            ours,
            f"{rate(f32['llama_cpp']['tokens_per_second'])} ({f32['best_threads']} thr)"
            if f32
            else NOT_MEASURED,
            fmt(ll.get("ratio_ours_vs_llama_cpp_f32"), 2, "x"),
            *goal("ours_vs_llama_cpp"),
        )
        yield from _variants(
            ll,
            "ratio_ours_",
            "ratio_ours_vs_llama_cpp",
            "    ours {name} vs llama.cpp",
            dtype_rates,
            theirs,
        )
    pe = sec.get("peers")
    if pe:
        for name, label in PEER_ROWS.items():
            peer = pe["peers"].get(name, {})
            if "skipped" in peer:
                yield Comparison(f"peers: ours vs {label}", "skipped", peer["skipped"])
            elif peer:
                yield Comparison(
                    f"peers: ours vs {label}",
                    rate(pe["ours"]["tokens_per_second"]),
                    rate(peer["tokens_per_second"]),
                    fmt(peer["ratio_ours_vs_peer"], 2, "x"),
                    *(goal("ours_vs_hf_batched_hook") if name == HF_BATCHED else ("", "")),
                )
    fp32 = sec.get("roofline", {}).get("runs", {}).get("float32")
    if fp32:
        yield Comparison(
            "roofline: decode loop vs the fp32 peak",
            f"{fmt(fp32['achieved_gflops'])} GFLOP/s",
            f"peak {fmt(fp32['peak_gflops'])} GFLOP/s",
            fmt(fp32["fraction_of_peak"], 2),
            *goal("fraction_of_peak"),
        )
    d = sec.get("dtype")
    if d:
        yield Comparison(
            f"dtype: {d['other']} vs {d['base']} generation",
            rate(d["generation"][d["other"]]["tokens_per_second"]),
            rate(d["generation"][d["base"]]["tokens_per_second"]),
            fmt(d["speedup_other_vs_base"], 2, "x"),
            "Δ, Δs−Δ0 within 2 SE",
            verdict(d.get("delta_same_within_2se")),
        )
    e = sec.get("e2e")
    if e and "skipped" not in e:
        yield Comparison(
            "(c) make run end to end (warm)",
            f"{fmt(e['median_process_wall_seconds'])} s",
            f"run_phase5 {fmt(e['run_phase5_seconds'])} s",
            "",
            *goal("make_run_seconds"),
        )
        groups = e.get("stage_groups_seconds") or {}
        for key, name in (
            ("perplexity", "perplexity pass"),
            ("measurement", "measurement (bootstrap, split-half)"),
            ("tracking", "MLflow writes and figures"),
        ):
            if key in groups:
                yield Comparison(
                    f"    make run: {name}",
                    f"{fmt(groups[key])} s",
                    "",
                    "",
                    *goal(f"{key}_seconds"),
                )
        b = e.get("bfloat16")
        if b:
            yield Comparison(
                "(c) the same in bf16 (not the default: other texts)",
                f"{fmt(b['median_process_wall_seconds'])} s",
                f"seed c3 {_status(b, 'c3_f1_correlation')} vs {_status(e, 'c3_f1_correlation')}",
                fmt(e.get("ratio_default_over_bf16"), 2, "x"),
            )
        yield Comparison(
            "(d) peak resident memory",
            f"{fmt(e['peak_rss_gb'], 2)} GB",
            "",
            "",
            *goal("peak_memory_gb"),
        )


def _status(e2e: dict[str, Any], criterion: str) -> str:
    """A criterion's verdict in an e2e summary ('?' for a record without criteria)."""
    return str(((e2e.get("criteria") or {}).get(criterion) or {}).get("status", "?"))


def report_tables(results: dict[str, Any]) -> list[Table]:
    """The comparisons against their targets: the table bench/README.md shows. Each
    section's details (agreement, stages, Δ per dtype, peers, roofline, profile, head,
    scaling, tuning) stay in results.json, which the README's notes read from."""
    m = results.get("machine", {})
    load = results.get("load_average", {})
    title = (
        f"steer-eval bench - {m.get('cpu', '?')}, {m.get('cpu_count', '?')} cores, "
        f"{m.get('torch_threads', '?')} torch threads, {m.get('device', '?')}; load average "
        f"{load.get('start')} -> {load.get('end')}"
    )
    columns = ["comparison", "ours", "baseline", "ratio", "target", "met"]
    rows = [list(astuple(c)) for c in comparisons(results)]
    return [Table(title, columns, rows, verdict_column=5)]

"""What the bench results say, as plain tables: targets met, then the details.

No rich and no torch here: each table is a title, column names and rows of strings, and
the CLI renders them (colouring the verdict column). The tests read them as text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from experiments.bench.options import HF_BATCHED, TARGETS

YES, NO, NOT_MEASURED = "yes", "no", "n/a"

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


def evaluate_targets(sections: dict) -> list[dict]:
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
        "peak_memory_gb": get("e2e", "peak_rss_gb"),
    }
    out = []
    for key, (label, op, threshold) in TARGETS.items():
        value = values[key]
        met = None if value is None else (value >= threshold if op == ">=" else value < threshold)
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
    section: dict, prefix: str, main_key: str, label: str, rates: dict, baseline: str
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


def comparisons(results: dict) -> Iterator[Comparison]:
    """The main table's rows, section by section, each with its target when it has one."""
    sec = results.get("sections", {})
    targets = {t["key"]: t for t in results.get("targets", [])}
    dtype_rates = sec.get("dtype", {}).get("generation", {})

    def target(key: str) -> str:
        return targets[key]["target"] if key in targets else ""

    def met(key: str) -> str:
        return verdict(targets[key]["met"]) if key in targets else NOT_MEASURED

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
            target("batched_vs_per_sample"),
            met("batched_vs_per_sample"),
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
            target("ours_vs_llama_cpp"),
            met("ours_vs_llama_cpp"),
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
                key = "ours_vs_hf_batched_hook" if name == HF_BATCHED else ""
                yield Comparison(
                    f"peers: ours vs {label}",
                    rate(pe["ours"]["tokens_per_second"]),
                    rate(peer["tokens_per_second"]),
                    fmt(peer["ratio_ours_vs_peer"], 2, "x"),
                    target(key),
                    met(key) if key else "",
                )
    fp32 = sec.get("roofline", {}).get("runs", {}).get("float32")
    if fp32:
        yield Comparison(
            "roofline: decode loop vs the fp32 peak",
            f"{fmt(fp32['achieved_gflops'])} GFLOP/s",
            f"peak {fmt(fp32['peak_gflops'])} GFLOP/s",
            fmt(fp32["fraction_of_peak"], 2),
            target("fraction_of_peak"),
            met("fraction_of_peak"),
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
            target("make_run_seconds"),
            met("make_run_seconds"),
        )
        b = e.get("bfloat16")
        if b:
            yield Comparison(
                "(c) the same in bf16 (not the default: other texts)",
                f"{fmt(b['median_process_wall_seconds'])} s",
                f"seed c3 {_status(b, 'c3_f1_correlation')} vs {_status(e, 'c3_f1_correlation')}",
                fmt(e.get("ratio_default_over_bf16"), 2, "x"),
                "",
                "",
            )
        yield Comparison(
            "(d) peak resident memory",
            f"{fmt(e['peak_rss_gb'], 2)} GB",
            "",
            "",
            target("peak_memory_gb"),
            met("peak_memory_gb"),
        )


def _status(e2e: dict, criterion: str) -> str:
    """A criterion's verdict in an e2e summary ('?' for a record without criteria)."""
    return str(((e2e.get("criteria") or {}).get(criterion) or {}).get("status", "?"))


def main_table(results: dict) -> Table:
    m = results.get("machine", {})
    load = results.get("load_average", {})
    title = (
        f"steer-eval bench - {m.get('cpu', '?')}, {m.get('cpu_count', '?')} cores, "
        f"{m.get('torch_threads', '?')} torch threads, {m.get('device', '?')}; load average "
        f"{load.get('start')} -> {load.get('end')}"
    )
    table = Table(title, ["comparison", "ours", "baseline", "ratio", "target", "met"])
    table.verdict_column = 5
    for c in comparisons(results):
        table.rows.append([c.label, c.ours, c.baseline, c.ratio, c.target, c.met])
    return table


def agreement_table(ll: dict) -> Table:
    ag = ll["agreement"]
    table = Table(
        f"(b) steering agreement: our hook at layer {ag['our_layer']} vs the control "
        f"vector ({ag['prompts']} prompts, {ag['tokens']} greedy tokens)",
        ["strength", "llama.cpp il", "greedy next token", "teacher-forced top-1"],
    )
    for v in ag["by_strength"].values():
        table.rows.append(
            [
                f"{v['strength']:+g}",
                str(v["llama_il"]),
                v["next_token_agreement"],
                f"{v['teacher_forced_agreement']:.0%} of {v['positions']}",
            ]
        )
    return table


def stages_table(e: dict) -> Table:
    table = Table("(c) make run by stage", ["stage", "seconds", "share"])
    total = e["run_phase5_seconds"] or 1.0
    for name, secs in e["stages_seconds"].items():
        table.rows.append([name, fmt(secs), f"{secs / total:.0%}"])
    table.rows.append(["(unaccounted)", fmt(e["unaccounted_seconds"]), ""])
    table.rows.append(["process start + imports", fmt(e["import_seconds"]), ""])
    return table


def delta_table(d: dict) -> Table:
    table = Table(
        "dtype: Δ per strength, same rows and seeds (differences paired by row)",
        [
            "strength",
            f"mean Δ {d['base']}",
            f"mean Δ {d['other']}",
            "difference ± SE",
            f"Δs−Δ0 {d['base']}",
            f"Δs−Δ0 {d['other']}",
            "difference ± SE",
        ],
    )

    def pm(mean: float | None, se: float | None) -> str:
        return NOT_MEASURED if mean is None else f"{mean:+.3f} ± {fmt(se, 3)}"

    for s, v in d["delta_per_strength"].items():
        table.rows.append(
            [
                s,
                fmt(v["mean_delta_base"], 3),
                fmt(v["mean_delta_other"], 3),
                pm(v["mean_difference"], v["se_difference"]),
                fmt(v.get("mean_shift_base"), 3),
                fmt(v.get("mean_shift_other"), 3),
                pm(v.get("mean_shift_difference"), v.get("se_shift_difference")),
            ]
        )
    return table


def scaling_table(sc: dict) -> Table:
    table = Table("(e) scaling", ["scaling", "rows", "tokens", "seconds", "tok/s", "s/row"])
    for label, group in (("concepts", sc["concepts"]), ("new tokens", sc["max_new_tokens"])):
        for k, v in group.items():
            table.rows.append(
                [
                    f"{label}={k}",
                    str(v["rows"]),
                    str(v["max_new_tokens"]),
                    fmt(v["median_seconds"]),
                    fmt(v["tokens_per_second"]),
                    fmt(v["seconds_per_row"], 3),
                ]
            )
    return table


def tuning_table(tu: dict) -> Table:
    table = Table(f"tuning ({tu['max_new_tokens']} tokens)", ["setting", "seconds", "tok/s"])
    for k, v in tu["runs"].items():
        table.rows.append([k, fmt(v["median_seconds"]), fmt(v["tokens_per_second"])])
    return table


def peers_table(pe: dict) -> Table:
    ours = pe["ours"]
    table = Table(
        "peers: the same rows, seeds, strengths and token counts "
        f"({pe['workload']['rows']} rows x {pe['workload']['max_new_tokens']} tokens)",
        ["run", "rows timed", "tok/s", "ours / peer"],
    )
    table.rows.append(
        [f"ours batched ({ours['dtype']})", str(ours["rows"]), rate(ours["tokens_per_second"]), ""]
    )
    for name, peer in pe["peers"].items():
        if "skipped" in peer:
            table.rows.append([name, "skipped", peer["skipped"], ""])
        else:
            table.rows.append(
                [
                    name,
                    str(peer.get("timed_samples", peer["rows"])),
                    rate(peer["tokens_per_second"]),
                    fmt(peer.get("ratio_ours_vs_peer"), 2, "x"),
                ]
            )
    ag = pe.get("greedy_agreement_hf_batched")
    if ag:
        table.rows.append(
            ["greedy: HF batched = ours", f"{ag['rows']} rows", f"{ag['identical']} identical", ""]
        )
    return table


def roofline_table(ro: dict) -> Table:
    m = ro.get("machine", {})
    pt = ro["per_token"]
    title = (
        f"roofline: decode work per token at context {pt['context']}: layers "
        f"{pt['layers_mflop']:.0f} + attention {pt['attention_mflop']:.1f} + output head "
        f"{pt['head_mflop']:.0f} MFLOP (head {pt['share']['head']:.0%}); "
        f"{m.get('cpu', m.get('device', '?'))}, {', '.join(m.get('flags', []))}, "
        f"{m.get('physical_cores', '?')} cores at {m.get('clock_ghz', '?')} GHz"
    )
    table = Table(
        title,
        [
            "run",
            "GFLOP",
            "seconds",
            "GFLOP/s",
            "modelled peak",
            "matmul ceiling",
            "of the higher",
            "sustained matmul",
            "of sustained",
        ],
    )
    for name, run in ro["runs"].items():
        frac = run.get("fraction_of_peak")
        of_sustained = run.get("fraction_of_sustained_matmul")
        table.rows.append(
            [
                name,
                fmt(run["gflop_total"], 1),
                fmt(run["median_seconds"], 2),
                fmt(run["achieved_gflops"], 1),
                fmt(run.get("modelled_peak_gflops", run.get("peak_gflops")), 0),
                fmt(run.get("matmul_ceiling_gflops"), 0),
                NOT_MEASURED if frac is None else f"{frac:.0%}",
                fmt(run.get("sustained_matmul_gflops"), 0),
                NOT_MEASURED if of_sustained is None else f"{of_sustained:.0%}",
            ]
        )
    return table


def profile_table(pr: dict) -> Table:
    table = Table(
        f"profile: one decode step of {pr['rows']} rows, mean of {pr['decode_steps']} steps "
        f"({pr['mean_decode_step_ms']} ms)",
        ["part", "ms", "share"],
    )
    for part, share in pr["share"].items():
        table.rows.append([part.replace("_", " "), fmt(pr["ms"][part], 2), f"{share:.1%}"])
    return table


def head_table(he: dict) -> Table:
    gen = he["generation"]
    table = Table(
        f"output head: one product vs blocks of vocabulary rows ({he['product_rows']} rows); "
        f"generation with blocks of {he['blocked_run_block']}: "
        f"{fmt(he.get('ratio_blocked_vs_single'), 2, 'x')} the single product's tok/s "
        f"({rate(gen['blocked']['tokens_per_second'])} vs "
        f"{rate(gen['single']['tokens_per_second'])}), texts identical {he['texts_identical']}",
        ["block", "ms", "GFLOP/s", "bit-identical"],
    )
    for block, v in he["products"].items():
        table.rows.append(
            [
                "one product" if block == "0" else block,
                fmt(v["median_ms"], 1),
                fmt(v["gflops"], 1),
                YES if v["bit_identical_to_single_product"] else NO,
            ]
        )
    return table


def report_tables(results: dict) -> list[Table]:
    """The comparisons against their targets, then a detail table per measured section."""
    sec = results.get("sections", {})
    tables = [main_table(results)]
    ll, e, d = sec.get("llama"), sec.get("e2e"), sec.get("dtype")
    if ll and "skipped" not in ll:
        tables.append(agreement_table(ll))
    if e and "skipped" not in e:
        tables.append(stages_table(e))
    if d and "delta_per_strength" in d:
        tables.append(delta_table(d))
    for name, render in (
        ("peers", peers_table),
        ("roofline", roofline_table),
        ("profile", profile_table),
        ("head", head_table),
    ):
        if sec.get(name) and "skipped" not in sec[name]:
            tables.append(render(sec[name]))
    if sec.get("scaling"):
        tables.append(scaling_table(sec["scaling"]))
    if sec.get("tuning"):
        tables.append(tuning_table(sec["tuning"]))
    return tables

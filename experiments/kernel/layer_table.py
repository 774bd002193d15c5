"""How a layer rule's choice reads to a person: whether ``--layer auto-effect`` told any
layer apart from no effect, and the per-layer table the run's answer shows.

Apart from ``kernel/layers.py`` (which loads the model's stack) so that the answer, built
from the record alone, reads the choice without importing torch.
"""

from __future__ import annotations

from experiments.answer import AnswerTable
from experiments.record import LayerChoice, LayerRow


def undistinguished(choice: LayerChoice) -> str:
    """Why an ``auto-effect`` choice says little: no candidate's interval lies above 0,
    so the largest lower bound picked a layer whose effect is not told apart from none
    (nor from the other layers'); "" when some layer's does, or for ``auto``."""
    if choice.rule != "auto-effect":
        return ""
    lows = {la: r.low for la, r in choice.layers.items() if r.low is not None}
    if any(low > 0 for low in lows.values()):
        return ""
    chosen = choice.layers.get(str(choice.layer))
    bound = f" ({num(chosen.low)})" if chosen is not None and chosen.low is not None else ""
    return (
        f"no layer's effect above random directions is distinguishable from 0 (none of the "
        f"{len(lows)} evaluable layers' intervals lies above 0): L{choice.layer} was taken "
        f"for the largest lower bound{bound}, which does not make it a steering layer; "
        "treat it as a guess, or give --layer"
    )


def effect_cell(row: LayerRow, why: str = "") -> str:
    """A layer's effect above null with its interval, or ``not evaluable: <reason>``
    (``why`` where the row gives none): the answer's table and the run's table tag."""
    ends = row.effect.ends() if row.effect is not None else None
    if ends is None:
        return f"not evaluable: {(row.effect.reason if row.effect is not None else '') or why}"
    return f"{num(ends[0])} [{num(ends[1])}, {num(ends[2])}]"


def answer_table(choice: LayerChoice) -> AnswerTable:
    """The per-layer table of a layer rule, for the run's answer (``answer.md``), the
    chosen layer marked."""
    rows: list[tuple[str, ...]]
    if choice.rule == "auto":
        columns: tuple[str, ...] = ("layer", "mean test AUROC")
        rows = [(_layer(la, choice), num(r.auroc)) for la, r in choice.layers.items()]
    else:
        columns = ("layer", "β", "effect above null [interval]", "s > 0", "s < 0",
                   "concept texts passing the gate", "mean test AUROC")  # fmt: skip
        rows = [
            (
                _layer(la, choice),
                "n/a" if r.beta is None else f"{r.beta:g}",
                effect_cell(r),
                num(r.effect_pos),
                num(r.effect_neg),
                "n/a" if r.gate_pass is None else f"{r.gate_pass:.0%}",
                num(r.auroc),
            )
            for la, r in choice.layers.items()
        ]
    title = f"How --layer {choice.rule} chose layer {choice.layer}: {choice.optimises}"
    return AnswerTable(title, columns, tuple(rows))


def _layer(layer: str, choice: LayerChoice) -> str:
    return f"L{layer}" + (" (chosen)" if layer == str(choice.layer) else "")


def num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"

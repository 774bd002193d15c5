"""The likelihood outcome: how steering moves the log-likelihood of fixed texts.

The likelihood principle of Pres et al. (2024, "Towards reliable evaluation of
behavior steering interventions"): judge a steering intervention by the likelihood the
steered model gives to fixed texts that show the behaviour, against texts that do not,
instead of by sampled generations. Teacher-forced, so there is no sampling noise and no
generation; one forward pass scores a text under one steering setting.

For a concept c, a direction v and a strength s (steering h + s·β·α·v at every
position of the chosen layer, prompt prefix included, as in generation; a vector steered
as deployed adds s·c·v_l at each of its layers l in the same pass, c its coefficient of
s = 1, with the hooks and per-layer vectors generation uses, ``steering.vector``):

    L_s(t)   = mean over t's tokens of log p_s(token | prefix, earlier tokens)
    C_s      = mean L_s over c's on-concept texts − mean L_s over its off-concept texts
    e        = s · (C_s − C_0)

so e > 0 means "moved the way the strength points", as the generation effect's sign
convention has it. The contrast, not the raw likelihood, carries the signal: steering
at useful strengths lowers every text's likelihood a lot (section 6 of the research notes,
``../shared/NOTES.md``, kept beside the repository, not in it). With the
on- and off-concept texts paired (length-matched), each pair i gives a unit value
e_i = s·((L_s − L_0)(on_i) − (L_s − L_0)(off_i)), whose mean is e, and whose halves give
the outcome's split-half reliability.

Cost: only the positions that predict a text token reach the output head (as in
:func:`steering.generation.continuation_nll`), each forward pass keeps at most a budget
of logits, and a position's log-probability is its target logit minus the log-sum-exp
over the vocabulary, computed in place on the kept logits: no log-softmax tensor is
built (scoring all 100 pilot sequences with a full log-softmax 21 times took about ten
minutes on 2 cores). The unsteered pass L_0 of a set of texts is scored once and reused
(:class:`UnsteeredLoglik`): a caller scoring the same texts again (identify's doses) passes
one cache, and gets the very numbers the first pass gave.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from steering.generation import NLL_LOGITS_BUDGET, _nll_chunks, scored_outputs
from steering.head import reused_logits, target_logprobs
from steering.models import LoadedModel
from steering.vector import Direction, Layers, Mode, layer_shape, steer_layers


@dataclass(frozen=True)
class LikelihoodRow:
    """One steering setting and the texts to score under it.

    ``direction`` indexes the directions tensor; ``coefficient`` is s·β·α in additive
    mode (s in projection mode), 0 for the unsteered model; ``texts`` index the texts.
    """

    direction: int
    coefficient: float
    texts: tuple[int, ...]


@dataclass(frozen=True)
class EncodedText:
    """A text's token ids after the prefix, and the prefix's ids (BOS included)."""

    prefix: tuple[int, ...]
    target: tuple[int, ...]

    @property
    def ids(self) -> list[int]:
        return [*self.prefix, *self.target]


def encode_texts(lm: LoadedModel, texts: Sequence[str], prefix: str = "") -> list[EncodedText]:
    """Tokenise each text after ``prefix`` (joined by a space); with no prefix the text's
    own tokens after BOS are scored. The target tokens are the text's tokens only."""
    tok = lm.tokenizer
    head = tok(prefix)["input_ids"]
    if not head:  # the first text token would have nothing to be predicted from
        raise ValueError("scoring a text needs a BOS token or a non-empty prefix before it")
    out = []
    for text in texts:
        body = tok((" " + text) if prefix else text, add_special_tokens=False)["input_ids"]
        if not body:
            raise ValueError(f"text {text!r} has no tokens to score")
        out.append(EncodedText(tuple(head), tuple(body)))
    return out


@torch.inference_mode()
def steered_loglik(
    lm: LoadedModel,
    texts: Sequence[str] | Sequence[EncodedText],
    rows: Sequence[LikelihoodRow],
    directions: torch.Tensor | None,
    layer: Layers,
    mode: Mode = "additive",
    prefix: str = "",
    batch_size: int = 64,
    logits_budget: int = NLL_LOGITS_BUDGET,
) -> list[np.ndarray]:
    """Per row, the mean per-token log-likelihood of each of its texts under its steering.

    ``directions`` is ``[n, hidden]`` (None: every row unsteered), or ``[n, len(layer),
    hidden]`` when ``layer`` is several layers, each steered in the same pass. Sequences
    (row × text) are sorted by length and batched up to ``batch_size`` rows holding at most
    ``logits_budget // vocab`` scored tokens; a row's value does not depend on which
    others share its batch (beyond float rounding of padded attention), and a zero
    coefficient gives exactly the unsteered model's value in the same batch.
    """
    encoded = [t for t in texts if isinstance(t, EncodedText)]
    if len(encoded) != len(texts):
        encoded = encode_texts(lm, [str(t) for t in texts], prefix)
    if directions is None:
        directions = torch.zeros(1, *layer_shape(layer), lm.hidden_size)
    seqs = [(r, t) for r, row in enumerate(rows) for t in row.texts]
    order = sorted(range(len(seqs)), key=lambda i: (len(encoded[seqs[i][1]].ids), i))
    vocab = lm.model.get_output_embeddings().weight.shape[0]
    lengths = [len(encoded[seqs[i][1]].target) for i in order]
    chunks = _nll_chunks(lengths, batch_size, max(1, logits_budget // vocab))
    values = np.full(len(seqs), np.nan)
    with reused_logits(lm.model):  # each chunk is done with its logits before the next
        for chunk in chunks:
            picked = [order[j] for j in chunk]
            sequences = [encoded[seqs[i][1]] for i in picked]
            steering = [rows[seqs[i][0]] for i in picked]
            dirs = directions[torch.tensor([row.direction for row in steering])]
            coefs = torch.tensor([row.coefficient for row in steering], dtype=torch.float32)
            with steer_layers(lm, layer, dirs, coefs, mode):
                values[picked] = _chunk_loglik(lm, sequences)
    out, start = [], 0
    for row in rows:
        out.append(values[start : start + len(row.texts)])
        start += len(row.texts)
    return out


def _chunk_loglik(lm: LoadedModel, sequences: Sequence[EncodedText]) -> np.ndarray:
    """One forward pass: each sequence's mean log-probability of its target tokens."""
    counts = [len(s.target) for s in sequences]
    logits, targets = scored_outputs(lm, [s.ids for s in sequences], counts)
    logits = logits.float()  # a no-op for fp32 (the in-place steps below reuse it)
    # log p = logit - logsumexp(logits), in place on the kept logits (done with them).
    token_lp = target_logprobs(logits, targets).cpu().double().numpy()
    bounds = np.cumsum([0, *counts])
    return np.array([token_lp[bounds[i] : bounds[i + 1]].mean() for i in range(len(counts))])


def text_loglik(
    lm: LoadedModel, texts: Sequence[str] | Sequence[EncodedText], prefix: str = "", **kwargs: Any
) -> np.ndarray:
    """The unsteered model's mean per-token log-likelihood of each text (L_0)."""
    row = LikelihoodRow(0, 0.0, tuple(range(len(texts))))
    return steered_loglik(lm, texts, [row], None, 0, prefix=prefix, **kwargs)[0]


class UnsteeredLoglik:
    """L_0 of a set of encoded texts, scored once per (model, texts, batching) and then
    read back: the same texts in the same order batch alike, so the numbers are the
    first pass's bit for bit. Kept by the caller for as long as the model is not steered
    outside the scorer's own hooks (a run's likelihood stage, identify's doses)."""

    def __init__(self) -> None:
        self._values: dict[tuple[int, tuple[EncodedText, ...], int, int], np.ndarray] = {}
        self.scored = 0  # how many text sets were scored (not read back)

    def __call__(
        self,
        lm: LoadedModel,
        encoded: Sequence[EncodedText],
        batch_size: int = 64,
        logits_budget: int = NLL_LOGITS_BUDGET,
    ) -> np.ndarray:
        key = (id(lm.model), tuple(encoded), batch_size, logits_budget)
        if key not in self._values:
            self._values[key] = text_loglik(
                lm, encoded, batch_size=batch_size, logits_budget=logits_budget
            )
            self.scored += 1
        return self._values[key].copy()


def pair_effects(
    on_s: np.ndarray, off_s: np.ndarray, on_0: np.ndarray, off_0: np.ndarray, strength: float
) -> np.ndarray:
    """Per pair i: s·((L_s − L_0)(on_i) − (L_s − L_0)(off_i)); their mean is the outcome e."""
    on_s, off_s, on_0, off_0 = (np.asarray(a, dtype=np.float64) for a in (on_s, off_s, on_0, off_0))
    if not on_s.shape == off_s.shape == on_0.shape == off_0.shape:
        raise ValueError("on- and off-concept texts must be paired one to one")
    return float(np.sign(strength)) * ((on_s - on_0) - (off_s - off_0))


def likelihood_outcomes(
    lm: LoadedModel,
    layer: Layers,
    scale: float,
    on_texts: Mapping[str, Sequence[str]],
    off_texts: Mapping[str, Sequence[str]],
    directions: Sequence[Direction],
    strengths: Sequence[float],
    mode: Mode = "additive",
    prefix: str = "",
    batch_size: int = 64,
    logits_budget: int = NLL_LOGITS_BUDGET,
    unsteered: UnsteeredLoglik | None = None,
) -> list[dict[str, Any]]:
    """One record per (direction, strength, text pair) with L_s, L_0 and the unit effect.

    ``scale`` is the coefficient of s = 1 in additive mode: β·α for a unit direction, or a
    file's coefficient k for its own vectors (``steering.scale: file``). ``layer`` is one
    layer (each direction's vector ``[hidden]``) or several (``[len(layer), hidden]``: what
    each layer's hook adds per unit of the coefficient, ``SteeringVector.added``), all
    hooked in one pass as generation hooks them. The unsteered L_0 of every distinct text
    is computed once and shared (across calls too, through ``unsteered``); strength 0 is
    not steered again. ``on_texts[c]`` and ``off_texts[c]`` are paired one to one
    (length-matched).
    """
    texts = sorted({t for group in (on_texts, off_texts) for ts in group.values() for t in ts})
    index = {t: i for i, t in enumerate(texts)}
    encoded = encode_texts(lm, texts, prefix)
    base = (unsteered or UnsteeredLoglik())(lm, encoded, batch_size, logits_budget)
    stack = torch.stack([d.vector.float() for d in directions]) if directions else None
    rows, keys = [], []
    for d_index, d in enumerate(directions):
        pairs = tuple(index[t] for t in [*on_texts[d.concept], *off_texts[d.concept]])
        for s in strengths:
            if s == 0:
                continue
            coefficient = (s * scale if mode == "additive" else s) * d.dose
            rows.append(LikelihoodRow(d_index, float(coefficient), pairs))
            keys.append((d, s))
    scored = steered_loglik(
        lm, encoded, rows, stack, layer, mode, batch_size=batch_size, logits_budget=logits_budget
    )
    out = []
    for (d, s), values in zip(keys, scored, strict=True):
        n_on = len(on_texts[d.concept])
        on = [index[t] for t in on_texts[d.concept]]
        off = [index[t] for t in off_texts[d.concept]]
        units = pair_effects(values[:n_on], values[n_on:], base[on], base[off], s)
        for i, unit in enumerate(units):
            out.append(
                {
                    "concept": d.concept,
                    "arm": d.id,
                    "strength": float(s),
                    "pair": i,
                    "ll_on": float(values[i]),
                    "ll_off": float(values[n_on + i]),
                    "ll_on_0": float(base[on[i]]),
                    "ll_off_0": float(base[off[i]]),
                    "e": float(unit),
                }
            )
    return out

"""Answerability by a local cross-encoder, when the deployment configures one.

A bi-encoder embeds the question and a sentence apart and compares them; a cross-encoder reads
them together, and so can tell "larger increases need the Head of Payments Risk" from "a
relationship manager requests the increase" for *who signs off*. Issue 31 asks for it when
configured: ``[validation] cross_encoder_path`` names a local sentence-transformers
cross-encoder (nothing is downloaded; extra ``semantic``). Each evidence sentence, read in
context as every relevance reads it (:func:`~govrag.validation.answerability.in_context`), is
scored with the question, and the logit mapped to a probability, so the answer score is on
0..1 with a threshold of its own (``min_cross_score``; calibrate it on your suites: the
embedder's ``min_answer_score`` is on another scale). It judges only whether evidence
answers, before synthesis; what a refused corpus is about and the extractive responder's
choice of sentence stay with the embedder.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from govrag.embed.cross_encoder import load_cross_encoder
from govrag.validation.answerability import in_context

#: The setting that configures it (named in errors).
SETTING = "validation.cross_encoder_path"


class CrossEncoderRelevance:
    """A :class:`~govrag.validation.answerability.Relevance` by a local cross-encoder."""

    def __init__(self, model_path: str | Path, *, device: str = "cpu", batch_size: int = 32):
        path = Path(model_path)
        self._model = load_cross_encoder(path, setting=SETTING, device=device)
        self.batch_size = batch_size
        self.name = f"cross-encoder:{path.name}"

    def scores(self, question: str, texts: Sequence[list[str]]) -> list[list[float]]:
        pairs = [(question, read) for text in texts for read in in_context(text)]
        if not pairs:
            return [[] for _ in texts]
        raw = self._model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False,
                                  convert_to_numpy=True, activation_fn=_identity)  # fmt: skip
        # One logit per pair; a sigmoid puts every model on the same 0..1 scale (a model's
        # own activation, if any, is bypassed above, so it is never applied twice). A logit
        # that is not a number (an overflow, broken weights) answers nothing: fail closed.
        flat = [_probability(float(x)) for x in raw]
        out: list[list[float]] = []
        at = 0
        for text in texts:
            out.append(flat[at : at + len(text)])
            at += len(text)
        return out


def _identity(x: object) -> object:
    return x


def _probability(logit: float) -> float:
    """The sigmoid of ``logit`` (clamped to +-60); 0 for NaN."""
    if math.isnan(logit):
        return 0.0
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, logit))))

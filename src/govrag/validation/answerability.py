"""Answerability: does the validated evidence answer the question, before any model runs?

Seed 003 puts validation before synthesis: abstaining when the evidence does not answer is the
app's decision, whatever model is configured. A shared word is no answer ("days" in a
question about parental leave, quoted from a clean-desk policy), so sufficiency is judged per
sentence of evidence:

- **relevance** of each sentence to the question: the cosine of their embeddings by the
  deployment's embedder when it is semantic (MiniLM, offline), else the idf-weighted share
  of the question's content terms the sentence holds (weights from the evidence's own
  sentences: a term no sentence holds weighs most, so a question about something the
  evidence never mentions scores low however many common words it shares);
- what the question **asks for** (:mod:`govrag.validation.questions`): *how many* questions
  need a count, *how much / how long* a quantity, *when* questions a date or time, *who*
  questions a name, a role or an address, *why* questions a cause; a question about an
  earlier state a sentence that speaks of one, a question naming a year a text that names
  it. A relevant sentence that has none of what was asked does not answer it.

The answer score is the best relevance of a sentence that has what the question needs;
validation passes it against a threshold (``[validation] min_answer_score`` for embeddings,
``min_answer_coverage`` for terms), calibrated on the dev split of the bundled suites
(docs/eval.md). Everything here reads only the question and the evidence handed in.
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from govrag.embed.base import Embedder
from govrag.store.analyzer import default_analyzer
from govrag.validation.questions import QuestionKind, asked, fits

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[str]:
    """The sentences (and heading lines) of ``text``, stripped, blank ones dropped."""
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def in_context(text: list[str]) -> list[str]:
    """Each sentence of ``text`` (its sentences) as relevance reads it: under the question
    just before it when there is one (an FAQ's "Can I cancel an instant payment? No. Instant
    payments cannot be recalled": the answer says little without its question), else under
    the text's first line (a heading or opening sentence: "EUR 50,000 per day." says little
    alone). The first line is read alone."""
    out = []
    for i, sentence in enumerate(text):
        asked = next((text[j] for j in (i - 1, i - 2) if j >= 0 and text[j].endswith("?")), None)
        if asked is not None:
            out.append(f"{asked} {sentence}")
        else:
            out.append(sentence if i == 0 else f"{text[0]} {sentence}")
    return out


class Relevance(Protocol):
    """Scores each sentence of each evidence text against a question, in 0..1 (higher: more
    on the question)."""

    #: How it scores (``embedder:minilm``, ``terms``): recorded with the figures.
    name: str

    def scores(self, question: str, texts: Sequence[list[str]]) -> list[list[float]]:
        """One score per sentence of ``texts`` (each text given as its sentences)."""
        ...


class TermRelevance:
    """The idf-weighted share of the question's content terms a sentence holds; weights from
    the given sentences (see the module docstring)."""

    name = "terms"

    def scores(self, question: str, texts: Sequence[list[str]]) -> list[list[float]]:
        analyzer = default_analyzer()
        wanted = set(analyzer.analyze(question))
        held = [[set(analyzer.analyze(s)) for s in text] for text in texts]
        if not wanted:
            return [[1.0 for _ in text] for text in texts]
        every = [h for text in held for h in text]
        n = len(every)
        weight = {t: math.log(1.0 + (n + 1) / (0.5 + sum(1 for h in every if t in h)))
                  for t in wanted}  # fmt: skip
        total = sum(weight.values())
        return [[sum(weight[t] for t in wanted & h) / total for h in text] for text in held]


class EmbedderRelevance:
    """Half the cosine of the question and the sentence read in context (:func:`in_context`),
    half the cosine of the question and the whole text; negative cosines count as 0.
    Calibrated against sentence alone, text alone, their maximum and term blends on the
    suites' dev split, this separated answering from non-answering evidence best
    (docs/eval.md)."""

    def __init__(self, embedder: Embedder, *, cached: int = 8192) -> None:
        self.embedder = embedder
        self.name = f"embedder:{embedder.name}"
        self._vectors = _VectorCache(cached)

    def scores(self, question: str, texts: Sequence[list[str]]) -> list[list[float]]:
        if not any(texts):
            return [[] for _ in texts]
        q = self.embedder.embed_query(question)
        whole = [" ".join(t) for t in texts]
        read = [r for t in texts for r in in_context(t)]
        vectors = self._vectors.embed(self.embedder, whole + read)
        cos = [max(0.0, float(x)) for x in np.asarray(vectors @ q, dtype=np.float64)]
        out: list[list[float]] = []
        at = len(whole)
        for i, t in enumerate(texts):
            out.append([(cos[i] + c) / 2 for c in cos[at : at + len(t)]])
            at += len(t)
        return out


class _VectorCache:
    """The embeddings of the last ``size`` evidence texts, by their text: validation and the
    extractive responder score the same sentences of a request, and the documents people ask
    about recur across requests (a MiniLM pass over a pack's sentences takes seconds on two
    cores). Keyed by the whole text, so a vector is only ever reused for that exact text; a
    hit says no more than that the text, which the caller's own evidence holds, was scored
    before in this process."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._rows: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, embedder: Embedder, texts: list[str]) -> np.ndarray:
        with self._lock:
            known = {t: self._rows[t] for t in texts if t in self._rows}
            for t in known:
                self._rows.move_to_end(t)
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            fresh = embedder.embed_documents(missing, batch_size=64)
            new = dict(zip(missing, fresh, strict=True))
            known.update(new)
            with self._lock:
                self._rows.update(new)
                while len(self._rows) > self.size:
                    self._rows.popitem(last=False)
        return np.stack([known[t] for t in texts])


def relevance_for(embedder: Embedder | None) -> Relevance:
    """The deployment's relevance: its embedder when semantic, else term coverage (the
    ``hash`` embedder hashes words: its cosine is a cruder term overlap)."""
    if embedder is None or embedder.name == "hash":
        return TermRelevance()
    return EmbedderRelevance(embedder)


@dataclass(frozen=True)
class Judgement:
    kind: QuestionKind
    #: Best relevance of a sentence that has what the kind needs (``None``: no sentence).
    answer_score: float | None
    #: The sentence it came from (for logs and tests; never recorded: it is content).
    best: str | None
    method: str


def without_names(question: str, corpora: Iterable[str]) -> str:
    """``question`` without the names of ``corpora`` in it ("what do the hr policies say
    about sick pay?" asks about sick pay): a corpus named says where to look, not what the
    answer holds, and a document that merely mentions the corpus does not answer it. The
    question is kept whole when nothing else of substance would be left."""
    out = question
    for corpus in corpora:
        parts = [re.escape(p) for p in re.split(r"[-_\s]+", corpus) if p]
        if parts:
            out = re.sub(r"\b" + r"[-_\s]+".join(parts) + r"\b", " ", out, flags=re.IGNORECASE)
    return out if out != question and default_analyzer().analyze(out) else question


def judge(question: str, texts: Sequence[str], relevance: Relevance) -> Judgement:
    """How well the evidence ``texts`` answers ``question``."""
    need = asked(question)
    split = [(text, ss) for text, ss in ((t, sentences(t)) for t in texts) if ss]
    if not split:
        return Judgement(need.kind, None, None, relevance.name)
    scored = relevance.scores(question, [ss for _, ss in split])
    fitting = [(score, s) for (text, ss), scores in zip(split, scored, strict=True)
               for s, score in zip(ss, scores, strict=True) if fits(need, s, text)]  # fmt: skip
    if not fitting:
        return Judgement(need.kind, None, None, relevance.name)
    score, best = max(fitting, key=lambda x: x[0])
    return Judgement(need.kind, round(score, 4), best, relevance.name)


def topic_score(question: str, corpus: str, description: str, relevance: Relevance) -> float:
    """How much ``question`` is about what a corpus holds, by its id and ``description``
    (the deployment's ``[corpora.<id>] description``): the best relevance of the whole
    description or one of its items (split at commas, colons, semicolons and brackets), each
    read under the corpus id. Configuration only: no document is read, so this may be asked
    of a corpus the caller is refused."""
    head = corpus.replace("-", " ").replace("_", " ")
    parts = [p.strip() for p in re.split(r"[;:,()]", description) if p.strip()]
    items = [f"{head}: {description}"] if description.strip() else [head]
    items += [f"{head}: {p}" for p in parts]
    scored = relevance.scores(question, [[item] for item in items])
    return max((s for row in scored for s in row), default=0.0)

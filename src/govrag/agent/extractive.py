"""The offline, deterministic ``extractive`` responder: an LLM stand-in that only quotes.

It speaks the same protocol as a real model (:class:`~govrag.agent.llm.LlmClient`) and sees
only what a real model would: the messages and the tool schemas. It reads the caller's question
and text from their untrusted fences (:func:`~govrag.agent.prompts.caller_parts`), and evidence
only where the app puts it (context lines of a system message, pack observations in tool
results), never from the caller's text. It never invents a fact:

- asked to formulate a query (the system prompt of a ``query_formulation`` stage), it returns
  the question's content words;
- offered retrieve tools and holding no evidence yet, it proposes calls: ``list_corpora``
  first when offered, then one retrieve per listed corpus (a tool bound to a corpus takes
  only a query);
- otherwise it answers extractively: the sentence of the evidence (context chunks in the
  prompt, pack observations in tool messages) that answers the question best, by the
  deployment's relevance (its semantic embedder, else terms) and the question's kind (a
  count, a quantity, a date, a name: the rule validation applies), and the next of the same
  document when nearly as good (a question asking two things: the best for each), each
  followed by its chunk id in brackets, or says the evidence does not answer;
- shown an output schema (:data:`~govrag.agent.prompts.OUTPUT_SCHEMA_MARK`), it fills it from
  the chunks about as relevant to the question as the best one of their corpus (a review of
  the Acme contract quotes Acme's clauses, not Orbis's, and the playbook's position): each
  free-text field with the best sentence not used yet for the question and the field's name
  and description (cited; a chunk's heading line is no field's answer), each listed choice with
  a value the quoted sentences state (else it is left out where the shape allows), each
  array with its fewest items (at least one).

The default in tests and ``make demo``; configure ``[llm] provider = "openai"`` for a model.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from govrag.agent.llm import LlmReply, Message, ToolCall
from govrag.agent.prompts import (
    CONTEXT_LINE,
    OUTPUT_SCHEMA_MARK,
    QUERY_FORMULATION_MARK,
    caller_parts,
)
from govrag.validation.answerability import Relevance, TermRelevance, in_context, sentences
from govrag.validation.questions import ANYTHING, Asked, asked, fits

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-]*")
_STOPWORDS = (
    "a an and are as at be by can do does for from have how i in is it me my of on or our "
    "the their this to us was we what when where which who why will with you your"
)
_STOP = frozenset(_STOPWORDS.split())
#: Most sentences quoted in one answer.
MAX_SENTENCES = 2
#: A structured answer quotes the chunks scoring at least this share of the best of their
#: corpus (chosen on the dev split of bank-eu-natural: 0.9 and 0.95 tried).
ON_TOPIC = 0.95
NO_ANSWER = "The documents available to me do not answer this question."


def terms(text: str) -> set[str]:
    """Lower-cased content words, a trailing plural ``s`` dropped (a crude, fixed stemmer)."""
    out = set()
    for w in _WORD.findall(text.lower()):
        if w in _STOP or len(w) < 2:
            continue
        out.add(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return out


class ExtractiveResponder:
    """See the module docstring."""

    name = "extractive"

    def __init__(self, relevance: Relevance | None = None) -> None:
        #: How answer sentences are ranked: the deployment's (its semantic embedder, when it
        #: has one, :func:`~govrag.validation.answerability.relevance_for`), else terms.
        self.relevance: Relevance = relevance if relevance is not None else TermRelevance()

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        stop: Sequence[str] = (),
    ) -> LlmReply:
        """Deterministic: ``max_tokens`` and ``stop`` do not apply (nothing is generated)."""
        user = _caller_message(messages)
        parts = caller_parts(user)
        question, text = parts.get("question", user), parts.get("text", "")
        system = "\n".join(str(m.get("content") or "") for m in messages if m["role"] == "system")
        if QUERY_FORMULATION_MARK in system:
            words = [w for w in _WORD.findall(question) if w.lower() not in _STOP]
            return LlmReply(text=" ".join(words) or question, model=self.name)
        calls = self._proposals(messages, tools, question)
        if calls:
            return LlmReply(tool_calls=tuple(calls), model=self.name)
        schema = _output_schema(system)
        if schema is not None:
            sources = _on_topic(question, list(_evidence(messages)), self.relevance)
            filler = _Filler(question, sources, text, self.relevance)
            shaped = filler.value(schema, frozenset())
            return LlmReply(text=json.dumps(shaped, ensure_ascii=False), model=self.name)
        return LlmReply(text=self._answer(messages, question, text), model=self.name)

    # -- proposing ---------------------------------------------------------------------------
    def _proposals(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]], question: str
    ) -> list[ToolCall]:
        retrieve = [t for t in tools if "query" in _properties(t)]
        if not retrieve or any(True for _ in _evidence_messages(messages)):
            return []
        called = {c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
        if retrieve and called & {t["name"] for t in retrieve}:
            return []  # searched already (and got nothing usable): answer now
        names = {t["name"] for t in tools}
        if "list_corpora" in names and "list_corpora" not in called:
            return [ToolCall.parse("call-1", "list_corpora", "{}")]
        listed = _listed_corpora(messages)
        # Every corpus it may search: a description is too short to tell which one answers
        # (the overdraft FAQ is in "product FAQs: accounts, cards, ..."), and validation
        # judges what each search found.
        chosen = [c for c, _ in listed]
        out: list[ToolCall] = []
        for tool in retrieve:
            if "corpus" in _properties(tool):
                for corpus in chosen:
                    args = {"corpus": corpus, "query": question}
                    out.append(ToolCall.parse(f"call-{len(out) + 1}", tool["name"],
                                              json.dumps(args)))  # fmt: skip
            else:
                out.append(ToolCall.parse(f"call-{len(out) + 1}", tool["name"],
                                          json.dumps({"query": question})))  # fmt: skip
            if out:
                break  # one retrieve tool is enough
        return out

    # -- answering ---------------------------------------------------------------------------
    def _answer(self, messages: Sequence[Message], question: str, text: str) -> str:
        wanted = terms(question)
        picked = _answering(question, [(c, t) for c, t, _ in _evidence(messages)], self.relevance)
        if picked:
            return " ".join(f"{sentence} [{chunk_id}]" for sentence, chunk_id in picked)
        # No evidence: work on the caller's own text, if any (a no-retrieval route).
        if text:
            quoted = _best_sentences(wanted, [("", text)]) or _best_sentences(None, [("", text)])
            return " ".join(sentence for sentence, _ in quoted)
        return NO_ANSWER


def _answering(
    question: str, sources: list[tuple[str, str]], relevance: Relevance
) -> list[tuple[str, str]]:
    """The sentence that answers ``question`` best, and the next best of the same document
    when it is nearly as good: as ``(sentence, chunk id)``. A sentence must hold what the
    question asks for (a count, a quantity, a date, a name: the same rule validation applies)
    and is ranked by ``relevance`` (read in context, as validation reads it), a fifth of it
    the question's terms it holds, rare terms weighing most; a question in the evidence (an
    FAQ's heading) answers nothing. A question that asks two things ("the daily limit, and when
    does a Tier-2 client need a second signatory?") gets the best sentence for each."""
    chunks = [(cid, sentences(text)) for cid, text in sources]
    chunks = [(cid, ss) for cid, ss in chunks if ss]
    parts = _parts(question)
    picked: list[tuple[int, int]] = []
    if len(parts) > 1:
        for part in parts[:MAX_SENTENCES]:
            # "... , and what is it now?": a part of pronouns is read as the whole question,
            # asking for what the part's kind needs.
            read_as = part if len(terms(part)) >= 2 else question
            ranked = [r for r in _ranked(read_as, chunks, relevance, asked(part))
                      if (r[1], r[2]) not in picked]  # fmt: skip
            if not ranked:
                continue
            # A document already quoted answers the next part too when nearly as well.
            quoted = {_document(chunks[c][0]) for c, _ in picked}
            top = ranked[0][0]
            near = [r for r in ranked if r[0] >= 0.8 * top and _document(chunks[r[1]][0]) in quoted]
            _, c, i = (near or ranked)[0]
            picked.append((c, i))
    else:
        ranked = _ranked(question, chunks, relevance, asked(question))
        if ranked:
            top, c, i = ranked[0]
            doc = _document(chunks[c][0])
            picked = [(c, i)]
            for score, c2, i2 in ranked[1:]:
                if len(picked) == MAX_SENTENCES:
                    break
                if score >= 0.8 * top and _document(chunks[c2][0]) == doc:
                    picked.append((c2, i2))
    picked.sort()  # in the order the evidence says them
    return [(_ended(chunks[c][1][i]), chunks[c][0]) for c, i in picked]


#: Where a question asks a second thing: after a question mark, or at ", and" before a
#: question word.
_PARTS = re.compile(
    r"(?<=\?)\s+(?=\S)|,?\s+and\s+(?=(?:when|what|how|who|which|where|is|are|does|do|can|"
    r"must|should)\b)",
    re.IGNORECASE,
)


def _parts(question: str) -> list[str]:
    """The questions ``question`` asks, in order (one, most often)."""
    parts = [p.strip() for p in _PARTS.split(question) if p.strip()]
    return parts if len(parts) > 1 else [question]


def _ranked(
    question: str, chunks: list[tuple[str, list[str]]], relevance: Relevance, need: Asked
) -> list[tuple[float, int, int]]:
    """``(score, chunk index, sentence index)`` of every sentence that may answer
    ``question`` and has what ``need`` asks for (see :func:`_answering`), best first."""
    read = [in_context(ss) for _, ss in chunks]
    terms = TermRelevance()
    by_terms = terms.scores(question, read)
    if isinstance(relevance, TermRelevance):
        # Terms alone: half read under the chunk's first line, half in the sentence alone, so
        # a heading's words do not make every sentence below it outrank the heading that
        # states the answer.
        alone = terms.scores(question, [ss for _, ss in chunks])
        by_model = [[(a + b) / 2 for a, b in zip(under, own, strict=True)]
                    for under, own in zip(by_terms, alone, strict=True)]  # fmt: skip
    else:
        by_model = relevance.scores(question, [ss for _, ss in chunks])
    scores = [[0.8 * m + 0.2 * t for m, t in zip(mr, tr, strict=True)]
              for mr, tr in zip(by_model, by_terms, strict=True)]  # fmt: skip
    ranked: list[tuple[float, int, int]] = []
    for c, ((_, ss), row) in enumerate(zip(chunks, scores, strict=True)):
        text = " ".join(ss)
        for i, (sentence, score) in enumerate(zip(ss, row, strict=True)):
            if score > 0 and not sentence.endswith("?") and fits(need, sentence, text):
                ranked.append((score, c, i))
    ranked.sort(key=lambda r: (-r[0], r[1], r[2]))
    return ranked


def _on_topic(
    question: str, sources: list[tuple[str, str, str]], relevance: Relevance
) -> list[tuple[str, str]]:
    """The chunks of ``sources`` nearly as relevant to ``question`` as the best one of their
    corpus (:data:`ON_TOPIC` of its score): a review of the Acme contract quotes Acme's
    clauses, not the Orbis contract's that share its words, and the playbook's position on
    them (a playbook reads less like the question than the clause it is about)."""
    if len(sources) < 2:
        return [(c, t) for c, t, _ in sources]
    scored = [row[0] if row else 0.0
              for row in relevance.scores(question, [[t] for _, t, _ in sources])]  # fmt: skip
    best: dict[str, float] = {}
    for (_, _, where), score in zip(sources, scored, strict=True):
        best[where] = max(best.get(where, 0.0), score)
    return [(c, t) for (c, t, where), score in zip(sources, scored, strict=True)
            if score >= ON_TOPIC * best[where]]  # fmt: skip


def _document(chunk_id: str) -> str:
    """The document part of a chunk id (``source:doc#n``)."""
    return chunk_id.rsplit("#", 1)[0]


def _best_sentences(
    wanted: set[str] | None, sources: Iterable[tuple[str, str]], least: int = 1
) -> list[tuple[str, str]]:
    """The ``MAX_SENTENCES`` sentences sharing the most words (``least`` or more) with
    ``wanted`` (the first sentences when ``wanted`` is ``None``), in rank order, as
    ``(sentence, source id)``."""
    scored: list[tuple[int, int, str, str]] = []
    for order, (source_id, text) in enumerate(sources):
        for n, sentence in enumerate(sentences(text)):
            overlap = len(wanted & terms(sentence)) if wanted is not None else 1
            if overlap >= least:
                scored.append((-overlap, order * 10_000 + n, sentence, source_id))
    scored.sort()
    out = []
    for _, _, sentence, source_id in scored[:MAX_SENTENCES]:
        out.append((_ended(sentence), source_id))
    return out


def _ended(sentence: str) -> str:
    """``sentence`` with a full stop, unless it ends with one already (or ``!`` or ``?``)."""
    return sentence if sentence.endswith((".", "!", "?")) else f"{sentence}."


class _Filler:
    """Fills an output schema from the evidence (see the module docstring). A field takes
    the sentence most relevant to the question (as :func:`_answering` ranks them), plus half
    the share it holds of the words of the field's name and description, rare words across
    the chunks weighing most (a word of every chunk's heading says nothing about which
    sentence a field wants)."""

    def __init__(
        self, question: str, sources: list[tuple[str, str]], text: str, relevance: Relevance
    ) -> None:
        quoted = sources or ([("", text)] if text else [])
        chunks = [(cid, ss) for cid, ss in ((c, sentences(t)) for c, t in quoted) if ss]
        self.sentences = [(s, cid, frozenset(terms(s))) for cid, ss in chunks for s in ss]
        by_place = {(c, i): score for score, c, i in _ranked(question, chunks, relevance, ANYTHING)}
        self.relevant = [by_place.get((c, i), 0.0) for c, (_, ss) in enumerate(chunks)
                         for i in range(len(ss))]  # fmt: skip
        # A chunk's first line heads the sentences below it (a contract's "Acme MSA, draft
        # v4, clause 14."): no field's answer.
        self.headings = set()
        at = 0
        for _, ss in chunks:
            if len(ss) >= 3:
                self.headings.add(at)
            at += len(ss)
        # Rarity across chunks: a word every chunk has (its heading's) weighs nothing.
        df: dict[str, int] = {}
        for _, t in quoted:
            for term in terms(t):
                df[term] = df.get(term, 0) + 1
        self.weight = {term: math.log(len(quoted) / count) for term, count in df.items()}
        self.used: set[int] = set()

    def value(self, schema: Any, hint: frozenset[str]) -> Any:
        if not isinstance(schema, dict):
            return None
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.choice(schema["enum"])
        kind = schema.get("type")
        if kind == "object":
            props = schema.get("properties") or {}
            required = set(schema.get("required") or ())
            out = {name: self.value(sub, hint | _about(name, sub))
                   for name, sub in props.items()}  # fmt: skip
            # A choice the evidence does not make is left unset where the shape allows it.
            return {k: v for k, v in out.items() if v is not None or k in required}
        if kind == "array":
            count = max(int(schema.get("minItems", 1)), 1)
            return [self.value(schema.get("items"), hint) for _ in range(count)]
        if kind == "string":
            return self.prose(hint, schema.get("maxLength"))
        return False if kind == "boolean" else None

    def choice(self, values: list[Any]) -> Any:
        """The first listed value the sentences quoted so far state (a whole word, case
        aside), else ``None``: a closed choice is filled from evidence or not at all."""
        quoted = " ".join(self.sentences[i][0] for i in sorted(self.used)).lower()
        for value in values:
            if isinstance(value, str) and re.search(rf"\b{re.escape(value.lower())}\b", quoted):
                return value
        return None

    def prose(self, hint: frozenset[str], longest: Any) -> str:
        """The best sentence not used yet (else the best) for the question and ``hint``
        (the field's words), cited."""
        within = sum(self.weight.get(t, 0.0) for t in hint) or 1.0

        def score(i: int) -> float:
            held = sum(self.weight[t] for t in self.sentences[i][2] & hint)
            return self.relevant[i] + 0.5 * held / within

        ranked = sorted(range(len(self.sentences)), key=lambda i: (-score(i), i))
        shown = {i: self._cited(i) for i in ranked}
        if isinstance(longest, int):
            ranked = [i for i in ranked if len(shown[i]) <= longest]
        ranked = [i for i in ranked if i not in self.headings] or ranked
        fresh = [i for i in ranked if i not in self.used] or ranked
        if not fresh:
            return NO_ANSWER
        self.used.add(fresh[0])
        return shown[fresh[0]]

    def _cited(self, i: int) -> str:
        sentence, chunk_id, _ = self.sentences[i]
        return f"{_ended(sentence)} [{chunk_id}]" if chunk_id else _ended(sentence)


def _about(name: str, schema: Any) -> frozenset[str]:
    described = schema.get("description", "") if isinstance(schema, dict) else ""
    return frozenset(terms(f"{name.replace('_', ' ')} {described}"))


def _output_schema(system: str) -> Any:
    """The output schema shown in the system message (one line of JSON), if any."""
    for line in system.splitlines():
        if line.startswith(OUTPUT_SCHEMA_MARK):
            try:
                return json.loads(line[len(OUTPUT_SCHEMA_MARK) :])
            except ValueError:
                return None
    return None


def _caller_message(messages: Sequence[Message]) -> str:
    """The last user message that holds the caller's fenced parts (a repair note after it
    is the app's), else the last user message."""
    users = [str(m.get("content") or "") for m in messages if m["role"] == "user"]
    return next((u for u in reversed(users) if caller_parts(u)), users[-1] if users else "")


def _properties(tool: dict[str, Any]) -> dict[str, Any]:
    props = (tool.get("parameters") or {}).get("properties") or {}
    return props if isinstance(props, dict) else {}


def _tool_results(messages: Sequence[Message]) -> Iterator[Any]:
    for m in messages:
        if m["role"] == "tool":
            try:
                yield json.loads(str(m.get("content") or ""))
            except ValueError:
                continue


def _listed_corpora(messages: Sequence[Message]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for result in _tool_results(messages):
        if isinstance(result, dict) and isinstance(result.get("corpora"), list):
            for c in result["corpora"]:
                if isinstance(c, dict) and isinstance(c.get("corpus"), str):
                    out.append((c["corpus"], str(c.get("description") or "")))
    return out


def _evidence_messages(messages: Sequence[Message]) -> Iterator[Any]:
    for result in _tool_results(messages):
        if isinstance(result, dict) and result.get("chunks"):
            yield result


def _evidence(messages: Sequence[Message]) -> Iterator[tuple[str, str, str]]:
    """``(chunk id, text, corpus)`` of every chunk in the prompt's context (system messages: the
    app's own) and in pack observations."""
    for m in messages:
        if m["role"] == "system":
            for match in CONTEXT_LINE.finditer(str(m.get("content") or "")):
                yield match.group("chunk_id"), match.group("text"), match.group("where")
    for result in _evidence_messages(messages):
        where = str(result.get("corpus") or "")
        for c in result["chunks"]:
            if isinstance(c, dict) and isinstance(c.get("chunk_id"), str):
                yield c["chunk_id"], str(c.get("text") or ""), where

"""What ``govrag ask`` returns: a grounded, cited answer or an honest abstention."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from govrag.agent.retrieve import CorpusDecision
from govrag.types import ChunkOrigin, ContextPack, HiddenMarker, PackChunk
from govrag.validation import ClaimReport, ValidationReport
from govrag.validation.citations import Citations


@dataclass(frozen=True)
class Citation:
    doc_id: str
    chunk_id: str
    corpus: str
    source_system: str
    context_pack_id: str
    #: ``source`` (a document) or ``session_memory`` (a write-back entry, no corpus).
    origin: ChunkOrigin = ChunkOrigin.SOURCE
    #: A cited write-back entry's seed metadata (``writeback.gate``, ...); else ``None``.
    writeback: dict[str, str] | None = None


@dataclass(frozen=True)
class Answer:
    request_id: str
    #: This delivered answer's id (``resp-...``), on the ``response`` audit record too.
    response_id: str
    session_id: str
    route_id: str
    #: ``none``, ``0`` (prefetch), ``1`` (LLM proposes), ``2`` (workflow), ``3`` (stage
    #: allowlists): how this request ran.
    pattern: str
    answer: str
    abstained: bool
    #: Why it abstained (``no_evidence``, ``thin_evidence``, ``off_topic``,
    #: ``scope_violation``, ``not_recorded``, ``uncited``, ``unsupported``, ``denied`` (by
    #: policy), ``model_out_of_scope`` (the model asked only for corpora outside the route),
    #: ``truncated``, ``empty_reply``, ``step_limit``, ``llm_error`` (see :attr:`llm_fault`),
    #: ...); ``None`` otherwise.
    reason: str | None
    citations: tuple[Citation, ...]
    hidden: HiddenMarker
    decisions: tuple[CorpusDecision, ...]
    packs: tuple[ContextPack, ...]
    validation: ValidationReport | None
    claims: ClaimReport | None
    #: The answer is not from the organisation's documents (no knowledge path, or an empty
    #: store): the model worked on the caller's text or general knowledge only.
    grounded: bool
    #: Sentences the cited evidence did not support were removed from the model's answer
    #: (``claims`` says which and why); what is delivered is the supported rest.
    flagged: bool = False
    trace: dict[str, Any] = field(default_factory=dict)
    #: For ``llm_error``: the operator's message (URL, setting to fix, the server's words).
    #: Never part of :meth:`as_dict`: edges show it to operators (stderr, logs), not callers.
    llm_detail: str | None = field(default=None, repr=False)
    #: A route with an output schema: the delivered answer as its JSON object (``answer`` is
    #: the same object as text). ``None`` for text answers and for every abstention.
    structured: dict[str, Any] | None = None

    @property
    def llm_fault(self) -> str | None:
        """For ``llm_error``: the class of the model's failure (``connection``, ``auth``,
        ``not_found``, ``rejected``, ``context_overflow``, ``protocol``, ``timeout``,
        ``overloaded``, ``rate_limited``)."""
        fault = self.trace.get("llm_fault")
        return fault if isinstance(fault, str) else None

    @property
    def hint(self) -> str | None:
        """The hidden-item marker as advice: where relevant material exists, whom to ask."""
        if not self.hidden.present:
            return None
        contacts: dict[str, list[str]] = {}
        for s in self.hidden.sources:
            emails = contacts.setdefault(s.source_system, [])
            if s.author_email and s.author_email not in emails:
                emails.append(s.author_email)
        parts = [
            f"relevant material exists in {system}" + (f"; contact {', '.join(e)}" if e else "")
            for system, e in contacts.items()
        ]
        return "; ".join(parts) or "relevant material exists that you may not read"

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``govrag ask --json``."""
        return {
            "request_id": self.request_id,
            "response_id": self.response_id,
            "session_id": self.session_id,
            "route_id": self.route_id,
            "pattern": self.pattern,
            "answer": self.answer,
            "structured": self.structured,
            "abstained": self.abstained,
            "reason": self.reason,
            "llm_fault": self.llm_fault,
            "grounded": self.grounded,
            "flagged": self.flagged,
            "citations": [
                {
                    "doc_id": c.doc_id,
                    "chunk_id": c.chunk_id,
                    "corpus": c.corpus,
                    "source_system": c.source_system,
                    "origin": c.origin.value,
                    "writeback": c.writeback,
                }
                for c in self.citations
            ],
            "hidden": {**self.hidden.model_dump(mode="json"), "hint": self.hint},
            "decisions": [asdict(d) for d in self.decisions],
            "packs": [p.model_dump(mode="json") for p in self.packs],
            "validation": self.validation.as_dict() if self.validation else None,
            "claims": shown_claims(self.claims, self.abstained) if self.claims else None,
            "trace": self.trace,
        }


def cited(text: str, evidence: Sequence[tuple[str, PackChunk]]) -> tuple[list[Citation], list[str]]:
    """The citations in ``text`` that name a chunk (or document) of the validated
    ``evidence`` (``(pack id, chunk)`` pairs), and the cited items that name nothing of it.

    Markers are read by the claim check's own parser
    (:class:`~govrag.validation.citations.Citations`), so what is recorded as cited is what
    was judged: a document id cites each of its handed chunks."""
    by_chunk = {c.chunk_id: (pack_id, c) for pack_id, c in evidence}
    out: dict[str, Citation] = {}
    unknown: list[str] = []
    for marker in Citations(c for _, c in evidence).markers(text):
        unknown.extend(marker.unknown)
        for chunk_id in marker.chunk_ids:
            pack_id, c = by_chunk[chunk_id]
            out.setdefault(
                c.chunk_id,
                Citation(c.doc_id, c.chunk_id, c.corpus, c.source_system, pack_id, c.origin,
                         c.writeback),
            )  # fmt: skip
    return list(out.values()), unknown


def sentence_hash(sentence: str) -> str:
    """How a sentence the app did not deliver is named (to a caller, on the audit log)."""
    return hashlib.sha256(sentence.encode()).hexdigest()


def shown_claims(claims: ClaimReport, withheld: bool) -> dict[str, Any]:
    """The claim check as a caller may see it: a sentence that was not delivered (every one
    of a withheld answer, an unsupported one of a delivered answer) only as its SHA-256, with
    the verdict and why; never the model's words the app withheld."""
    shown = claims.model_dump(mode="json")
    for claim in shown["claims"]:
        if withheld or not claim["supported"]:
            text = claim.pop("sentence")
            claim["sentence_sha256"] = sentence_hash(text)
            claim["unknown"], claim["missing"] = len(claim["unknown"]), len(claim["missing"])
    shown["unsupported"] = [sentence_hash(t) for t in claims.unsupported]
    return shown

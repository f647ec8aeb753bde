"""The live rights check (late-binding security trim), run on the ranked chunks of every pack.

The store filtered by the *stored* ACL, which the harvester syncs eventually: a revocation at
the source may not have reached it yet. Right before packing, the gateway asks each source
system (through its :class:`RightsChecker`) whether the caller may still read the documents
behind the ranked chunks. Fail-closed: a chunk is packed only when its document was
confirmed. A timeout, a connection error, a 5xx or 429, a malformed or partial answer, an
unknown account or document, or a checker that raises withholds the chunks it concerned.

What leaves the gateway is counts by reason (:class:`~govrag.types.Withheld`) and a status
per source system (:class:`~govrag.types.RightsCheckSummary`), never which chunks.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from govrag.store.protocol import GovernedReads
from govrag.types import Principal, RightsCheckSummary, SearchHit, Withheld

log = logging.getLogger("govrag.gateway")

#: Withheld reasons (and source statuses besides ``ok``).
REVOKED = "revoked"
UNKNOWN_DOCUMENT = "unknown_document"
UNKNOWN_ACCOUNT = "unknown_account"
SOURCE_UNAVAILABLE = "source_unavailable"
MALFORMED_RESPONSE = "malformed_response"
CHECKER_ERROR = "checker_error"


@dataclass
class RightsCheck:
    """A checker's answer for one source system: the confirmed documents, and a reason for
    every document it did not confirm (``status`` says why, when it failed as a whole)."""

    confirmed: set[str] = field(default_factory=set)
    denied: dict[str, str] = field(default_factory=dict)
    status: str = "ok"

    @classmethod
    def failed(cls, doc_ids: Sequence[str], reason: str) -> RightsCheck:
        return cls(set(), dict.fromkeys(doc_ids, reason), reason)


class RightsChecker(Protocol):
    """Confirms, at one source system, which documents the caller may read right now."""

    #: ``stored`` or ``http``: recorded in every pack's rights summary.
    kind: str

    def check(
        self, principal: Principal, source_system: str, doc_ids: Sequence[str]
    ) -> RightsCheck: ...


class StoredAclChecker:
    """For sources without a live API: the truth store's ACL as it is now.

    It still catches what changed since the search (or since a ranking was cached): a
    revocation synced in between, a deleted document.
    """

    kind = "stored"

    def __init__(self, store: GovernedReads) -> None:
        self.store = store

    def check(
        self, principal: Principal, source_system: str, doc_ids: Sequence[str]
    ) -> RightsCheck:
        readable = self.store.readable_documents(principal, source_system, doc_ids)
        return RightsCheck(
            confirmed={d for d in doc_ids if d in readable},
            denied={d: REVOKED for d in doc_ids if d not in readable},
        )


class RightsTrim:
    """Runs the right checker for each source system of a ranked list and keeps only what
    was confirmed, in order."""

    def __init__(
        self, default: RightsChecker, by_source: Mapping[str, RightsChecker] | None = None
    ) -> None:
        self.default = default
        self.by_source = dict(by_source or {})

    def checker(self, source_system: str) -> RightsChecker:
        return self.by_source.get(source_system, self.default)

    def trim(
        self, principal: Principal, hits: Sequence[SearchHit]
    ) -> tuple[list[SearchHit], Withheld, tuple[RightsCheckSummary, ...]]:
        by_source: dict[str, list[str]] = {}
        for hit in hits:
            docs = by_source.setdefault(hit.source_system, [])
            if hit.doc_id not in docs:
                docs.append(hit.doc_id)
        verdicts: dict[str, RightsCheck] = {}
        for source_system, doc_ids in sorted(by_source.items()):
            verdicts[source_system] = self.check(principal, source_system, doc_ids)
        kept: list[SearchHit] = []
        reasons: dict[str, int] = {}
        counts: dict[str, list[int]] = {ss: [0, 0] for ss in by_source}
        for hit in hits:
            verdict = verdicts[hit.source_system]
            counts[hit.source_system][0] += 1
            if hit.doc_id in verdict.confirmed and hit.doc_id not in verdict.denied:
                kept.append(hit)
                continue
            reason = verdict.denied.get(hit.doc_id, UNKNOWN_DOCUMENT)
            reasons[reason] = reasons.get(reason, 0) + 1
            counts[hit.source_system][1] += 1
        summaries = tuple(
            RightsCheckSummary(
                source_system=ss,
                checker=self.checker(ss).kind,
                status=verdicts[ss].status,
                checked=counts[ss][0],
                withheld=counts[ss][1],
            )
            for ss in sorted(by_source)
        )
        withheld = Withheld(count=sum(reasons.values()), reasons=dict(sorted(reasons.items())))
        return kept, withheld, summaries

    def confirms(self, principal: Principal, source_system: str, doc_id: str) -> bool:
        """Whether the source system confirms, now, that the caller may read ``doc_id``."""
        verdict = self.check(principal, source_system, [doc_id])
        return doc_id in verdict.confirmed and doc_id not in verdict.denied

    def check(self, principal: Principal, source_system: str, doc_ids: list[str]) -> RightsCheck:
        """The source system's answer for ``doc_ids``; a checker that raises or answers
        something else denies them all (fail closed)."""
        checker = self.checker(source_system)
        try:
            verdict = checker.check(principal, source_system, doc_ids)
            if not isinstance(verdict, RightsCheck):
                raise TypeError(f"checker returned {type(verdict).__name__}, not a RightsCheck")
            return verdict
        except Exception as exc:  # an unconfirmed right is a denial
            log.error("rights checker %s for %s failed: %s: %s", checker.kind, source_system,
                      type(exc).__name__, exc)  # fmt: skip
            return RightsCheck.failed(doc_ids, CHECKER_ERROR)

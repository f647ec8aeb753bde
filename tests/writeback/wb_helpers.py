"""Shared pieces of the write-back tests: a controllable clock, candidates, reference models.

The reference predicate and the brute-force BM25 here are written independently of
``govrag.writeback`` (from the seed and the issue), so the tests compare two implementations.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from govrag.store.analyzer import default_analyzer
from govrag.writeback import (
    AdmissionGate,
    AuditSink,
    ControlledWriteBackStore,
    RetrievalScope,
    WriteBackCandidate,
)

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
AGENT = "agent-memory"
SCOPE = RetrievalScope("acme", "session-1")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class AuditLog:
    """An audit sink that records every call (and can be told to fail)."""

    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    fail: bool = False

    def __call__(self, tenant: str, session: str, payload: dict[str, Any]) -> None:
        self.calls.append((tenant, session, payload))
        if self.fail:
            raise OSError("audit log unavailable")


def every_tenant(tenant: str) -> bool:
    """A tenant directory that knows every tenant: for the tests of the other rules."""
    return True


def make_store(
    clock: Clock | None = None, audit: AuditSink | None = None, agents: Iterable[str] = (AGENT,)
) -> ControlledWriteBackStore:
    return ControlledWriteBackStore.enabled(
        allowed_agents=list(agents), tenants=every_tenant, clock=clock or Clock(), audit=audit
    )


def candidate(**overrides: Any) -> WriteBackCandidate:
    """A candidate that every rule admits (at :data:`T0`), with ``overrides`` applied."""
    base = WriteBackCandidate(
        scope=SCOPE,
        source_turn_id="turn-1",
        agent_id=AGENT,
        gate=AdmissionGate.USER_CONFIRMED,
        content="The daily wire transfer limit for retail customers is 10,000 EUR.",
        confidence=0.9,
        expires_at=T0 + timedelta(days=1),
    )
    return replace(base, **overrides)


def expected_id(tenant: str, session: str, turn: str, agent: str, content: str) -> str:
    """The id as the issue defines it, computed by hand."""
    data = b"".join(
        struct.pack(">I", len(b)) + b
        for b in (s.encode("utf-8") for s in (tenant, session, turn, agent, content))
    )
    return "writeback:" + hashlib.sha256(data).hexdigest()


# -- the reference admission predicate -------------------------------------------------------------
def _usable(value: Any, limit_chars: int | None = None, limit_bytes: int | None = None) -> str:
    """'' if usable, else which way it fails: 'blank', 'utf8' or 'long'."""
    if type(value) is not str or value.strip() == "":
        return "blank"
    try:
        raw = value.encode("utf-8")
    except UnicodeError:
        return "utf8"
    if limit_chars is not None and len(value) > limit_chars:
        return "long"
    if limit_bytes is not None and len(raw) > limit_bytes:
        return "long"
    return ""


def reference_reason(
    c: Any,
    *,
    now: datetime,
    allowed: frozenset[str],
    live: Mapping[tuple[str, str], set[str]] | None = None,
) -> str:
    """The reason the seed's rules give for ``c`` (as the reason's string value).

    ``live`` maps scopes to their live ids (for ``supersedes``); caps are not modelled here.
    Only exact ``str`` values are produced by the generators, so ``type(...) is str`` suffices.
    """
    if not isinstance(c, WriteBackCandidate):
        return "not_a_candidate"
    if type(c.agent_id) is not str or c.agent_id not in allowed:
        return "agent_not_allowed"
    if c.gate is AdmissionGate.RAW_MODEL_OUTPUT or c.gate == "RAW_MODEL_OUTPUT":
        return "raw_model_output"
    if c.gate not in (
        AdmissionGate.USER_CONFIRMED,
        AdmissionGate.TOOL_VERIFIED,
        AdmissionGate.EVAL_GATED,
    ) or not isinstance(c.gate, AdmissionGate):
        return "gate_not_admitted"
    problem = _usable(c.content, limit_bytes=16384)
    if problem:
        return {"blank": "content_blank", "utf8": "text_not_utf8", "long": "content_too_large"}[
            problem
        ]
    for value in (c.source_turn_id, c.agent_id):
        problem = _usable(value, limit_chars=256)
        if problem:
            return {
                "blank": "identity_blank",
                "utf8": "text_not_utf8",
                "long": "identity_too_long",
            }[problem]
    scope = c.scope
    for value in (
        (scope.tenant, scope.session) if isinstance(scope, RetrievalScope) else (None, None)
    ):
        problem = _usable(value, limit_chars=256)
        if problem:
            return {"blank": "scope_blank", "utf8": "text_not_utf8", "long": "scope_too_long"}[
                problem
            ]
    conf = c.confidence
    if (
        type(conf) not in (int, float)
        or (type(conf) is float and math.isnan(conf))
        or not 0 <= conf <= 1
    ):
        return "confidence_invalid"
    exp = c.expires_at
    if not isinstance(exp, datetime) or exp.tzinfo is None or exp.utcoffset() is None:
        return "expires_at_invalid"
    try:
        exp.astimezone(UTC)  # an instant beyond datetime's range in UTC has no ISO text
    except OverflowError:
        return "expires_at_invalid"
    if exp <= now:
        return "expired"
    if c.supersedes is not None:
        own = expected_id(scope.tenant, scope.session, c.source_turn_id, c.agent_id, c.content)
        ids = (live or {}).get((scope.tenant, scope.session), set())
        if type(c.supersedes) is not str or c.supersedes == own or c.supersedes not in ids:
            return "supersedes_not_in_scope"
    return "admitted"


# -- brute-force BM25 ------------------------------------------------------------------------------
def brute_bm25(
    docs: Mapping[str, str], query: str, k1: float = 1.2, b: float = 0.75
) -> dict[str, float]:
    """Score every doc from scratch (Lucene idf, tantivy weight); only docs with a match."""
    analyzer = default_analyzer()
    terms: dict[str, Sequence[str]] = {i: analyzer.analyze(t) for i, t in docs.items()}
    n = len(terms)
    if n == 0:
        return {}
    avgdl = sum(len(t) for t in terms.values()) / n
    out: dict[str, float] = {}
    for q in dict.fromkeys(analyzer.analyze(query)):
        df = sum(1 for t in terms.values() if q in t)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for doc_id, t in terms.items():
            tf = Counter(t)[q]
            if tf:
                denom = tf + k1 * (1 - b + b * len(t) / avgdl)
                out[doc_id] = out.get(doc_id, 0.0) + idf * (k1 + 1) * tf / denom
    return out


def ranked(scores: Mapping[str, float]) -> list[str]:
    return [i for i, _ in sorted(scores.items(), key=lambda p: (-p[1], p[0]))]

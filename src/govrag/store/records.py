"""Value types shared by the store's modules (kept apart so no module imports a sibling's)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

EVERYONE = "*"
_SEP = "\x1f"  # unit separator: rejected in ids at ingest, so tokens are unambiguous


def principal_token(source_system: str, principal_id: str) -> str:
    """The index token of an ACL principal; ``*`` (everyone in the tenant) stays ``*``."""
    if principal_id == EVERYONE:
        return EVERYONE
    return f"{source_system}{_SEP}{principal_id}"


def token_pair(token: str) -> tuple[str, str]:
    """The ``(source_system, principal_id)`` ACL row a principal token matches."""
    if token == EVERYONE:
        return (EVERYONE, EVERYONE)
    source_system, _, principal_id = token.partition(_SEP)
    return (source_system, principal_id)


@dataclass(frozen=True)
class IndexedChunk:
    """One searchable chunk as the derived indexes hold it."""

    chunk_id: int
    doc_id: int
    terms: str
    acl_tokens: tuple[str, ...]
    corpus: str
    classification: int
    vector: npt.NDArray[np.float32] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class AccessScope:
    """What a caller may read: resolved principal tokens, classification ceiling, corpora.

    ``tokens`` is empty for an unknown principal or one with no identity: such a caller
    matches nothing.
    """

    tenant: str
    tokens: frozenset[str]
    ceiling: int
    corpora: tuple[str, ...]
    #: Whether the legs must test the corpus / the ceiling. False when the predicate cannot
    #: exclude anything in this tenant (every corpus requested; nothing above the ceiling),
    #: which spares the engines an intersection with an all-matching filter.
    filter_corpora: bool = True
    filter_ceiling: bool = True


def titled(title: str, text: str) -> str:
    """A chunk as it is embedded and read for entities: its document's title (which often
    names the subject, the counterparty) above its text."""
    return f"{title}\n\n{text}" if title else text


@dataclass(frozen=True)
class ChunkRow:
    """A chunk to write. Non-indexed chunks are parents (sections) kept for context."""

    ordinal: int
    text: str
    parent: int | None
    indexed: bool
    token_count: int


@dataclass(frozen=True)
class DocumentWrite:
    """A fully prepared document: validated, chunked and (for changed content) embedded."""

    source_system: str
    external_id: str
    corpus: str
    title: str
    text_hash: str
    record_hash: str
    author: str | None
    acl: tuple[str, ...]
    classification: int
    authority_tier: int
    updated_at: str | None
    metadata_json: str
    metadata_rows: tuple[tuple[str, str | None, float | None], ...]
    #: None when the content is unchanged and the stored chunks and vectors are kept.
    chunks: tuple[ChunkRow, ...] | None
    #: One row per indexed chunk, in chunk order; None without an embedder.
    vectors: npt.NDArray[np.float32] | None = field(default=None, compare=False)
    embedder: str | None = None
    #: The configured source writing it (``None``: no configured source, an operator's feed,
    #: which may write any document and leaves its owner as it is). A source changes only
    #: documents it wrote or that no source owns (:func:`~govrag.store.database.claim`).
    writer: str | None = None
    #: When this version is in effect from (its ``effective_at``, else its ``updated_at``)
    #: and its ``updated_at``, both as :func:`~govrag.store.clock.utc_instant`.
    effective_at: str | None = None
    updated_utc: str | None = None
    #: External ids (same source system) of the versions this one replaces.
    supersedes: tuple[str, ...] = ()


@dataclass(frozen=True)
class StoredHashes:
    text_hash: str
    record_hash: str


@dataclass
class IndexReport:
    """What ``govrag index verify`` found for one tenant."""

    tenant: str
    truth_chunks: int
    lexical_chunks: int
    missing: int
    extra: int
    pending_outbox: int
    #: PostgreSQL: vector rows whose copy of their document's corpus, classification or
    #: ACL tokens differs from the truth (triggers keep them equal; 0 on SQLite).
    vector_access_drift: int = 0
    #: Lexical index entries whose document, corpus, classification or ACL tokens differ
    #: from the truth (a stale or tampered index; repaired by a rebuild).
    stale_access: int = 0

    @property
    def differences(self) -> int:
        return self.missing + self.extra + self.stale_access + self.vector_access_drift

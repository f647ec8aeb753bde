"""The store's contracts: one narrow protocol per consumer, and ``KnowledgeStore``, all of them.

A query with an identity goes down; a ranked list of candidates under access rights comes
up. Access rules are never a caller filter: the backend ANDs the caller's ACL predicate
inside every search leg.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from govrag.embed.base import Embedder
from govrag.settings import CurationSettings, SearchSettings
from govrag.store.audit import AuditChain, AuditEvent, AuditObserver, ChainReport
from govrag.store.curation import CurationReport
from govrag.store.records import DocumentWrite, IndexReport, StoredHashes
from govrag.store.sessions import PinRecord, SessionRow
from govrag.types import DocumentInfo, Principal, SearchRequest, SearchResult


class GovernedReads(Protocol):
    """What the gateway and every edge receive: search and reads *under a principal*.

    Every member that returns document content (chunk text, titles, which documents exist)
    takes the caller's :class:`Principal` and applies its rights; the rest return counters
    that change with rights or content (cache keys), never content. Access-free primitives
    (rankings without the caller's tokens, chunk reads by id) are not here nor public on any
    store: see :class:`govrag.store.search.SearchBackend`.
    """

    def search(self, principal: Principal, request: SearchRequest) -> SearchResult: ...
    def readable_documents(
        self, principal: Principal, source_system: str, external_ids: Sequence[str]
    ) -> set[str]: ...
    def readable_document(
        self, principal: Principal, source_system: str, external_id: str
    ) -> DocumentInfo | None: ...
    def is_empty_for(self, principal: Principal, corpora: Sequence[str]) -> bool: ...
    def generation(self, tenant: str) -> tuple[int, int]: ...
    def acl_epoch(self, tenant: str) -> int: ...


class IngestWrites(Protocol):
    """What ingest (the harvester's side) writes: identities, groups, documents, ACLs."""

    def put_identity(
        self,
        tenant: str,
        email: str,
        source_system: str,
        account_id: str,
        *,
        previous_email: str | None = None,
        writer: str | None = None,
    ) -> bool: ...
    def remove_identity(
        self,
        tenant: str,
        email: str,
        source_system: str,
        account_id: str,
        *,
        writer: str | None = None,
    ) -> bool: ...
    def account_owner(self, tenant: str, source_system: str, account_id: str) -> str | None: ...
    def identity_writer(self, tenant: str, source_system: str, account_id: str) -> str | None: ...
    def put_group(
        self,
        tenant: str,
        source_system: str,
        group_id: str,
        members: list[str],
        *,
        writer: str | None = None,
    ) -> bool: ...
    def group_writer(self, tenant: str, source_system: str, group_id: str) -> str | None: ...
    def stored_hashes(
        self, tenant: str, keys: list[tuple[str, str]]
    ) -> dict[tuple[str, str], StoredHashes]: ...
    def put_document(self, tenant: str, doc: DocumentWrite) -> str: ...
    def delete_document(
        self, tenant: str, source_system: str, external_id: str, *, writer: str | None = None
    ) -> bool: ...
    def document_writer(self, tenant: str, source_system: str, external_id: str) -> str | None: ...


class AuditWriter(Protocol):
    """Where a layer records its audit events (validation, the PEP, sessions)."""

    def append_audit(
        self,
        tenant: str,
        kind: str,
        payload: dict[str, Any],
        *,
        request_id: str,
        session_id: str,
    ) -> AuditEvent: ...


class AuditReader(Protocol):
    """What replay and the escalation queue read: a tenant's events, or one request's."""

    def audit_events(self, tenant: str, *, request_id: str | None = None) -> list[AuditEvent]: ...


class RequestLog(AuditWriter, AuditReader, Protocol):
    """The PEP's: it records decisions and packs, and reads back its own request's events
    (a request's session memory joins once)."""


class AuditChains(Protocol):
    """What the audit anchor verifies and signs: each tenant's chain, whole."""

    def audit_chain(self, tenant: str) -> AuditChain: ...
    def audit_tenants(self) -> list[str]: ...


class AuditLog(RequestLog, AuditChains, Protocol):
    """The audit log: append-only, hash-chained per tenant; what verify and replay read."""

    def audit_session_pinned(self, tenant: str, session_id: str) -> AuditEvent | None: ...
    def verify_audit(self, tenant: str) -> ChainReport: ...
    def observe_audit(self, observer: AuditObserver) -> None: ...


class SessionStore(Protocol):
    """Sessions and the route each pins."""

    def create_session(
        self, tenant: str, session_id: str, pin: PinRecord, *, request_id: str
    ) -> tuple[SessionRow, AuditEvent]: ...
    def get_session(self, tenant: str, session_id: str) -> SessionRow | None: ...


class SessionRecords(SessionStore, AuditWriter, Protocol):
    """The session manager's: sessions, and the audit events of resuming one."""


class MarkerLedger(AuditWriter, Protocol):
    """The hidden-item marker gate's: the marker budget, and the audit event of each marker."""

    def consume_marker(
        self, tenant: str, email: str, *, window: int, budget: int
    ) -> int | None: ...


class AccessLedger(Protocol):
    """Access counting, curation and the hidden-item marker's budget."""

    def record_access(
        self, tenant: str, documents: Sequence[tuple[str, str]], *, kind: str = "answer"
    ) -> None: ...
    def access_counts(self, tenant: str) -> dict[str, int]: ...
    def consume_marker(
        self, tenant: str, email: str, *, window: int, budget: int
    ) -> int | None: ...
    def curate(
        self, tenant: str, settings: CurationSettings | None = None, *, now: datetime | None = None
    ) -> CurationReport: ...


class StoreAdmin(Protocol):
    """The operator's side: tenants and corpora, counts, incidents, derived indexes."""

    def tenants(self) -> list[str]: ...
    def schema_version(self) -> int: ...
    def list_corpora(self, tenant: str) -> list[tuple[str, str]]: ...
    def describe_corpus(self, tenant: str, corpus: str, description: str) -> None: ...
    def is_empty(self, tenant: str) -> bool: ...
    def stats(self, tenant: str) -> dict[str, int]: ...
    def incidents(self, tenant: str) -> list[tuple[str, dict[str, object]]]: ...
    def drop_tenant(self, tenant: str) -> int: ...
    def sync_indexes(self, tenant: str, *, vectors: bool = True) -> None: ...
    def verify_index(self, tenant: str) -> IndexReport: ...
    def rebuild_index(self, tenant: str) -> int: ...
    def back_up(self, dest: Path) -> None: ...


@runtime_checkable
class KnowledgeStore(
    GovernedReads, IngestWrites, AuditLog, SessionStore, AccessLedger, StoreAdmin, Protocol
):
    """A whole store: what opens it (a deployment) holds, and hands each consumer its part."""

    backend: str
    #: Embeds queries for the vector leg; ingest embeds documents with the same model.
    embedder: Embedder | None
    #: Read by every search (fusion depths, marker, vector paths).
    search_settings: SearchSettings

    def source_accounts(self, tenant: str, email: str, source_system: str) -> list[str]: ...
    def close(self) -> None: ...

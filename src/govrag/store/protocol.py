"""The ``KnowledgeStore`` contract every backend implements (SQLite, PostgreSQL).

A query with an identity goes down; a ranked list of candidates under access rights comes
up. Access rules are never a caller filter: the backend ANDs the caller's ACL predicate
inside every search leg.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from govrag.embed.base import Embedder
from govrag.settings import CurationSettings, SearchSettings
from govrag.store.audit import AuditChain, AuditEvent, AuditObserver, ChainReport
from govrag.store.curation import CurationReport
from govrag.store.records import DocumentWrite, IndexReport, StoredHashes
from govrag.store.sessions import SessionRow
from govrag.types import Principal, SearchRequest, SearchResult


@runtime_checkable
class KnowledgeStore(Protocol):
    backend: str
    #: Embeds queries for the vector leg; ingest embeds documents with the same model.
    embedder: Embedder | None
    #: Read by every search (fusion depths, marker, vector paths).
    search_settings: SearchSettings

    # catalogue
    def tenants(self) -> list[str]: ...
    def list_corpora(self, tenant: str) -> list[tuple[str, str]]: ...
    def describe_corpus(self, tenant: str, corpus: str, description: str) -> None: ...
    def is_empty(self, tenant: str) -> bool: ...
    def acl_epoch(self, tenant: str) -> int: ...
    def generation(self, tenant: str) -> tuple[int, int]: ...
    def stats(self, tenant: str) -> dict[str, int]: ...
    def incidents(self, tenant: str) -> list[tuple[str, dict[str, object]]]: ...

    # writes (the harvester's side)
    def put_identity(
        self,
        tenant: str,
        email: str,
        source_system: str,
        account_id: str,
        *,
        previous_email: str | None = None,
    ) -> bool: ...
    def remove_identity(
        self, tenant: str, email: str, source_system: str, account_id: str
    ) -> bool: ...
    def account_owner(self, tenant: str, source_system: str, account_id: str) -> str | None: ...
    def put_group(
        self, tenant: str, source_system: str, group_id: str, members: Sequence[str]
    ) -> bool: ...
    def stored_hashes(
        self, tenant: str, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], StoredHashes]: ...
    def put_document(self, tenant: str, doc: DocumentWrite) -> str: ...
    def delete_document(self, tenant: str, source_system: str, external_id: str) -> bool: ...
    def drop_tenant(self, tenant: str) -> int: ...
    def record_access(
        self, tenant: str, documents: Sequence[tuple[str, str]], *, kind: str = "answer"
    ) -> None: ...
    def access_counts(self, tenant: str) -> dict[str, int]: ...
    def curate(
        self, tenant: str, settings: CurationSettings | None = None, *, now: datetime | None = None
    ) -> CurationReport: ...

    # derived indexes
    def sync_indexes(self, tenant: str, *, vectors: bool = True) -> None: ...
    def verify_index(self, tenant: str) -> IndexReport: ...
    def rebuild_index(self, tenant: str) -> int: ...

    # reads
    def search(self, principal: Principal, request: SearchRequest) -> SearchResult: ...
    def readable_documents(
        self, principal: Principal, source_system: str, external_ids: Sequence[str]
    ) -> set[str]: ...
    def source_accounts(self, tenant: str, email: str, source_system: str) -> list[str]: ...

    # the audit log (append-only, hash-chained per tenant)
    def append_audit(
        self,
        tenant: str,
        kind: str,
        payload: dict[str, Any],
        *,
        request_id: str,
        session_id: str,
    ) -> AuditEvent: ...
    def audit_events(self, tenant: str, *, request_id: str | None = None) -> list[AuditEvent]: ...
    def verify_audit(self, tenant: str) -> ChainReport: ...
    def audit_chain(self, tenant: str) -> AuditChain: ...
    def audit_tenants(self) -> list[str]: ...
    def observe_audit(self, observer: AuditObserver) -> None: ...

    # sessions (the pinned route of each)
    def create_session(
        self,
        tenant: str,
        session_id: str,
        *,
        sub: str,
        route_id: str,
        retrieval_json: str,
        route_table_version: str,
        request_id: str,
    ) -> tuple[SessionRow, AuditEvent]: ...
    def get_session(self, tenant: str, session_id: str) -> SessionRow | None: ...

    def close(self) -> None: ...

"""The knowledge store every layer holds: one facade over the repositories of one database.

Both backends are this class; they differ only in what they hand it (``sqlite.py``,
``postgres.py``): the :class:`~govrag.store.database.Database`, the vector leg, the lock that
serialises the derived indexes, and whether the hidden-item marker may rank on another
thread. Each public member delegates to the repository that owns it (``compose.py`` wires
them); the access-free search primitives are reachable only as ``_search_backend()``,
white-box, for tests and benchmarks.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Self

from govrag.embed.base import Embedder
from govrag.settings import CurationSettings, SearchSettings
from govrag.store.audit import AuditChain, AuditEvent, AuditObserver, ChainReport
from govrag.store.compose import compose
from govrag.store.curation import CurationReport
from govrag.store.database import Database
from govrag.store.derived import VectorLeg
from govrag.store.dialect import Dialect
from govrag.store.records import DocumentWrite, IndexReport, StoredHashes
from govrag.store.search import SearchBackend, SearchConfig
from govrag.store.sessions import PinRecord, SessionRow
from govrag.types import DocumentInfo, Principal, SearchRequest, SearchResult


class Store:
    """A knowledge store: search and reads under a principal, ingest writes, the audit log,
    sessions, the access ledger and administration, each owned by one repository."""

    #: ``"sqlite"`` or ``"postgres"``.
    backend: str

    def __init__(
        self,
        db: Database,
        vectors: VectorLeg,
        config: SearchConfig,
        *,
        lock: threading.RLock,
        index_dir: Path | None,
        server_vectors: bool,
    ) -> None:
        self._db = db
        self._vectors = vectors
        self._config = config
        #: Where this process keeps its derived lexical indexes (None: in memory).
        self.index_dir = index_dir
        self._parts = compose(
            db, vectors, config,
            lock=lock, index_dir=index_dir, server_vectors=server_vectors,
        )  # fmt: skip

    @property
    def dialect(self) -> Dialect:
        return self._db.dialect

    @property
    def embedder(self) -> Embedder | None:
        """Embeds queries for the vector leg; ingest embeds documents with the same model."""
        return self._config.embedder

    @embedder.setter
    def embedder(self, embedder: Embedder | None) -> None:
        self._config.embedder = embedder

    @property
    def search_settings(self) -> SearchSettings:
        """Read by every search (fusion depths, marker, vector paths)."""
        return self._config.settings

    @search_settings.setter
    def search_settings(self, settings: SearchSettings) -> None:
        self._config.settings = settings

    def close(self) -> None:
        self._parts.indexes.release()
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _search_backend(self) -> SearchBackend:
        """The search primitives, white-box (tests, benchmarks): see :class:`SearchBackend`."""
        return self._parts.primitives.backend()

    # -- governed reads (GovernedReads) -----------------------------------------------------
    def search(self, principal: Principal, request: SearchRequest) -> SearchResult:
        return self._parts.reads.search(principal, request)

    def readable_documents(
        self, principal: Principal, source_system: str, external_ids: Sequence[str]
    ) -> set[str]:
        return self._parts.reads.readable_documents(principal, source_system, external_ids)

    def readable_document(
        self, principal: Principal, source_system: str, external_id: str
    ) -> DocumentInfo | None:
        return self._parts.reads.readable_document(principal, source_system, external_id)

    def is_empty_for(self, principal: Principal, corpora: Sequence[str]) -> bool:
        return self._parts.reads.is_empty_for(principal, corpora)

    def generation(self, tenant: str) -> tuple[int, int]:
        return self._parts.reads.generation(tenant)

    def acl_epoch(self, tenant: str) -> int:
        return self._parts.reads.acl_epoch(tenant)

    # -- identities and groups (IngestWrites) -----------------------------------------------
    def put_identity(
        self,
        tenant: str,
        email: str,
        source_system: str,
        account_id: str,
        *,
        previous_email: str | None = None,
        writer: str | None = None,
    ) -> bool:
        return self._parts.identities.put_identity(
            tenant, email, source_system, account_id, previous_email=previous_email, writer=writer
        )

    def remove_identity(
        self,
        tenant: str,
        email: str,
        source_system: str,
        account_id: str,
        *,
        writer: str | None = None,
    ) -> bool:
        return self._parts.identities.remove_identity(
            tenant, email, source_system, account_id, writer=writer
        )

    def identity_writer(self, tenant: str, source_system: str, account_id: str) -> str | None:
        return self._parts.identities.identity_writer(tenant, source_system, account_id)

    def account_owner(self, tenant: str, source_system: str, account_id: str) -> str | None:
        return self._parts.identities.account_owner(tenant, source_system, account_id)

    def put_group(
        self,
        tenant: str,
        source_system: str,
        group_id: str,
        members: Sequence[str],
        *,
        writer: str | None = None,
    ) -> bool:
        return self._parts.identities.put_group(
            tenant, source_system, group_id, members, writer=writer
        )

    def group_writer(self, tenant: str, source_system: str, group_id: str) -> str | None:
        return self._parts.identities.group_writer(tenant, source_system, group_id)

    def source_accounts(self, tenant: str, email: str, source_system: str) -> list[str]:
        return self._parts.identities.source_accounts(tenant, email, source_system)

    # -- documents and ACLs (IngestWrites, StoreAdmin.drop_tenant) --------------------------
    def stored_hashes(
        self, tenant: str, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], StoredHashes]:
        return self._parts.documents.stored_hashes(tenant, keys)

    def put_document(self, tenant: str, doc: DocumentWrite) -> str:
        return self._parts.documents.put_document(tenant, doc)

    def delete_document(
        self, tenant: str, source_system: str, external_id: str, *, writer: str | None = None
    ) -> bool:
        return self._parts.documents.delete_document(
            tenant, source_system, external_id, writer=writer
        )

    def document_writer(self, tenant: str, source_system: str, external_id: str) -> str | None:
        return self._parts.documents.document_writer(tenant, source_system, external_id)

    def drop_tenant(self, tenant: str) -> int:
        return self._parts.documents.drop_tenant(tenant)

    # -- audit (AuditLog) -------------------------------------------------------------------
    def append_audit(
        self,
        tenant: str,
        kind: str,
        payload: dict[str, Any],
        *,
        request_id: str,
        session_id: str,
    ) -> AuditEvent:
        return self._parts.audit.append_audit(
            tenant, kind, payload, request_id=request_id, session_id=session_id
        )

    def audit_events(self, tenant: str, *, request_id: str | None = None) -> list[AuditEvent]:
        return self._parts.audit.audit_events(tenant, request_id=request_id)

    def audit_session_pinned(self, tenant: str, session_id: str) -> AuditEvent | None:
        return self._parts.audit.audit_session_pinned(tenant, session_id)

    def audit_chain(self, tenant: str) -> AuditChain:
        return self._parts.audit.audit_chain(tenant)

    def verify_audit(self, tenant: str) -> ChainReport:
        return self._parts.audit.verify_audit(tenant)

    def audit_tenants(self) -> list[str]:
        return self._parts.audit.audit_tenants()

    def observe_audit(self, observer: AuditObserver) -> None:
        self._parts.audit.observe_audit(observer)

    # -- sessions (SessionStore) ------------------------------------------------------------
    def create_session(
        self, tenant: str, session_id: str, pin: PinRecord, *, request_id: str
    ) -> tuple[SessionRow, AuditEvent]:
        return self._parts.sessions.create_session(tenant, session_id, pin, request_id=request_id)

    def get_session(self, tenant: str, session_id: str) -> SessionRow | None:
        return self._parts.sessions.get_session(tenant, session_id)

    # -- access and curation (AccessLedger) -------------------------------------------------
    def record_access(
        self, tenant: str, documents: Sequence[tuple[str, str]], *, kind: str = "answer"
    ) -> None:
        self._parts.ledger.record_access(tenant, documents, kind=kind)

    def access_counts(self, tenant: str) -> dict[str, int]:
        return self._parts.ledger.access_counts(tenant)

    def consume_marker(self, tenant: str, email: str, *, window: int, budget: int) -> int | None:
        return self._parts.ledger.consume_marker(tenant, email, window=window, budget=budget)

    def curate(
        self, tenant: str, settings: CurationSettings | None = None, *, now: datetime | None = None
    ) -> CurationReport:
        return self._parts.ledger.curate(tenant, settings, now=now)

    # -- tenants, corpora, counts, incidents (StoreAdmin) -----------------------------------
    def tenants(self) -> list[str]:
        return self._parts.catalogue.tenants()

    def schema_version(self) -> int:
        return self._parts.catalogue.schema_version()

    def list_corpora(self, tenant: str) -> list[tuple[str, str]]:
        return self._parts.catalogue.list_corpora(tenant)

    def describe_corpus(self, tenant: str, corpus: str, description: str) -> None:
        self._parts.catalogue.describe_corpus(tenant, corpus, description)

    def is_empty(self, tenant: str) -> bool:
        return self._parts.catalogue.is_empty(tenant)

    def stats(self, tenant: str) -> dict[str, int]:
        return self._parts.catalogue.stats(tenant)

    def incidents(self, tenant: str) -> list[tuple[str, dict[str, object]]]:
        return self._parts.catalogue.incidents(tenant)

    def record_incident(self, tenant: str, kind: str, detail: dict[str, object]) -> None:
        self._parts.catalogue.record_incident(tenant, kind, detail)

    # -- derived indexes (StoreAdmin) -------------------------------------------------------
    def sync_indexes(self, tenant: str, *, vectors: bool = True) -> None:
        self._parts.indexes.sync_indexes(tenant, vectors=vectors)

    def verify_index(self, tenant: str) -> IndexReport:
        return self._parts.indexes.verify_index(tenant)

    def rebuild_index(self, tenant: str) -> int:
        # The graph's rows are derived from the chunks too, with the glossary of today.
        self._parts.documents.rederive_graph(tenant)
        return self._parts.indexes.rebuild_index(tenant)

    def back_up(self, dest: Path) -> None:
        """The truth store as one consistent snapshot in the new file ``dest`` (SQLite: a
        database file; PostgreSQL: a ``pg_dump`` archive). Derived indexes are not in it:
        they are rebuilt from it."""
        self._db.back_up(dest)

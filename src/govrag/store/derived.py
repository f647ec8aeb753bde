"""Derived search indexes, the same code on every backend: outbox apply, rebuild, verify.

The SQL tables are the truth. Each process derives its own tantivy index per tenant (on disk
under ``index_dir``, or in memory) from them and catches up from the index outbox before it
searches, so any number of processes, on any machines, serve one truth store consistently.

The vector leg differs by backend and is given to :class:`DerivedIndexes` as a
:class:`VectorLeg` (composition, not a subclass): SQLite derives an in-memory matrix through
the same outbox (``sqlite_vectors.py``); PostgreSQL searches vectors in the database and only
has copies of access columns to check and repair (``pg_vectors.py``).
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Protocol

from govrag.store.database import Database
from govrag.store.lexical import LexicalIndex
from govrag.store.lexical_format import access_digest
from govrag.store.outbox import outbox_head, pending, snapshot, tenant_chunks
from govrag.store.records import IndexReport
from govrag.store.search import VectorLegFn


class VectorLeg(Protocol):
    """A backend's vector search, and what keeping it in step with the truth takes."""

    def sync(self, tenant: str, head: int) -> None:
        """Bring a derived vector index of the tenant up to outbox position ``head``."""
        ...

    def reset(self, tenant: str) -> None:
        """Drop this process's derived vector state of the tenant (after a lexical rebuild
        or a dropped tenant); the next :meth:`sync` derives it anew."""
        ...

    def access_drift(self, tenant: str, *, repair: bool) -> int:
        """Vector rows whose copy of their document's access columns differs from the truth
        (set right when ``repair``); 0 where no such copies are kept."""
        ...

    @property
    def leg(self) -> VectorLegFn:
        """The search primitive (its method): private to the search backend (``acl=False``
        ranks without the caller's rights)."""
        ...


class DerivedIndexes:
    """Keeps this process's view of the derived indexes in step with the truth store."""

    def __init__(
        self, db: Database, vectors: VectorLeg, *, lock: threading.RLock, index_dir: Path | None
    ) -> None:
        self._db = db
        self._vectors = vectors
        #: Serialises everything that touches the derived indexes, searches included (they
        #: are mutable in process). On SQLite it is the connection's own lock.
        self.lock = lock
        #: Where this process keeps its lexical indexes (None: in memory).
        self.index_dir = index_dir
        self._lexical: dict[str, LexicalIndex] = {}

    def lexical_index(self, tenant: str) -> tuple[LexicalIndex, bool]:
        """The tenant's lexical index and whether it was just created (empty)."""
        index = self._lexical.get(tenant)
        fresh = False
        if index is None:
            path = None if self.index_dir is None else self.index_dir / _tenant_dir(tenant)
            index = LexicalIndex(path)
            fresh = index.created
            self._lexical[tenant] = index
        return index, fresh

    def release(self) -> None:
        """Drop this process's derived vector state of every tenant it searched (the store is
        closing): what it keeps in memory goes back to the process."""
        with self.lock:
            for tenant in list(self._lexical):
                self._vectors.reset(tenant)

    def forget(self, tenant: str) -> None:
        """Drop this process's derived indexes of a tenant (its rows are gone)."""
        with self.lock:
            index, _ = self.lexical_index(tenant)
            index.apply((), [], 0, reset=True)  # empty, at outbox position 0
            self._vectors.reset(tenant)

    def sync_indexes(self, tenant: str, *, vectors: bool = True) -> None:
        """Apply pending outbox entries to this process's view of the derived indexes."""
        with self.lock:
            head = outbox_head(self._db, tenant)
            lexical, fresh = self.lexical_index(tenant)
            # An index ahead of the outbox belongs to other data (a recreated database).
            if (fresh and head > 0) or lexical.loaded_seq > head:
                self._rebuild_lexical(tenant)
            elif lexical.loaded_seq < head and lexical.refresh() < head:
                doc_ids, chunks, applied = pending(
                    self._db, tenant, lexical.applied_seq(), vectors=False
                )
                lexical.apply(doc_ids, chunks, applied)
            if vectors:
                self._vectors.sync(tenant, head)

    def rebuild_index(self, tenant: str) -> int:
        """Recreate the tenant's lexical index from the truth store, and set any vector row's
        access columns that differ from it (PostgreSQL). Returns chunks indexed."""
        indexed = self._rebuild_lexical(tenant)
        self._vectors.access_drift(tenant, repair=True)
        return indexed

    def _rebuild_lexical(self, tenant: str) -> int:
        """This process's lexical index of the tenant, anew from the truth store (also a new
        process's first sync: that one must not scan, let alone write, every vector row)."""
        lexical, _ = self.lexical_index(tenant)
        chunks, head = snapshot(self._db, tenant, vectors=False)
        lexical.apply((), chunks, head, reset=True)
        self._vectors.reset(tenant)
        return len(chunks)

    def verify_index(self, tenant: str) -> IndexReport:
        """Compare the tenant's derived indexes with the truth store (after applying the
        outbox): the lexical index's chunks and, per chunk, what its access predicate reads
        (document, corpus, classification, ACL tokens); on PostgreSQL also the vector rows'
        access columns."""
        self.sync_indexes(tenant, vectors=False)
        lexical, _ = self.lexical_index(tenant)
        with self._db.tx(tenant, read=True) as conn:
            truth = {
                c.chunk_id: access_digest(c.doc_id, c.corpus, c.classification, c.acl_tokens)
                for c in tenant_chunks(conn, self._db.dialect, tenant, vectors=False, terms=False)
            }
        have = lexical.all_chunks()
        return IndexReport(
            tenant=tenant,
            truth_chunks=len(truth),
            lexical_chunks=len(have),
            missing=len(truth.keys() - have.keys()),
            extra=len(have.keys() - truth.keys()),
            stale_access=sum(1 for c, d in have.items() if c in truth and truth[c] != d),
            pending_outbox=max(0, outbox_head(self._db, tenant) - lexical.applied_seq()),
            vector_access_drift=self._vectors.access_drift(tenant, repair=False),
        )


def _tenant_dir(tenant: str) -> str:
    """A filesystem-safe, collision-free directory name for a tenant id."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in tenant)[:40]
    return f"{safe}-{hashlib.sha256(tenant.encode()).hexdigest()[:12]}"

"""How a knowledge store is put together: one Database, one repository per concept.

Both backends compose the same repositories; what differs is given: the
:class:`~govrag.store.database.Database`, the :class:`~govrag.store.derived.VectorLeg`, the
lock that serialises the derived indexes (SQLite: its connection's), and whether the marker
may rank on another thread. The facades (``sqlite.py``, ``postgres.py``) build these parts
here and delegate each public member to the repository that owns it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from govrag.store.audit import AuditRepository
from govrag.store.catalogue import CatalogueRepository
from govrag.store.database import Database
from govrag.store.derived import DerivedIndexes, VectorLeg
from govrag.store.documents import DocumentRepository
from govrag.store.identities import IdentityRepository
from govrag.store.ledger import LedgerRepository
from govrag.store.reads import ReadRepository
from govrag.store.search import SearchConfig
from govrag.store.search_primitives import SearchPrimitives
from govrag.store.sessions import SessionRepository


@dataclass(frozen=True)
class StoreParts:
    """The repositories of one store, over one database."""

    catalogue: CatalogueRepository
    identities: IdentityRepository
    documents: DocumentRepository
    audit: AuditRepository
    sessions: SessionRepository
    ledger: LedgerRepository
    indexes: DerivedIndexes
    #: Private to the governed reads and white-box tests (``_search_backend``).
    primitives: SearchPrimitives
    reads: ReadRepository


def compose(
    db: Database,
    vectors: VectorLeg,
    config: SearchConfig,
    *,
    lock: threading.RLock,
    index_dir: Path | None,
    server_vectors: bool,
) -> StoreParts:
    """The repositories over ``db``, wired to each other."""
    catalogue = CatalogueRepository(db)
    indexes = DerivedIndexes(db, vectors, lock=lock, index_dir=index_dir)
    audit = AuditRepository(db)
    primitives = SearchPrimitives(
        db, catalogue, indexes, vectors, config, server_vectors=server_vectors
    )
    return StoreParts(
        catalogue=catalogue,
        identities=IdentityRepository(db),
        documents=DocumentRepository(db, indexes, config),
        audit=audit,
        sessions=SessionRepository(db, audit),
        ledger=LedgerRepository(db),
        indexes=indexes,
        primitives=primitives,
        reads=ReadRepository(db, catalogue, indexes, primitives),
    )

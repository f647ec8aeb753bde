"""The SQLite truth store (stdlib ``sqlite3``, WAL): the embedded default backend.

Writes, derived lexical indexes and reads are the shared SQL parts (``sql_*.py``); this
module adds what is SQLite's own: identity resolution pinned to the member index, and the
vector leg as an in-memory matrix per tenant derived from the outbox like the lexical index.
"""

from __future__ import annotations

from collections.abc import Sequence

from govrag.embed.base import FloatArray
from govrag.store.records import AccessScope
from govrag.store.sessions import SQLSessions
from govrag.store.sql_access import SQLAccess
from govrag.store.sql_reads import SQLReads, leg_args
from govrag.store.sql_writes import SQLWrites
from govrag.store.sqlite_base import SQLiteBase
from govrag.store.vectors import VectorIndex


class SQLiteStore(SQLReads, SQLWrites, SQLAccess, SQLSessions, SQLiteBase):
    """Knowledge store on one SQLite file (or ``:memory:``)."""

    backend = "sqlite"

    def _after_open(self) -> None:
        # Repair on open: a crash between an SQL commit and the index write left outbox rows
        # the lexical index has not applied yet.
        for tenant in self.tenants():
            self.sync_indexes(tenant, vectors=False)

    # -- the vector leg: a matrix per tenant, derived from the outbox ------------------------
    def _sync_vectors(self, tenant: str, head: int) -> None:
        if self.embedder is None:
            return
        index = self._vectors.get(tenant)
        if index is None:
            space = self._vector_space(tenant)
            if space is None:
                return
            chunks, applied = self._snapshot(tenant, True)
            index = VectorIndex(space[1])
            index.replace((), chunks)
            index.applied_seq = applied
            self._vectors[tenant] = index
        elif index.applied_seq < head:
            doc_ids, chunks, applied = self._pending(tenant, index.applied_seq, True)
            index.replace(doc_ids, chunks)
            index.applied_seq = applied

    def _after_rebuild(self, tenant: str) -> None:
        self._vectors.pop(tenant, None)

    def _vector_leg(
        self,
        scope: AccessScope,
        query: FloatArray,
        *,
        acl: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> tuple[list[tuple[int, float]], bool]:
        """Exact top-``limit`` under the access predicate; never truncated."""
        index = self._vectors.get(scope.tenant)
        if index is None:
            return [], False
        return index.search(query, **leg_args(scope, acl, doc_ids, limit)), False

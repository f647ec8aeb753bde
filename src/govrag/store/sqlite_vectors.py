"""SQLite's vector leg: an exact matrix per tenant in memory, derived like the lexical index.

SQLite has no vector index worth the name, and an exact scan with numpy over the rows the
caller may read is fast at the sizes an embedded store holds (``vectors.py``). The matrix is
derived from the truth store through the index outbox, as the lexical index is: built from a
snapshot on the first semantic search, then caught up from the outbox before each one.
"""

from __future__ import annotations

from collections.abc import Sequence

from govrag.embed.base import FloatArray
from govrag.store.acl import leg_args
from govrag.store.binary_codes import BinaryPrefilter
from govrag.store.database import Database
from govrag.store.outbox import pending, stream_snapshot, vector_space
from govrag.store.records import AccessScope
from govrag.store.search import SearchConfig
from govrag.store.vectors import VectorIndex


class SQLiteVectors:
    """The :class:`~govrag.store.derived.VectorLeg` of the SQLite store."""

    def __init__(self, db: Database, config: SearchConfig) -> None:
        self._db = db
        self._config = config
        self._matrices: dict[str, VectorIndex] = {}

    def sync(self, tenant: str, head: int) -> None:
        if self._config.embedder is None:
            return
        index = self._matrices.get(tenant)
        if index is None:
            space = vector_space(self._db, tenant)
            if space is None:
                return
            index = VectorIndex(space[1])
            # Streamed: each row's vector is copied into the matrix and dropped, so loading
            # a million vectors holds them once, not three times.
            index.applied_seq = stream_snapshot(
                self._db, tenant, lambda chunks: index.replace((), chunks), vectors=True
            )
            self._matrices[tenant] = index
        elif index.applied_seq < head:
            doc_ids, chunks, applied = pending(self._db, tenant, index.applied_seq, vectors=True)
            index.replace(doc_ids, chunks)
            index.applied_seq = applied

    def reset(self, tenant: str) -> None:
        index = self._matrices.pop(tenant, None)
        if index is not None:
            index.release()

    def access_drift(self, tenant: str, *, repair: bool) -> int:
        # No stored vector row carries access columns here: the matrix takes them from the
        # truth with its vectors, and is derived anew after a rebuild (``reset``).
        return 0

    def leg(
        self,
        scope: AccessScope,
        query: FloatArray,
        *,
        acl: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> tuple[list[tuple[int, float]], bool]:
        """Top-``limit`` under the access predicate (exact, or among the rows the 1-bit
        prefilter keeps when ``[search] binary_prefilter_rows`` is set); never truncated."""
        index = self._matrices.get(scope.tenant)
        if index is None:
            return [], False
        settings = self._config.settings
        prefilter = None
        if settings.binary_prefilter_rows > 0:
            prefilter = BinaryPrefilter(settings.binary_prefilter_rows, settings.binary_rescore)
        args = leg_args(scope, acl, doc_ids, limit)
        return index.search(query, **args, prefilter=prefilter), False

"""The PostgreSQL truth store (psycopg 3 + pgvector): for deployments past one machine.

Writes, the derived lexical index and reads are the shared SQL parts (``sql_*.py``), so both
backends hold the same truth and give the same keyword results; each govrag process keeps
its own tantivy index per tenant and applies the PostgreSQL outbox before it searches. What
is PostgreSQL's own is the vector leg, in the database:

- When the caller may read few vectors (at most ``exact_vector_threshold``, counted under
  the same predicate), it scores them all: exact, and cheaper than walking a graph.
- Otherwise an HNSW index scan with ``hnsw.iterative_scan = strict_order``, the access
  predicate applied to every candidate inside the scan; ``hnsw.max_scan_tuples`` bounds the
  walk, and a walk stopped by it before finding ``limit`` rows is reported as truncated.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from govrag.embed.base import Embedder, FloatArray
from govrag.settings import SearchSettings
from govrag.store.pg_base import PgBase, describe_server
from govrag.store.records import AccessScope
from govrag.store.sql_base import json_list
from govrag.store.sql_reads import ACL_EXISTS, SQLReads, token_pairs
from govrag.store.sql_writes import SQLWrites

_FROM = (
    "FROM documents d "
    "JOIN chunks c ON c.tenant_id = d.tenant_id AND c.doc_id = d.doc_id AND c.indexed "
    "JOIN chunk_vectors v ON v.tenant_id = c.tenant_id AND v.chunk_id = c.chunk_id "
    "WHERE d.tenant_id = ?"
)


class PostgresStore(SQLReads, SQLWrites, PgBase):
    """Knowledge store on a PostgreSQL database with pgvector >= 0.8."""

    backend = "postgres"

    def __init__(
        self,
        url: str,
        *,
        admin_url: str | None = None,
        app_role: str | None = None,
        pool_size: int = 4,
        index_dir: Path | None = None,
        embedder: Embedder | None = None,
        search: SearchSettings | None = None,
    ) -> None:
        self._init_state(index_root(index_dir, url), embedder, search)
        PgBase.__init__(
            self,
            url,
            admin_url=admin_url,
            app_role=app_role,
            pool_size=pool_size,
            vector_dims=() if embedder is None else (embedder.dim,),
        )

    def vector_leg(
        self,
        scope: AccessScope,
        query: FloatArray,
        *,
        restricted: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> tuple[list[tuple[int, float]], bool]:
        """Top ``limit`` by inner product under the access predicate (see module docs)."""
        settings = self.search_settings
        dim = int(query.shape[0])
        qvec = self._vector_param(query)
        conds, params = _scope_sql(scope, restricted, doc_ids)
        with self._tx(scope.tenant, read=True) as conn:
            allowed: int | None = None
            if restricted or doc_ids is not None:
                cap = max(settings.exact_vector_threshold, limit)
                allowed = int(
                    conn.execute(
                        self.dialect.sql(
                            f"SELECT COUNT(*) FROM (SELECT 1 {_FROM}{conds} LIMIT ?) s"
                        ),
                        (scope.tenant, *params, cap + 1),
                    ).fetchone()[0]
                )
                if allowed <= cap:
                    rows = conn.execute(
                        self.dialect.sql(
                            "SELECT c.chunk_id, -(v.embedding <#> CAST(? AS vector)) AS score "
                            f"{_FROM}{conds} ORDER BY score DESC, c.chunk_id LIMIT ?"
                        ),
                        (qvec, scope.tenant, *params, limit),
                    ).fetchall()
                    return [(int(r[0]), float(r[1])) for r in rows], False
            conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
            conn.execute(
                f"SET LOCAL hnsw.ef_search = {min(1000, max(settings.hnsw_ef_search, limit))}"
            )
            conn.execute(f"SET LOCAL hnsw.max_scan_tuples = {settings.hnsw_max_scan_tuples}")
            typed = f"CAST(v.embedding AS vector({dim}))"
            rows = conn.execute(
                self.dialect.sql(
                    f"SELECT c.chunk_id, -({typed} <#> CAST(? AS vector({dim}))) {_FROM} "
                    f"AND vector_dims(v.embedding) = {dim}{conds} "
                    f"ORDER BY {typed} <#> CAST(? AS vector({dim})) LIMIT ?"
                ),
                (qvec, scope.tenant, *params, qvec, limit),
            ).fetchall()
        hits = [(int(r[0]), float(r[1])) for r in rows]
        # Only reached with more readable vectors than ``limit``: a short list means the
        # scan bound stopped the walk.
        return hits, allowed is not None and len(hits) < limit


def _scope_sql(
    scope: AccessScope, restricted: bool, doc_ids: Sequence[int] | None
) -> tuple[str, list[Any]]:
    """``AND ...`` conditions on ``d`` and ``c`` for a vector query, with their parameters."""
    conds: list[str] = []
    params: list[Any] = []
    if scope.filter_corpora:
        conds.append("d.corpus_id IN (SELECT value FROM {texts})")
        params.append(json_list(scope.corpora))
    if restricted and scope.filter_ceiling:
        conds.append("d.classification <= ?")
        params.append(scope.ceiling)
    if restricted:
        conds.append(ACL_EXISTS)
        params.append(token_pairs(scope))
    if doc_ids is not None:
        conds.append("c.doc_id IN (SELECT value FROM {ids})")
        params.append(json_list(doc_ids))
    return "".join(f" AND {c}" for c in conds), params


def index_root(index_dir: Path | None, url: str) -> Path | None:
    """This process's lexical indexes of one database: a folder per server and database, so
    pointing a deployment at another database never reuses indexes of the first."""
    if index_dir is None:
        return None
    key = hashlib.sha256(describe_server(url).encode()).hexdigest()[:12]
    return index_dir / f"pg-{key}"

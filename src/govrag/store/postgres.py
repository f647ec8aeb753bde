"""The PostgreSQL truth store (psycopg 3 + pgvector): for deployments past one machine.

Writes, the derived lexical index and reads are the shared SQL parts (``sql_*.py``), so both
backends hold the same truth and give the same keyword results; each govrag process keeps
its own tantivy index per tenant and applies the PostgreSQL outbox before it searches. What
is PostgreSQL's own is the vector leg, in the database:

- When the caller may read few vectors (at most ``exact_vector_threshold``, counted under
  the same predicate), it scores them all: exact, and cheaper than walking a graph. Counting
  a broad caller's readable vectors is itself costly (it joins ``threshold + 1`` of them), so
  a cheap bound decides first: index-only counts of the caller's ACL rows and of the
  requested corpora's documents, each stopped at the threshold. Only when one of them is
  within it can the readable set be small, and only then is it counted.
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
from govrag.store.records import AccessScope, token_pair
from govrag.store.sessions import SQLSessions
from govrag.store.sql_base import json_list
from govrag.store.sql_reads import ACL_EXISTS, SQLReads, token_pairs
from govrag.store.sql_writes import SQLWrites

_FROM = (
    "FROM documents d "
    "JOIN chunks c ON c.tenant_id = d.tenant_id AND c.doc_id = d.doc_id AND c.indexed "
    "JOIN chunk_vectors v ON v.tenant_id = c.tenant_id AND v.chunk_id = c.chunk_id "
    "WHERE d.tenant_id = ?"
)
#: The same rows when no condition needs the document (every corpus in scope, nothing above
#: the caller's ceiling): every chunk has its document (foreign key), so the join only cost a
#: primary-key probe per readable vector, a fifth of the exact leg at 10k readable vectors.
_FROM_CHUNKS = (
    "FROM chunks c "
    "JOIN chunk_vectors v ON v.tenant_id = c.tenant_id AND v.chunk_id = c.chunk_id "
    "WHERE c.tenant_id = ? AND c.indexed"
)


#: The exact path's readable chunks, before their vectors are fetched: the count needs no
#: vector (a chunk without one only overcounts the bound; the scoring join drops it), and
#: probing ``chunk_vectors`` there too cost a quarter of the exact leg at 10k readable chunks.
_ALLOWED = _FROM.replace(
    "JOIN chunk_vectors v ON v.tenant_id = c.tenant_id AND v.chunk_id = c.chunk_id ", ""
)
_ALLOWED_CHUNKS = _FROM_CHUNKS.replace(
    "JOIN chunk_vectors v ON v.tenant_id = c.tenant_id AND v.chunk_id = c.chunk_id ", ""
)


class PostgresStore(SQLReads, SQLWrites, SQLSessions, PgBase):
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

    def _may_be_few(
        self,
        conn: Any,
        scope: AccessScope,
        restricted: bool,
        doc_ids: Sequence[int] | None,
        cap: int,
    ) -> bool:
        """Whether the readable documents can number ``cap`` or fewer, from bounds that cost
        an index-only scan of at most ``cap + 1`` entries each. Documents, not vectors: a
        document has one vector or more, so a large bound means many vectors; a small one
        is confirmed by the exact count."""
        if doc_ids is not None and len(doc_ids) <= cap:
            return True
        counts = []
        if restricted:
            principals, pairs = _principal_values(scope)
            if not pairs:
                return True  # reads nothing: the exact statement returns at once
            counts.append(
                (
                    "SELECT 1 FROM doc_acl WHERE tenant_id = ? AND (source_system, "
                    f"principal_id) IN {principals}",
                    [scope.tenant, *pairs],
                )
            )
        if scope.filter_corpora:
            counts.append(
                (
                    "SELECT 1 FROM documents WHERE tenant_id = ? AND corpus_id IN ("
                    + ", ".join("?" for _ in scope.corpora)
                    + ")",
                    [scope.tenant, *scope.corpora],
                )
            )
        for sql, params in counts:
            (n,) = conn.execute(
                self.dialect.sql(f"SELECT COUNT(*) FROM ({sql} LIMIT ?) AS bound"),
                (*params, cap + 1),
            ).fetchone()
            if int(n) <= cap:
                return True
        return not counts

    def vector_leg(
        self,
        scope: AccessScope,
        query: FloatArray,
        *,
        restricted: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
        need: int | None = None,
    ) -> tuple[list[tuple[int, float]], bool]:
        """Top ``limit`` by inner product under the access predicate (see module docs)."""
        settings = self.search_settings
        dim = int(query.shape[0])
        qvec = self._vector_param(query)
        conds, params = _scope_sql(scope, restricted, doc_ids)
        with self._tx(scope.tenant, read=True) as conn:
            cap = max(settings.exact_vector_threshold, limit)
            if (restricted or doc_ids is not None) and self._may_be_few(
                conn, scope, restricted, doc_ids, cap
            ):
                # Count the readable vectors (up to cap + 1) and, when they are few, score
                # them all, in one statement: the access join is done once, and a large set
                # stops the count at cap + 1 without scoring anything.
                on_doc = scope.filter_corpora or (restricted and scope.filter_ceiling)
                exact_conds, exact_params = _scope_sql(
                    scope, restricted, doc_ids, values=True, doc="d" if on_doc else "c"
                )
                rows = conn.execute(
                    self.dialect.sql(
                        "WITH allowed AS MATERIALIZED ("
                        f"SELECT c.chunk_id {_ALLOWED if on_doc else _ALLOWED_CHUNKS}{exact_conds} "
                        "LIMIT ?), "
                        "n AS (SELECT COUNT(*) AS n FROM allowed) "
                        "SELECT n.n, s.chunk_id, s.score FROM n LEFT JOIN LATERAL ("
                        "SELECT a.chunk_id, -(v.embedding <#> CAST(? AS vector)) AS score "
                        "FROM allowed a JOIN chunk_vectors v "
                        "ON v.tenant_id = ? AND v.chunk_id = a.chunk_id "
                        "WHERE n.n <= ? ORDER BY score DESC, a.chunk_id LIMIT ?) s ON TRUE"
                    ),
                    (scope.tenant, *exact_params, cap + 1, qvec, scope.tenant, cap, limit),
                ).fetchall()
                if int(rows[0][0]) <= cap:
                    return [(int(r[1]), float(r[2])) for r in rows if r[1] is not None], False
            # The bound or the count above established that the readable set is large; the
            # planner cannot know it (it cannot estimate the ACL predicate), so keep it from
            # sorting a filtered scan instead of walking the graph in distance order.
            if need is not None:
                limit = max(need, min(limit, settings.hnsw_walk_depth))
            conn.execute("SET LOCAL enable_sort = off")
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
            # The transaction may go on (a search pins one for all its reads).
            conn.execute("SET LOCAL enable_sort = on")
        hits = [(int(r[0]), float(r[1])) for r in rows]
        # A filtered walk is only reached with more than ``cap`` (>= ``limit``) ACL rows or
        # readable vectors: a short list means the scan bound (most likely) stopped it, so
        # say that fewer results than asked may exist rather than stay silent.
        return hits, (restricted or doc_ids is not None) and len(hits) < limit


def _scope_sql(
    scope: AccessScope,
    restricted: bool,
    doc_ids: Sequence[int] | None,
    *,
    values: bool = False,
    doc: str = "d",
) -> tuple[str, list[Any]]:
    """``AND ...`` conditions on ``d`` and ``c`` for a vector query, with their parameters.

    ``values``: the caller's principals as a ``VALUES`` list instead of one JSON parameter.
    The predicate is the same; the planner then knows how many principals there are and how
    many ACL rows each has (column statistics), so for a caller who reads little it drives
    the join from that caller's ACL rows instead of from every document of the tenant. The
    HNSW scan keeps the JSON form: there the predicate is a per-candidate probe anyway.
    ``doc``: the alias whose ``tenant_id``/``doc_id`` the ``VALUES`` form's ACL rows match
    (``c`` when the statement does not join ``documents``).
    """
    conds: list[str] = []
    params: list[Any] = []
    if scope.filter_corpora:
        conds.append("d.corpus_id IN (SELECT value FROM {texts})")
        params.append(json_list(scope.corpora))
    if restricted and scope.filter_ceiling:
        conds.append("d.classification <= ?")
        params.append(scope.ceiling)
    if restricted and values:
        principals, pairs = _principal_values(scope)
        if pairs:
            conds.append(
                f"EXISTS (SELECT 1 FROM doc_acl a WHERE a.tenant_id = {doc}.tenant_id "
                f"AND a.doc_id = {doc}.doc_id AND (a.source_system, a.principal_id) IN "
                f"{principals})"
            )
            params.extend(pairs)
        else:
            conds.append("FALSE")  # as ACL_EXISTS over an empty list
    elif restricted:
        conds.append(ACL_EXISTS)
        params.append(token_pairs(scope))
    if doc_ids is not None:
        conds.append("c.doc_id IN (SELECT value FROM {ids})")
        params.append(json_list(doc_ids))
    return "".join(f" AND {c}" for c in conds), params


def _principal_values(scope: AccessScope) -> tuple[str, list[str]]:
    """The caller's principals as ``(VALUES (?, ?), ...)`` and its flat parameters; the
    planner sees how many there are (a JSON parameter hides that)."""
    pairs = sorted(token_pair(t) for t in scope.tokens)
    return "(VALUES " + ", ".join("(?, ?)" for _ in pairs) + ")", [v for p in pairs for v in p]


def index_root(index_dir: Path | None, url: str) -> Path | None:
    """This process's lexical indexes of one database: a folder per server and database, so
    pointing a deployment at another database never reuses indexes of the first."""
    if index_dir is None:
        return None
    key = hashlib.sha256(describe_server(url).encode()).hexdigest()[:12]
    return index_dir / f"pg-{key}"

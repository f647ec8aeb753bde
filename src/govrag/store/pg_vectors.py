"""PostgreSQL's vector leg: pgvector in the database, under the access predicate.

Each govrag process keeps its own lexical index, but the vectors stay in PostgreSQL. Each
vector row carries its document's corpus, classification and ACL tokens (schema migration 6,
kept by triggers), so the access predicate is evaluated on the vector row itself:

- When the caller may read few vectors (at most ``exact_vector_threshold``, counted under
  the same predicate), it scores them all: exact, and cheaper than walking a graph. The
  readable vectors come from one GIN bitmap scan of the ACL tokens, read in physical order,
  and are counted and scored in one pass. Counting a broad caller's readable vectors would
  itself be costly, so a cheap bound decides first: an index-only count of the caller's ACL
  rows of documents it may read (in its corpora, at or below its ceiling), stopped past the
  threshold. Only when it is within it can the readable set be small, and only then is it
  counted; documents the caller cannot read play no part in the choice.
- Otherwise an HNSW index scan with ``hnsw.iterative_scan = strict_order`` of the tenant's
  own graph (one partial index per tenant, migration 12), the access predicate applied to
  every candidate inside the scan; ``hnsw.max_scan_tuples`` bounds the walk, and a walk
  stopped by it before finding ``limit`` rows is reported as truncated.

The rows' copies of the access columns are what :meth:`PgVectors.access_drift` checks and
repairs (``govrag index verify`` / ``rebuild``), should the triggers ever have been disabled.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from govrag.embed.base import FloatArray
from govrag.store.database import Database, vector_param
from govrag.store.pg_schema import ALL_READERS, READER_SETTING
from govrag.store.records import AccessScope, token_pair
from govrag.store.search import SearchConfig

#: Every vector row carries what the access predicate reads (its document's corpus,
#: classification and ACL tokens; migration 6 keeps them equal to the truth by triggers), so
#: neither path joins chunks, documents or ACL rows: the walk checks each candidate on the
#: row it already read, and the exact path finds the readable vectors with one GIN bitmap
#: scan, read in physical order. Every vector belongs to an indexed chunk.
_VECTORS = "FROM chunk_vectors v WHERE v.tenant_id = ?"


#: Vector rows of a tenant whose access columns are not their document's (``v``: the vector
#: row; ``c``, ``d``: its chunk and document; tokens as the triggers compute them).
_DRIFT = (
    "c.tenant_id = v.tenant_id AND c.chunk_id = v.chunk_id AND v.tenant_id = ? "
    "AND (v.doc_id, v.corpus_id, v.classification, v.acl) IS DISTINCT FROM "
    "(c.doc_id, d.corpus_id, d.classification, govrag_acl_tokens(c.tenant_id, c.doc_id))"
)
_DOCUMENT = "JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id"
_COUNT_DRIFT = f"SELECT COUNT(*) FROM chunk_vectors v, chunks c {_DOCUMENT} WHERE {_DRIFT}"
_REPAIR_ACCESS = (
    "UPDATE chunk_vectors v SET doc_id = c.doc_id, corpus_id = d.corpus_id, "
    "classification = d.classification, acl = govrag_acl_tokens(c.tenant_id, c.doc_id) "
    f"FROM chunks c {_DOCUMENT} WHERE {_DRIFT}"
)
#: ACL rows of a tenant whose copies of their document's classification and corpus
#: (migration 13, read by the path bound) are not the document's.
_ACL_DRIFT = (
    "d.tenant_id = a.tenant_id AND d.doc_id = a.doc_id AND a.tenant_id = ? "
    "AND (a.classification, a.corpus_id) IS DISTINCT FROM (d.classification, d.corpus_id)"
)
_COUNT_ACL_DRIFT = f"SELECT COUNT(*) FROM doc_acl a, documents d WHERE {_ACL_DRIFT}"
_REPAIR_ACL = (
    "UPDATE doc_acl a SET classification = d.classification, corpus_id = d.corpus_id "
    f"FROM documents d WHERE {_ACL_DRIFT}"
)


class PgVectors:
    """The :class:`~govrag.store.derived.VectorLeg` of the PostgreSQL store."""

    def __init__(self, db: Database, config: SearchConfig) -> None:
        self._db = db
        self._config = config

    def sync(self, tenant: str, head: int) -> None:
        """Nothing to derive: the vectors are searched where they are stored."""

    def reset(self, tenant: str) -> None:
        """Nothing derived to drop."""

    def _may_be_few(
        self,
        conn: Any,
        scope: AccessScope,
        acl: bool,
        doc_ids: Sequence[int] | None,
        cap: int,
    ) -> bool:
        """Whether the readable documents can number ``cap`` or fewer, from a bound that
        costs an index-only scan of at most ``cap + 1`` entries. Documents, not vectors: a
        document has one vector or more, so a large bound means many vectors; a small one
        is confirmed by the exact count.

        With ``acl`` the bound is the caller's ACL rows of documents in its corpora at or
        below its ceiling (migration 13: each ACL row carries its document's classification
        and corpus): it counts only what the caller may read, so documents it cannot read
        never pick its path. Without, the requested corpora's documents."""
        if doc_ids is not None and len(doc_ids) <= cap:
            return True
        corpora = ", ".join("?" for _ in scope.corpora)
        if acl:
            principals, pairs = _principal_values(scope)
            if not pairs:
                return True  # reads nothing: the exact statement returns at once
            sql = (
                "SELECT 1 FROM doc_acl WHERE tenant_id = ? "
                f"AND (source_system, principal_id) IN {principals}"
            )
            params: list[Any] = [scope.tenant, *pairs]
            if scope.filter_ceiling:
                sql += " AND classification <= ?"
                params.append(scope.ceiling)
            if scope.filter_corpora:
                sql += f" AND corpus_id IN ({corpora})"
                params += scope.corpora
        elif scope.filter_corpora:
            sql = f"SELECT 1 FROM documents WHERE tenant_id = ? AND corpus_id IN ({corpora})"
            params = [scope.tenant, *scope.corpora]
        else:
            return True  # no bound: the exact statement counts (and stops past cap)
        (n,) = conn.execute(
            self._db.dialect.sql(f"SELECT COUNT(*) FROM ({sql} LIMIT ?) AS bound"),
            (*params, cap + 1),
        ).fetchone()
        return int(n) <= cap

    @contextmanager
    def _as_reader(self, conn: Any, tokens: frozenset[str] | None) -> Iterator[None]:
        """Name the caller's principal tokens to the vectors' ``reader_acl`` policy for the
        statements inside (``None``: leave every row visible). The query states the same
        predicate; the policy is what lets the scan use the GIN index (see ``pg_schema``).
        No tokens: a value no row holds. Cleared on the way out, because a search's
        transaction goes on; not after an error, which has aborted the transaction."""
        if tokens is None:
            yield
            return
        setter = self._db.dialect.sql("SELECT set_config(?, ?, true)")
        conn.execute(setter, (READER_SETTING, ALL_READERS.join(sorted(tokens)) or "\x1f"))
        yield
        conn.execute(setter, (READER_SETTING, ""))

    def access_drift(self, tenant: str, *, repair: bool) -> int:
        """Vector rows whose access columns, and ACL rows whose copies, differ from their
        document's (the triggers keep them equal unless disabled; see docs/scaling.md); with
        ``repair``, set them right."""
        sql = self._db.dialect.sql
        with self._db.tx(tenant, read=not repair) as conn:
            if repair:
                return sum(
                    int(conn.execute(sql(statement), (tenant,)).rowcount)
                    for statement in (_REPAIR_ACCESS, _REPAIR_ACL)
                )
            return sum(
                int(conn.execute(sql(statement), (tenant,)).fetchone()[0])
                for statement in (_COUNT_DRIFT, _COUNT_ACL_DRIFT)
            )

    def leg(
        self,
        scope: AccessScope,
        query: FloatArray,
        *,
        acl: bool,
        doc_ids: Sequence[int] | None,
        limit: int,
    ) -> tuple[list[tuple[int, float]], bool]:
        """Top ``limit`` by inner product under the access predicate (see module docs)."""
        settings = self._config.settings
        sql = self._db.dialect.sql
        dim = int(query.shape[0])
        qvec = vector_param(self._db.dialect, query)
        conds, params = scope_sql(scope, acl, doc_ids)
        with (
            self._db.tx(scope.tenant, read=True) as conn,
            self._as_reader(conn, scope.tokens if acl else None),
        ):
            cap = max(settings.exact_vector_threshold, limit)
            if (acl or doc_ids is not None) and self._may_be_few(conn, scope, acl, doc_ids, cap):
                # Score the readable vectors (up to cap + 1) in one statement and count them:
                # when there are more than cap, nothing is returned and the graph is walked.
                rows = conn.execute(
                    sql(exact_statement(conds)),
                    (qvec, scope.tenant, *params, cap + 1, cap, limit),
                ).fetchall()
                if int(rows[0][0]) <= cap:
                    return [(int(r[1]), -float(r[2])) for r in rows if r[1] is not None], False
            # The bound or the count above established that the readable set is large; the
            # planner's estimate of the token overlap is rough (array statistics), so keep
            # it from sorting a filtered scan instead of walking the graph in distance order.
            conn.execute("SET LOCAL enable_sort = off")
            # The tenant's own graph is a partial index (tenant_id = the tenant): the planner
            # matches it only when it plans with the tenant as a constant, never in a generic
            # plan of a prepared statement.
            conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
            conn.execute(
                f"SET LOCAL hnsw.ef_search = {min(1000, max(settings.hnsw_ef_search, limit))}"
            )
            conn.execute(f"SET LOCAL hnsw.max_scan_tuples = {settings.hnsw_max_scan_tuples}")
            rows = conn.execute(
                sql(walk_statement(dim, conds)), (qvec, scope.tenant, *params, qvec, limit)
            ).fetchall()
            # The transaction may go on (a search pins one for all its reads).
            conn.execute("SET LOCAL enable_sort = on")
            conn.execute("SET LOCAL plan_cache_mode = auto")
        hits = [(int(r[0]), float(r[1])) for r in rows]
        # A filtered walk is only reached with more than ``cap`` (>= ``limit``) ACL rows or
        # readable vectors: a short list means the scan bound (most likely) stopped it, so
        # say that fewer results than asked may exist rather than stay silent.
        return hits, (acl or doc_ids is not None) and len(hits) < limit


def exact_statement(conds: str) -> str:
    """The exact path: the readable vectors (``conds``, at most ``cap + 1``: the ``LIMIT``
    parameter) scored in one pass, their count, and the top ``limit`` when the count is
    within ``cap``. Parameters: query vector, tenant, the conditions', ``cap + 1``, ``cap``,
    ``limit``."""
    return (
        "WITH allowed AS MATERIALIZED ("
        f"SELECT v.chunk_id, v.embedding <#> CAST(? AS vector) AS distance "
        f"{_VECTORS}{conds} LIMIT ?) "
        "SELECT n.n, s.chunk_id, s.distance "
        "FROM (SELECT COUNT(*) AS n FROM allowed) n LEFT JOIN LATERAL ("
        "SELECT chunk_id, distance FROM allowed WHERE n.n <= ? "
        "ORDER BY distance, chunk_id LIMIT ?) s ON TRUE"
    )


def walk_statement(dim: int, conds: str) -> str:
    """The walk: the tenant's ``dim``-dimensional vectors in distance order through its HNSW
    index (the expression and predicate of migration 12's partial index), filtered by
    ``conds``. Parameters: query vector, tenant, the conditions', query vector, ``limit``."""
    typed = f"CAST(v.embedding AS vector({int(dim)}))"
    return (
        f"SELECT v.chunk_id, -({typed} <#> CAST(? AS vector({int(dim)}))) {_VECTORS} "
        f"AND vector_dims(v.embedding) = {int(dim)}{conds} "
        f"ORDER BY {typed} <#> CAST(? AS vector({int(dim)})) LIMIT ?"
    )


def scope_sql(
    scope: AccessScope, acl: bool, doc_ids: Sequence[int] | None
) -> tuple[str, list[Any]]:
    """``AND ...`` conditions on a vector row ``v``, with their parameters: the same
    predicate as :data:`ACL_EXISTS` and the SQLite backend's, on the row's own copies of its
    document's corpus, classification and, with ``acl``, ACL tokens (the caller's principal
    tokens, one of which the row's must hold)."""
    conds: list[str] = []
    params: list[Any] = []
    if scope.filter_corpora:
        conds.append("v.corpus_id = ANY(CAST(? AS text[]))")
        params.append(list(scope.corpora))
    if scope.filter_ceiling:
        conds.append("v.classification <= ?")
        params.append(scope.ceiling)
    if acl:
        if scope.tokens:
            conds.append("v.acl && CAST(? AS text[])")
            params.append(sorted(scope.tokens))
        else:
            conds.append("FALSE")  # reads nothing, as ACL_EXISTS over an empty list
    if doc_ids is not None:
        conds.append("v.doc_id = ANY(CAST(? AS bigint[]))")
        params.append(list(doc_ids))
    return "".join(f" AND {c}" for c in conds), params


def _principal_values(scope: AccessScope) -> tuple[str, list[str]]:
    """The caller's principals as ``(VALUES (?, ?), ...)`` and its flat parameters; the
    planner sees how many there are (a JSON parameter hides that)."""
    pairs = sorted(token_pair(t) for t in scope.tokens)
    return "(VALUES " + ", ".join("(?, ?)" for _ in pairs) + ")", [v for p in pairs for v in p]

"""What a tenant holds, told to the operator: tenants, corpora, row counts, incidents.

None of it is document content: corpus ids and their descriptions are what an operator (and,
through the PEP, a route) names; counts and incidents are for checking an ingest or a repair.
Incidents are also where a search records a chunk its re-check against the truth dropped.
"""

from __future__ import annotations

import json

from govrag.store.clock import now_iso
from govrag.store.database import Database, ensure_tenant, json_value, list_tenants, log

_STATS = (
    ("documents", "SELECT COUNT(*) FROM documents WHERE tenant_id = ?"),
    ("chunks", "SELECT COUNT(*) FROM chunks WHERE tenant_id = ? AND indexed = {true}"),
    ("sections", "SELECT COUNT(*) FROM chunks WHERE tenant_id = ? AND NOT indexed"),
    ("vectors", "SELECT COUNT(*) FROM chunk_vectors WHERE tenant_id = ?"),
    ("acl_rows", "SELECT COUNT(*) FROM doc_acl WHERE tenant_id = ?"),
    ("identities", "SELECT COUNT(*) FROM identities WHERE tenant_id = ?"),
    ("groups", "SELECT COUNT(*) FROM groups WHERE tenant_id = ?"),
    ("outbox_rows", "SELECT COUNT(*) FROM index_outbox WHERE tenant_id = ?"),
)


class CatalogueRepository:
    """Tenants and corpora, counts and incidents."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def tenants(self) -> list[str]:
        return list_tenants(self._db)

    def schema_version(self) -> int:
        """The newest migration applied to the database (by any process that opened it)."""
        rows = self._db.q("", "SELECT COALESCE(MAX(version), 0) FROM schema_migrations")
        return int(rows[0][0])

    def list_corpora(self, tenant: str) -> list[tuple[str, str]]:
        """(corpus id, description) of a tenant's corpora."""
        rows = self._db.q(
            tenant,
            "SELECT corpus_id, description FROM corpora WHERE tenant_id = ? ORDER BY corpus_id",
            (tenant,),
        )
        return [(r[0], r[1]) for r in rows]

    def known_corpora(self, tenant: str) -> list[str]:
        return [c for c, _ in self.list_corpora(tenant)]

    def describe_corpus(self, tenant: str, corpus: str, description: str) -> None:
        with self._db.tx(tenant) as conn:
            ensure_tenant(conn, self._db.dialect, tenant)
            conn.execute(
                "INSERT INTO corpora(tenant_id, corpus_id, description, created_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT(tenant_id, corpus_id) "
                "DO UPDATE SET description = excluded.description",
                (tenant, corpus, description, now_iso()),
            )

    def is_empty(self, tenant: str) -> bool:
        return not self._db.q(
            tenant,
            self._db.dialect.sql(
                "SELECT 1 FROM chunks WHERE tenant_id = ? AND indexed = {true} LIMIT 1"
            ),
            (tenant,),
        )

    def stats(self, tenant: str) -> dict[str, int]:
        """Row counts of a tenant: what an operator checks after an ingest or a repair."""
        sql = "SELECT " + ", ".join(f"({self._db.dialect.sql(q)})" for _, q in _STATS)
        row = self._db.q(tenant, sql, (tenant,) * len(_STATS))[0]
        return {key: int(v) for (key, _), v in zip(_STATS, row, strict=True)}

    def incidents(self, tenant: str) -> list[tuple[str, dict[str, object]]]:
        """Recorded incidents (kind, detail), oldest first."""
        rows = self._db.q(
            tenant,
            "SELECT kind, detail FROM incidents WHERE tenant_id = ? ORDER BY incident_id",
            (tenant,),
        )
        return [(kind, json_value(detail)) for kind, detail in rows]

    def record_incident(self, tenant: str, kind: str, detail: dict[str, object]) -> None:
        log.warning("store incident %s in tenant %r: %s", kind, tenant, detail)
        with self._db.tx(tenant) as conn:
            conn.execute(
                "INSERT INTO incidents(tenant_id, kind, detail, created_at) VALUES (?, ?, ?, ?)",
                (tenant, kind, json.dumps(detail, sort_keys=True), now_iso()),
            )

"""Access counting, the Curation Pass and the hidden-item marker's budget, the same SQL on
every backend.

Accesses are counted per document (a cited answer or a click, never a raw retrieval); the
Curation Pass turns them, with authority and age, into trust scores (:mod:`curation`), and
bumps the ACL epoch when a score moved, since trust scores rank. The marker budget is one
transaction per marker, so every process sharing the store shares it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from govrag.settings import CurationSettings
from govrag.store.clock import now_iso
from govrag.store.curation import NEUTRAL, CurationReport, parse_instant, trust_score
from govrag.store.database import Database, bump_epoch, ensure_tenant


class LedgerRepository:
    """The access ledger: counters, curation, marker budget."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def record_access(
        self, tenant: str, documents: Sequence[tuple[str, str]], *, kind: str = "answer"
    ) -> None:
        """Count an access to each ``(source system, external id)``: a cited answer or a
        click on the source, never a raw retrieval. A cheap upsert of ``hits`` and
        ``last_accessed_at``; the Curation Pass reads them."""
        if kind not in ("answer", "click"):
            raise ValueError(f"access kind {kind!r}: use 'answer' or 'click'")
        if not documents:
            return
        now = now_iso()
        with self._db.tx(tenant) as conn:
            ensure_tenant(conn, self._db.dialect, tenant)
            conn.executemany(
                "INSERT INTO access_counter(tenant_id, entity_kind, entity_id, hits, "
                "last_accessed_at) VALUES (?, 'document', ?, 1, ?) "
                "ON CONFLICT (tenant_id, entity_kind, entity_id) DO UPDATE SET "
                "hits = access_counter.hits + 1, last_accessed_at = excluded.last_accessed_at",
                [(tenant, f"{ss}:{ext}", now) for ss, ext in sorted(set(documents))],
            )

    def consume_marker(self, tenant: str, email: str, *, window: int, budget: int) -> int | None:
        """Take one unit of the hidden-item marker budget of the principal with ``email`` (its
        rights come from the email, so every token or client of that person shares one
        budget) in the fixed window number ``window``: the markers shown to it in that window,
        this one included, or ``None`` when ``budget`` is spent (nothing is taken). One
        transaction, so processes sharing the store share the budget; older windows of the
        principal are dropped."""
        key = (tenant, email.casefold(), window)
        with self._db.tx(tenant) as conn:
            conn.execute(
                "DELETE FROM marker_budget WHERE tenant_id = ? AND email = ? AND window_start < ?",
                key,
            )
            conn.execute(
                "INSERT INTO marker_budget(tenant_id, email, window_start, shown) "
                "VALUES (?, ?, ?, 0) ON CONFLICT (tenant_id, email, window_start) DO NOTHING",
                key,
            )
            row = conn.execute(
                "UPDATE marker_budget SET shown = shown + 1 WHERE tenant_id = ? AND email = ? "
                "AND window_start = ? AND shown < ? RETURNING shown",
                (*key, budget),
            ).fetchone()
        return None if row is None else int(row[0])

    def curate(
        self, tenant: str, settings: CurationSettings | None = None, *, now: datetime | None = None
    ) -> CurationReport:
        """Recompute every ``trust_score`` of ``tenant`` from current inputs (the Curation
        Pass, see :mod:`govrag.store.curation`); one transaction."""
        cfg = settings or CurationSettings()
        at = now or datetime.now(UTC)
        with self._db.tx(tenant) as conn:
            rows = conn.execute(
                "SELECT d.doc_id, d.authority_tier, d.updated_at, d.ingested_at, d.trust_score, "
                "COALESCE(a.hits, 0), a.last_accessed_at FROM documents d "
                "LEFT JOIN access_counter a ON a.tenant_id = d.tenant_id "
                "AND a.entity_kind = 'document' "
                "AND a.entity_id = d.source_system || ':' || d.external_id "
                "WHERE d.tenant_id = ?",
                (tenant,),
            ).fetchall()
            changes: list[tuple[float, str, int]] = []
            total = 0.0
            for doc_id, tier, updated, ingested, old, hits, last in rows:
                changed = parse_instant(updated, parse_instant(ingested, at))
                new = trust_score(cfg, authority_tier=int(tier), hits=int(hits),
                                  last_accessed=parse_instant(last, at) if last else None,
                                  changed=changed, now=at)  # fmt: skip
                total += new
                if abs(new - float(old)) > 1e-9:
                    changes.append((new, tenant, int(doc_id)))
            conn.executemany(
                "UPDATE documents SET trust_score = ? WHERE tenant_id = ? AND doc_id = ?", changes
            )
            if changes:
                # Trust scores rank (the reranker reads them): result caches keyed on the
                # tenant's generation must not serve rankings made with the old ones.
                bump_epoch(conn, tenant)
        return CurationReport(tenant, len(rows), len(changes),
                              total / len(rows) if rows else NEUTRAL, at.isoformat())  # fmt: skip

    def access_counts(self, tenant: str) -> dict[str, int]:
        """Hits per ``source_system:external_id`` of documents that were ever accessed."""
        rows = self._db.q(
            tenant,
            "SELECT entity_id, hits FROM access_counter WHERE tenant_id = ? "
            "AND entity_kind = 'document'",
            (tenant,),
        )
        return {str(r[0]): int(r[1]) for r in rows}

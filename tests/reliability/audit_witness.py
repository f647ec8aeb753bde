"""A witness at the store's search: was this search's ALLOW committed before it ran?

DESIGN.md invariant 2: no search without a committed ALLOW. The witness wraps a store's
``search`` (the one call that ranks content). Before each search runs it asks the database,
over a connection of its own (so it sees committed rows only, and reads the table with its
own SQL rather than govrag's audit reader), whether a ``pep_decision`` with verdict ALLOW
for this caller, corpus and query is there; then it appends what it found to a file, synced
to disk before the search runs, so a process killed right after still leaves the line.

Queries are unique per request, so (caller, corpus, query) names one decision.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from govrag.store.protocol import KnowledgeStore
from govrag.types import Principal, SearchRequest, SearchResult

ALLOWS = "SELECT payload FROM audit_events WHERE tenant_id = {p} AND kind = 'pep_decision'"


@dataclass(frozen=True)
class Committed:
    """Reads a deployment's committed audit rows: its SQLite file, or a PostgreSQL
    superuser's DSN (row-level security does not hide other tenants' rows from it)."""

    sqlite: Path | None = None
    postgres: str | None = None

    def allows(self, tenant: str) -> set[tuple[str, str, str]]:
        """(sub, corpus, query) of every committed ALLOW of ``tenant``."""
        if self.sqlite is not None:
            conn = sqlite3.connect(f"file:{self.sqlite}?mode=ro", uri=True, timeout=30)
            try:
                rows = conn.execute(ALLOWS.format(p="?"), (tenant,)).fetchall()
            finally:
                conn.close()
        else:
            import psycopg

            assert self.postgres is not None
            with psycopg.connect(self.postgres, autocommit=True) as pg:
                rows = pg.execute(ALLOWS.format(p="%s"), (tenant,)).fetchall()
        out = set()
        for (payload,) in rows:
            event = json.loads(payload)
            if event["verdict"] == "ALLOW":
                out.add((event["sub"], event["resource"], event["query"]))
        return out


@dataclass(frozen=True)
class Seen:
    """One search the store ran, and whether its ALLOW was committed when it started."""

    sub: str
    corpus: str
    query: str
    committed: bool


def watch(store: KnowledgeStore, committed: Committed, log: Path) -> None:
    """Make every ``store.search`` first check and log its committed ALLOW (see above)."""
    search: Callable[[Principal, SearchRequest], SearchResult] = store.search

    def witnessed(principal: Principal, request: SearchRequest) -> SearchResult:
        corpus = (request.corpora or ("?",))[0]
        key = (principal.sub, corpus, request.query)
        seen = Seen(*key, committed=key in committed.allows(principal.tenant))
        with log.open("a") as out:
            out.write(json.dumps(vars(seen)) + "\n")
            out.flush()
            os.fsync(out.fileno())
        return search(principal, request)

    store.search = witnessed  # type: ignore[method-assign]


def seen(log: Path) -> list[Seen]:
    """The witness's lines (a last line cut short by a kill is not a search that ran: the
    search starts only after the line is synced)."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(Seen(**json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out


def unwitnessed(log: Path, committed: Committed, tenant: str) -> list[Any]:
    """Searches the witness saw without a committed ALLOW, at the time or now."""
    now = committed.allows(tenant)
    return [s for s in seen(log) if not s.committed or (s.sub, s.corpus, s.query) not in now]

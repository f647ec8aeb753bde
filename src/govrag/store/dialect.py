"""The few pieces of SQL that differ between SQLite and PostgreSQL, in one place.

Both backends run the same statements (the repositories: ``identities.py``,
``documents.py``, ``outbox.py``, ``reads.py`` ...), written with ``?`` placeholders and
``{name}`` slots that a :class:`Dialect` fills in; the few statements that differ in more
than a slot are chosen by a flag of the dialect (``database.py``). Lists (ids, principal
tokens) are bound as one JSON text parameter on both backends, so a statement has the same
parameters everywhere.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class Cursor(Protocol):
    """What the shared statements need of a DB-API cursor."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchmany(self, size: int) -> list[Any]: ...
    def fetchall(self) -> list[Any]: ...


class Conn(Protocol):
    """A connection inside one transaction, taking ``?`` placeholders."""

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Cursor: ...
    def executemany(self, sql: str, seq: Sequence[Sequence[Any]], /) -> Any: ...


@dataclass(frozen=True)
class Dialect:
    """Slots of the shared statements (see the module docstring)."""

    name: str
    #: A table ``j(value)`` of the integers in a bound JSON array.
    ids: str
    #: A table ``j(value)`` of the strings in a bound JSON array.
    texts: str
    #: A table ``t(ss, pid)`` of the ``[source_system, principal_id]`` pairs in a bound JSON
    #: array: the caller's resolved principals.
    pairs: str
    #: A join whose written order the planner must keep (the left side drives the probes).
    pin: str
    #: Prefix that keeps the planner from using an index on a column (SQLite's unary ``+``).
    plus: str
    #: The boolean literal true.
    true: str
    #: Index hint for probing group memberships by member (SQLite's ``INDEXED BY``).
    by_member: str
    #: Index hint for probing identities by source account (SQLite's ``INDEXED BY``).
    by_account: str
    #: Tenant ids are listed in ``tenant_directory`` too: the one table outside PostgreSQL's
    #: tenant policies, so an operator's "every tenant" commands can enumerate them.
    tenant_directory: bool
    #: Outbox entries are numbered from the tenant row, under its lock until commit, so they
    #: become visible in sequence order with concurrent writers (PostgreSQL); SQLite has one
    #: writer at a time and lets the table number them.
    numbered_outbox: bool
    #: The ``embedding`` column takes a float32 array (pgvector's adapter), not its bytes.
    vector_arrays: bool

    def sql(self, template: str) -> str:
        """``template`` with this dialect's slots filled in."""
        return _render(self, template)


@functools.lru_cache(maxsize=512)
def _render(dialect: Dialect, template: str) -> str:
    return template.format(
        ids=dialect.ids,
        texts=dialect.texts,
        pairs=dialect.pairs,
        pin=dialect.pin,
        plus=dialect.plus,
        true=dialect.true,
        by_member=dialect.by_member,
        by_account=dialect.by_account,
    )


SQLITE = Dialect(
    name="sqlite",
    ids="json_each(?) j",
    texts="json_each(?) j",
    pairs=(
        "(SELECT json_extract(value, '$[0]') AS ss, json_extract(value, '$[1]') AS pid "
        "FROM json_each(?)) t"
    ),
    # SQLite never reorders the operands of CROSS JOIN.
    pin="CROSS JOIN",
    plus="+",
    true="1",
    # With some statistics SQLite's planner scans every membership row of the tenant per
    # recursive step instead (18 ms instead of 0.3 ms at 100 reachable groups).
    by_member="INDEXED BY group_members_by_member",
    # Without statistics SQLite reads the author's email (MIN) through the primary key's
    # covering index, scanning every identity of the tenant per chunk: 8.4 ms instead of
    # 1.6 ms to hydrate 50 chunks with 1,000 accounts.
    by_account="INDEXED BY identities_by_account",
    tenant_directory=False,
    numbered_outbox=False,
    vector_arrays=False,
)

# The bound id and principal lists behind an optimisation fence (``OFFSET 0``). Flattened
# into the outer query, their casts (``value::bigint``, ``e->>0``) would sit in the join
# clauses, and those functions are not leakproof: under forced row-level security PostgreSQL
# will not evaluate such a clause inside an index probe of a protected table (it could leak
# rows the policy hides), so every "these ids" or "these pairs" lookup became a sequential
# scan of the tenant (29 ms at 20k chunks for the re-check, linear in the corpus). Fenced,
# the list's columns are plain values and the joins probe the primary keys.
POSTGRES = Dialect(
    name="postgres",
    ids=(
        "(SELECT value::bigint AS value FROM jsonb_array_elements_text(CAST(? AS jsonb)) "
        "OFFSET 0) j"
    ),
    texts="jsonb_array_elements_text(CAST(? AS jsonb)) AS j(value)",
    pairs=(
        "(SELECT e->>0 AS ss, e->>1 AS pid FROM jsonb_array_elements(CAST(? AS jsonb)) AS x(e) "
        "OFFSET 0) t"
    ),
    pin="JOIN",
    plus="",
    true="TRUE",
    by_member="",
    by_account="",
    tenant_directory=True,
    numbered_outbox=True,
    vector_arrays=True,
)


@functools.lru_cache(maxsize=512)
def to_pyformat(sql: str) -> str:
    """``?`` placeholders to psycopg's ``%s`` (escaping literal ``%``)."""
    return sql.replace("%", "%%").replace("?", "%s")

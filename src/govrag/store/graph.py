"""The graph primitive: entity rows written with their chunks, and the graph leg under the ACL.

**Written with the chunks.** When a document's chunks are written, each indexed chunk's
entities and the relations it states (``graph_extract.py``) are written in the same
transaction: ``entities`` (one row per tenant, kind and name), ``chunk_entities`` and
``relations`` (with the chunk that states them). They are derived from the chunks and go with
them (foreign keys cascade), so a document's graph is never half written and a deleted
document leaves no edge behind. ``govrag index rebuild`` re-derives them after the glossary
changes.

**The leg.** A question's entities (the same extraction) reach, at most two hops away:

1. the entities it names (weight 1);
2. their neighbours in the glossary (weight 0.5): configuration, the same for every caller;
3. aliases that a chunk states for any of those (``alias_of``, weight 0.8 x the entity's),
   **only from chunks the caller may read** in the searched corpora at or below its clearance.

Chunks the caller may read that mention a reached entity score ``sum(weight x specificity)``
over the entities they mention, where ``specificity = 1 / log2(1 + n)`` and ``n`` counts the
readable candidate chunks mentioning it: an LEI found in two chunks outweighs "EUR 1,000"
found in two hundred. Every count, edge and candidate passes the same access predicate as
every other leg, so an entity or relation known only from chunks the caller cannot read
never moves its results (the noninterference test).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

from govrag.store.acl import acl_exists, token_pairs
from govrag.store.database import Database, json_list
from govrag.store.dialect import Conn, Dialect
from govrag.store.glossary import Glossary
from govrag.store.graph_extract import Entity, Extracted, extract, phrases, term_mentions
from govrag.store.records import AccessScope

#: Weights of a reached entity: named in the question, a glossary neighbour, a stated alias.
NAMED, GLOSSARY_HOP, ALIAS_HOP = 1.0, 0.5, 0.8
#: Most (chunk, entity) rows one leg reads: a bound on a very common entity.
MAX_ROWS = 20_000
#: Entity ids by (kind, name): the few given pairs drive (pinned join), each found by the
#: unique index, never a scan of the tenant's entities.
_BY_NAME = (
    "SELECT e.entity_id, e.kind, e.name FROM {pairs} {pin} entities e "
    "ON e.tenant_id = ? AND e.kind = t.ss AND e.name = t.pid"
)


def write_chunk_graph(
    conn: Conn, dialect: Dialect, tenant: str, chunks: Sequence[tuple[int, str]],
    glossary: Glossary,
) -> None:  # fmt: skip
    """The entity rows of freshly written chunks ``(chunk_id, text)`` of one document, in
    their transaction. A term the document defines is a mention in each of its chunks that
    uses it; never in another document's (a reader of that one may not read this one)."""
    extracted = [(cid, text, extract(text, glossary)) for cid, text in chunks]
    defined = {e[1] for _, _, x in extracted for r in x.relations for e in r[:2]
               if e[0] == "term"}  # fmt: skip
    per_chunk = [
        (cid, Extracted(x.mentions | term_mentions(text, defined), x.relations))
        for cid, text, x in extracted
    ]
    wanted = sorted(
        {e for _, x in per_chunk for e in x.mentions}
        | {e for _, x in per_chunk for s, d, _ in x.relations for e in (s, d)}
    )
    if not wanted:
        return
    conn.executemany(
        "INSERT INTO entities(tenant_id, kind, name) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        [(tenant, kind, name) for kind, name in wanted],
    )
    ids = {
        (r[1], r[2]): int(r[0])
        for r in conn.execute(
            dialect.sql(_BY_NAME), (json_list([list(e) for e in wanted]), tenant)
        ).fetchall()
    }
    conn.executemany(
        "INSERT INTO chunk_entities(tenant_id, chunk_id, entity_id) VALUES (?, ?, ?)",
        [(tenant, cid, ids[e]) for cid, x in per_chunk for e in sorted(x.mentions)],
    )
    conn.executemany(
        "INSERT INTO relations(tenant_id, src_entity, dst_entity, kind, chunk_id) "
        "VALUES (?, ?, ?, ?, ?)",
        [(tenant, ids[s], ids[d], kind, cid) for cid, x in per_chunk
         for s, d, kind in sorted(x.relations)],
    )  # fmt: skip


def query_entities(query: str, glossary: Glossary) -> dict[Entity, float]:
    """The question's entities (weight 1) and their glossary neighbours (weight 0.5)."""
    named = extract(query, glossary)
    reached: dict[Entity, float] = dict.fromkeys(named.mentions, NAMED)
    for kind, name in named.mentions:
        if kind != "entity":
            continue
        for _, other in glossary.neighbours(name):
            reached.setdefault(("entity", other), GLOSSARY_HOP)
    for a, b, _ in named.relations:  # the question itself says "X ("Y")"
        reached.setdefault(a, NAMED)
        reached.setdefault(b, NAMED)
    # A term some document defines may be named by any phrase of the question; the phrases
    # no readable chunk mentions reach nothing (every use below is under the caller's ACL).
    for phrase in phrases(query):
        reached.setdefault(("term", phrase), NAMED)
    return reached


def graph_leg(
    db: Database,
    scope: AccessScope,
    reached: dict[Entity, float],
    *,
    doc_ids: Sequence[int] | None,
    limit: int,
) -> list[tuple[int, float]]:
    """Top ``limit`` readable chunks by entity weight and specificity (module docstring)."""
    if not reached or not scope.tokens:
        return []
    weights = dict(reached)
    for src, dst in _readable_aliases(db, scope, _entity_ids(db, scope.tenant, list(reached))):
        for known, other in ((src, dst), (dst, src)):
            if known in reached:
                weights[other] = max(weights.get(other, 0.0), ALIAS_HOP * reached[known])
    ids = _entity_ids(db, scope.tenant, list(weights))
    if not ids:
        return []
    # The few entity ids drive (pinned join): each one's chunk rows by index, never a scan
    # of the tenant's rows.
    named = db.q(
        scope.tenant,
        db.dialect.sql(
            "SELECT ce.chunk_id, ce.entity_id FROM {ids} {pin} chunk_entities ce "
            "ON ce.entity_id = j.value AND ce.tenant_id = ? "
            "JOIN chunks c ON c.chunk_id = ce.chunk_id AND {plus}c.tenant_id = ce.tenant_id "
            "JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id "
            "WHERE c.indexed = {true} AND d.classification <= ? "
            "AND d.corpus_id IN (SELECT value FROM {texts}) AND " + acl_exists("d")
            + (" AND d.doc_id IN (SELECT value FROM {ids})" if doc_ids is not None else "")
            + f" ORDER BY ce.chunk_id LIMIT {MAX_ROWS}"
        ),
        (json_list(sorted(ids)), scope.tenant, scope.ceiling, json_list(scope.corpora),
         token_pairs(scope), *((json_list(doc_ids),) if doc_ids is not None else ())),
    )  # fmt: skip
    rows = [(int(cid), ids[int(eid)]) for cid, eid in named]
    if len(rows) >= MAX_ROWS:
        # The bound cut inside the last chunk; which of its rows came first follows entity
        # ids, which any document (readable or not) may have made first. Only whole chunks
        # count, so what is kept depends on the readable chunks' ids alone.
        last = rows[-1][0]
        rows = [(cid, e) for cid, e in rows if cid != last]
    mentions: dict[int, set[Entity]] = defaultdict(set)
    frequency: dict[Entity, int] = defaultdict(int)
    for cid, entity in rows:
        if entity not in mentions[cid]:
            mentions[cid].add(entity)
            frequency[entity] += 1
    # Summed in one order (a set's order could move a score's last bit).
    scored = [
        (cid, sum(weights[e] / math.log2(1 + frequency[e]) for e in sorted(entities)))
        for cid, entities in mentions.items()
    ]
    scored.sort(key=lambda pair: (-pair[1], pair[0]))
    return scored[:limit]


def _entity_ids(db: Database, tenant: str, entities: list[Entity]) -> dict[int, Entity]:
    """The ids of those of ``entities`` some chunk of the tenant ever named (readable or not:
    an id alone reaches nothing; every use of it is under the caller's access predicate)."""
    if not entities:
        return {}
    rows = db.q(tenant, db.dialect.sql(_BY_NAME), (json_list([list(e) for e in entities]), tenant))
    return {int(r[0]): (str(r[1]), str(r[2])) for r in rows}


def _readable_aliases(
    db: Database, scope: AccessScope, ids: dict[int, Entity]
) -> list[tuple[Entity, Entity]]:
    """``alias_of`` pairs touching the entities ``ids`` that chunks the caller may read
    state (looked up from either end, by index)."""
    if not ids:
        return []
    out: set[tuple[Entity, Entity]] = set()
    for near, far in (("src_entity", "dst_entity"), ("dst_entity", "src_entity")):
        rows = db.q(
            scope.tenant,
            db.dialect.sql(
                f"SELECT r.{near}, o.kind, o.name FROM {{ids}} {{pin}} relations r "
                f"ON r.tenant_id = ? AND r.{near} = j.value "
                f"JOIN entities o ON o.tenant_id = r.tenant_id AND o.entity_id = r.{far} "
                "JOIN chunks c ON c.chunk_id = r.chunk_id AND {plus}c.tenant_id = r.tenant_id "
                "JOIN documents d ON d.tenant_id = c.tenant_id AND d.doc_id = c.doc_id "
                "WHERE r.kind = 'alias_of' AND d.classification <= ? "
                "AND d.corpus_id IN (SELECT value FROM {texts}) AND " + acl_exists("d")
            ),
            (json_list(sorted(ids)), scope.tenant, scope.ceiling, json_list(scope.corpora),
             token_pairs(scope)),
        )  # fmt: skip
        for known, kind, name in rows:
            pair = (ids[int(known)], (str(kind), str(name)))
            out.add(pair if near == "src_entity" else (pair[1], pair[0]))
    return sorted(out)

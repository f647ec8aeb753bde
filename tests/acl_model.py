"""An independent, naive reference model of the knowledge store, and the checks that compare a
store with it (``tests/store/test_acl_properties.py`` on random worlds,
``tests/reliability/test_acl_oracle.py`` on worlds that change step by step).

The model uses plain Python sets for identities, nested groups, ACLs, tenants and
classifications, brute-force BM25 (with statistics over the documents the caller may read) and
brute-force cosine. :func:`check_searches` asserts, for every caller and strategy:
- every result is readable by the caller;
- the exact legs (keyword, semantic) return the reference top-k over the allowed set, with
  BM25 statistics counted over that set only (``approximate``: the semantic leg returns as
  many allowed rows as asked, each exactly scored, in order);
- the hidden marker, whatever the strategy, is present exactly when an unreadable document
  the caller could ask for (same tenant, requested corpora, at or below the clearance) holds
  at least ``max(2, ceil(0.5 n))`` of the query's ``n`` distinct terms (none when ``n < 2``),
  and names the first three distinct sources/authors of those documents in ingest order.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from govrag.embed.hashing import HashEmbedder
from govrag.harvest.records import Record
from govrag.store.analyzer import default_analyzer
from govrag.store.protocol import KnowledgeStore
from govrag.types import Classification, Principal, SearchRequest, Strategy

from conftest import doc, group, ident

VOCAB = ["wire", "limit", "risk", "credit", "model", "policy", "console", "audit", "loan", "fraud"]
SYSTEMS = ["s1", "s2"]
ACCOUNTS = ["a0", "a1", "a2", "a3"]
GROUPS = ["g0", "g1", "g2"]
EMAILS = ["u0@x.example", "u1@x.example", "u2@x.example", "u3@x.example"]
TENANTS = ["t1", "t2"]
CORPORA = ["c1", "c2"]
LEVELS = ["public", "internal", "confidential", "restricted"]
EPS = 1e-4
#: The default ``[search] marker_min_term_share``, as the decimal it is written as.
MARKER_SHARE = Fraction("0.5")


#: Whom the marker names for a document: its source system and its author's email.
Contact = tuple[str, str | None]


@dataclass(frozen=True)
class RDoc:
    tenant: str
    system: str
    ext: str
    corpus: str
    text: str
    acl: frozenset[str]
    level: int
    author: str | None


@dataclass(frozen=True)
class World:
    identities: frozenset[tuple[str, str, str, str]]  # tenant, email, system, account
    groups: dict[tuple[str, str, str], frozenset[str]]  # (tenant, system, group) -> members
    docs: tuple[RDoc, ...]


def principals(world: World, tenant: str, email: str) -> set[tuple[str, str]]:
    have = {(s, a) for t, e, s, a in world.identities if t == tenant and e == email}
    changed = True
    while changed:
        changed = False
        for (t, s, g), members in world.groups.items():
            if t == tenant and (s, g) not in have and any((s, m) in have for m in members):
                have.add((s, g))
                changed = True
    return have


def readable(
    world: World, d: RDoc, tenant: str, email: str, ceiling: int, corpora: list[str]
) -> bool:
    return readable_by(principals(world, tenant, email), d, tenant, ceiling, corpora)


def readable_by(
    mine: set[tuple[str, str]], d: RDoc, tenant: str, ceiling: int, corpora: list[str]
) -> bool:
    """:func:`readable` for a caller whose :func:`principals` are ``mine``."""
    if d.tenant != tenant or d.level > ceiling or d.corpus not in corpora:
        return False
    if "*" in d.acl and mine:
        return True
    return any((d.system, p) in mine for p in d.acl)


@functools.lru_cache(maxsize=65536)
def _terms(text: str) -> list[str]:
    return default_analyzer().analyze("\n" + text)


def bm25(docs: list[RDoc], query: str) -> dict[str, float]:
    """BM25 with k1 1.2, b 0.75 and every statistic counted over ``docs`` alone."""
    analyze = default_analyzer().analyze
    toks = {d.ext: _terms(d.text) for d in docs}
    assert all(len(t) <= 32 for t in toks.values())  # lengths are exact up to 32 terms
    n = len(docs)
    if n == 0:
        return {}
    avgdl = sum(len(t) for t in toks.values()) / n
    out: dict[str, float] = {}
    for term in set(analyze(query)):
        df = sum(1 for t in toks.values() if term in t)
        if df == 0:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for ext, t in toks.items():
            tf = t.count(term)
            if tf:
                norm = tf + 1.2 * (1 - 0.75 + 0.75 * len(t) / avgdl)
                out[ext] = out.get(ext, 0.0) + idf * tf * 2.2 / norm
    return out


def cosine(world: World, tenant: str, query: str) -> dict[str, float]:
    emb = HashEmbedder(dim=64)
    q = emb.embed_query(query).astype(np.float64)
    return {
        d.ext: float(emb.embed_documents([d.text])[0].astype(np.float64) @ q)
        for d in world.docs
        if d.tenant == tenant
    }


def author_email(world: World, d: RDoc) -> str | None:
    emails = sorted(
        e for t, e, s, a in world.identities if t == d.tenant and s == d.system and a == d.author
    )
    return emails[0] if emails else None


def check_topk(actual: list[tuple[str, float]], reference: dict[str, float], k: int) -> None:
    """Actual must be the reference top-k, up to order among (near-)ties."""
    ranked = sorted(reference.items(), key=lambda p: -p[1])
    want = ranked[:k]
    assert len(actual) == len(want), (actual, want)
    if not want:
        return
    kth = want[-1][1]
    for ext, score in actual:
        assert ext in reference, f"{ext} is not an allowed match"
        assert math.isclose(score, reference[ext], rel_tol=EPS, abs_tol=EPS), (ext, score)
        assert reference[ext] >= kth - EPS
    must = {e for e, s in want if s > kth + EPS}
    assert must <= {e for e, _ in actual}
    scores = [s for _, s in actual]
    assert all(a >= b - EPS for a, b in itertools.pairwise(scores))


def to_records(world: World, tenant: str) -> list[Record]:
    out: list[Record] = [ident(e, a, s) for t, e, s, a in sorted(world.identities) if t == tenant]
    out += [group(g, sorted(m), s) for (t, s, g), m in sorted(world.groups.items()) if t == tenant]
    out += [doc_record(d) for d in world.docs if d.tenant == tenant]
    return out


def doc_record(d: RDoc) -> Record:
    """The record a connector sends for the model's document ``d``."""
    return doc(d.ext, d.text, sorted(d.acl), corpus=d.corpus, source=d.system,
               classification=LEVELS[d.level], author=d.author)  # fmt: skip


def check_searches(
    store: KnowledgeStore,
    world: World,
    query: str,
    ceiling: int,
    k: int,
    corpora: list[str] | None,
    *,
    approximate: bool = False,
    ordered: bool = True,
) -> None:
    """Every caller of :data:`EMAILS` in every tenant and strategy searches ``store``, which
    holds ``world``: each result is readable, the exact legs return the reference top-k, and
    the marker follows its rule. ``approximate``: the store's vector leg may miss rows (the
    1-bit prefilter); what it returns must still be readable, exactly scored, in order, and
    as many as asked. ``ordered``: see :func:`check_marker`."""
    for tenant in TENANTS:
        known = [c for c, _ in store.list_corpora(tenant)]
        scope = [c for c in (corpora or known) if c in known]
        if corpora and len(scope) != len(corpora):
            continue  # unknown corpus: a clear error, covered elsewhere
        dense = cosine(world, tenant, query)
        askable = [
            d for d in world.docs if d.tenant == tenant and d.corpus in scope and d.level <= ceiling
        ]
        for email in EMAILS:
            caller = Principal(
                sub="u", email=email, tenant=tenant, clearance=Classification(ceiling)
            )
            can = {d.ext for d in world.docs if readable(world, d, tenant, email, ceiling, scope)}
            lexical = bm25([d for d in world.docs if d.tenant == tenant and d.ext in can], query)
            for strategy in Strategy:
                request = SearchRequest(
                    query=query,
                    strategy=strategy,
                    top_k=k,
                    corpora=tuple(corpora) if corpora else None,
                )
                result = store.search(caller, request)
                got = [(h.doc_id, h.score) for h in result.results]
                assert {e for e, _ in got} <= can, "a result the caller may not read"
                if strategy is Strategy.KEYWORD:
                    check_topk(got, lexical, k)
                elif strategy is Strategy.SEMANTIC and approximate:
                    assert len(got) == min(k, len(can))
                    for ext, score in got:
                        assert math.isclose(score, dense[ext], rel_tol=EPS, abs_tol=EPS)
                    assert all(a[1] >= b[1] - EPS for a, b in itertools.pairwise(got))
                elif strategy is Strategy.SEMANTIC:
                    check_topk(got, {e: s for e, s in dense.items() if e in can}, k)
                else:
                    # Fused: every document is embedded and the vector leg takes at least
                    # top-k, so a hybrid search fills its k from what the caller may read
                    # (a leg ranked without the ACL would lose places to the re-check).
                    assert len(got) == min(k, len(can)), (len(got), k, len(can))
                check_marker(world, tenant, askable, can, result, query, email,
                             ordered=ordered)  # fmt: skip


def check_marker(
    world: World,
    tenant: str,
    askable: list[RDoc],
    can: set[str],
    result: object,
    query: str,
    email: str,
    *,
    ordered: bool = True,
) -> None:
    """``ordered``: the contacts named are the first three in ingest order (a world loaded
    at once); otherwise any three of them (a document whose content changed was chunked
    anew, which moves it in the store's order)."""
    hidden = result.hidden  # type: ignore[attr-defined]
    named = [(s.source_system, s.author_email) for s in hidden.sources]
    assert hidden.present == bool(named)
    if not principals(world, tenant, email):
        assert not hidden.present  # no identity: learns nothing
        return
    contacts = marker_contacts(world, askable, can, query)
    if ordered:
        assert named == sorted(contacts[:3], key=lambda c: (c[0], c[1] or ""))
    else:
        assert len(named) == len(set(named)) == min(3, len(contacts))
        assert set(named) <= set(contacts), "the marker named someone no counted document has"


def marker_contacts(world: World, askable: list[RDoc], can: set[str], query: str) -> list[Contact]:
    """The contacts (source, author email) of the documents that count for the marker, in
    ``askable``'s order: those the caller may not read holding at least
    ``max(2, ceil(share * n))`` of the query's ``n`` distinct terms (none when ``n < 2``)."""
    words = set(default_analyzer().analyze(query))
    need = max(2, math.ceil(MARKER_SHARE * len(words)))
    counted = [d for d in askable if len(words) >= 2 and d.ext not in can
               and len(words & set(_terms(d.text))) >= need]  # fmt: skip
    return list(dict.fromkeys((d.system, author_email(world, d)) for d in counted))

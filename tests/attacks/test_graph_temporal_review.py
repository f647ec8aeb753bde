"""Hostile review of the graph leg, the temporal strategy and time filters (both backends).

The attacker reads some documents, picks queries, strategies, ``as_of`` and ``time_range``,
and writes documents that get ingested (text, times, ``supersedes``). Every test is a defence
that must hold. The review found these holes, each closed and kept here as a test:

- the graph leg's row bound was ordered by chunk id only, so which of the boundary chunk's
  entity rows survived followed the tenant-wide entity ids, which unreadable (even deleted)
  documents assign: a noninterference break (results and scores moved). Only whole chunks
  count now, and scores are summed in one order;
- crashes on hostile input: a Unicode month (``aprİl``), an amount of more than 4300 digits,
  times whose UTC conversion leaves datetime's range, a version dated before year 1000 (the
  store's time text was not zero-padded, so it also sorted wrong). Extraction is bounded and
  ASCII-folded; times outside the years 1000-9998 are refused at the record and the request;
- quadratic regexes (``_DEFINED``, ``_EMAIL``) on a long chunk: a 2 MB document held the
  write transaction for hours. Every repeated run is bounded now.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from govrag.gateway import Gateway
from govrag.harvest.ingest import Ingestor, ingest_jsonl
from govrag.harvest.records import DocumentRecord
from govrag.store.glossary import Glossary, GlossaryEntry
from govrag.store.graph_extract import extract
from govrag.store.protocol import KnowledgeStore
from govrag.types import SearchRequest, Strategy, TimeRange

from conftest import StoreFactory, doc, ident, load, principal

ANA = "ana@x.example"
BEN = "ben@x.example"


def lei(base: str) -> str:
    digits = "".join(str(int(c, 36)) for c in base + "00")
    return f"{base}{98 - int(digits) % 97:02d}"


ORBIS_LEI = lei("5493001KJTIIGC8Y1R")
GLOSSARY = Glossary({
    "ent-orbis": GlossaryEntry("ent-orbis", "organization",
                               ("Orbis Data Holdings plc", "Orbis", ORBIS_LEI),
                               (("parent_of", "ent-cloud"),)),
    "ent-cloud": GlossaryEntry("ent-cloud", "organization", ("Orbis Cloud GmbH",)),
    "ent-rtl": GlossaryEntry("ent-rtl", "organization",
                             ("\u05d1\u05e0\u05e7 \u05dc\u05d0\u05d5\u05de\u05d9", "🏦 Bank")),
})  # fmt: skip


def seen(store: KnowledgeStore, email: str, query: str, **kw: Any) -> Any:
    """Everything P sees of a search: hits (ids, chunk ids, scores, texts), marker, flags."""
    clearance = kw.pop("clearance", "internal")
    request = SearchRequest(query=query, **kw)
    result = store.search(principal(email, clearance=clearance), request)
    return result.model_dump(mode="json")


def ids(store: KnowledgeStore, email: str, query: str, **kw: Any) -> list[str]:
    return [h["doc_id"] for h in seen(store, email, query, **kw)["results"]]


# --------------------------------------------------------------------------------------------
# Noninterference: the graph leg
# --------------------------------------------------------------------------------------------

N_COMMON = 250
COMMONS = [f"EUR{1001 + i}" for i in range(N_COMMON)]
RARE = "EUR7777"


def row_bound_world(*, hidden: bool) -> list[Any]:
    """79 readable fillers naming all 250 common amounts (19,750 chunk-entity rows), one
    naming 125 of them (19,875), then chunk ``b`` naming the rare amount and 249 commons: the
    leg's 20,000-row bound falls inside ``b``. In the other world an unreadable memo (ingested
    first) also names the rare amount, so that entity's id is the tenant's lowest."""
    records: list[Any] = [ident(ANA, "A"), ident(BEN, "B")]
    if hidden:
        records.append(doc("memo", f"Settlement memo: {RARE} owed.", ["A"]))
    records += [doc(f"f{i:03d}", " ".join(COMMONS), ["*"]) for i in range(79)]
    records.append(doc("f0", " ".join(COMMONS[:125]), ["*"]))
    records.append(doc("b", RARE + " " + " ".join(COMMONS[:249]), ["*"]))
    return records


def test_the_row_bound_cuts_a_chunk_by_hidden_entity_ids(open_store: StoreFactory) -> None:
    """Fixed (noninterference). ``graph_leg`` reads at most ``MAX_ROWS`` (chunk, entity) rows
    ``ORDER BY ce.chunk_id LIMIT 20000``: not a total order. When the bound falls inside a
    chunk, which of its rows survive follows the order the rows come in, i.e. entity ids
    (the ids list drives the join in ascending id). Entity ids are tenant-wide and assigned
    by first mention in ANY document, readable or not (and they outlive its deletion). So a
    memo ben cannot read, naming one amount, moves ben's scores: chunk ``b`` keeps the rare
    amount (specificity 1.0) or loses it at the cut, and ``b`` and ``f0`` swap graph ranks.
    Fix: order the bounded read by something readable-only and total (``ce.chunk_id,
    e.kind, e.name``), or cut whole chunks only (and count frequencies over what is kept)."""
    query = RARE + " " + " ".join(COMMONS)
    outcomes = []
    for name, hidden in (("without", False), ("with", True)):
        store = open_store(name)
        load(store, row_bound_world(hidden=hidden))
        outcomes.append(seen(store, BEN, query, strategy=Strategy.GRAPH, top_k=100))
    assert outcomes[0] == outcomes[1]


def alias_world(*, extra: list[Any]) -> list[Any]:
    return [
        ident(ANA, "A"), ident(BEN, "B"),
        doc("onboarding", "Onboarding file: Orbis passed KYC in March.", ["*"]),
        doc("exposure", f"Credit exposure to {ORBIS_LEI} is EUR 12 million.", ["*"]),
        doc("zephyr", "Project Zephyr milestones are on track.", ["*"]),
        doc("cloud", "Outage at Orbis Cloud GmbH delayed payments.", ["*"]),
        doc("weather", "The canteen closes early on Friday.", ["*"]),
        *extra,
    ]  # fmt: skip


HIDDEN_ALIASES = {
    # P may not read it (ACL), at P's clearance: the marker may name it, nothing else.
    "acl": [doc("m", 'Project Zephyr ("Orbis") is the merger code name.', ["A"])],
    # Above P's clearance, readable by P's account.
    "clearance": [doc("m", 'Project Zephyr ("Orbis") is the merger code name.', ["*"],
                      classification="restricted")],
    # Another corpus (the request names "main" only), readable by everyone.
    "corpus": [doc("m", 'Project Zephyr ("Orbis") is the merger code name.', ["*"],
                   corpus="deals")],
    # Many unreadable documents re-using every readable entity, with defined terms of their
    # own that collide with phrases of the question.
    "flood": [doc(f"m{i}", f'Orbis ("Project Zephyr") {ORBIS_LEI} Orbis Cloud GmbH '
                  f'("Onboarding file") EUR 12 million ("canteen") {i}', ["A"])
              for i in range(30)],
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(HIDDEN_ALIASES))
def test_hidden_aliases_and_mentions_move_nothing(open_store: StoreFactory, kind: str) -> None:
    """Held if it passes: aliases, mentions and counts of documents P cannot read (other ACL,
    above clearance, another corpus) leave every graph search P makes unchanged (results,
    scores to the bit, marker). The unreadable ones are ingested AFTER P's, so entity ids of
    P's entities are the same in both worlds (the id-order channel is the test above)."""
    worlds = []
    for name, extra in (("without", []), ("with", HIDDEN_ALIASES[kind])):
        store = open_store(name, glossary=GLOSSARY)
        load(store, alias_world(extra=[]))
        if extra:
            load(store, extra)
        worlds.append(store)
    for query in ("What do we know about Orbis?", "Project Zephyr status", "Onboarding file",
                  "canteen Orbis Zephyr", f"{ORBIS_LEI} EUR 12 million"):  # fmt: skip
        a = seen(worlds[0], BEN, query, strategy=Strategy.GRAPH, corpora=("main",))
        b = seen(worlds[1], BEN, query, strategy=Strategy.GRAPH, corpora=("main",))
        assert a["results"] == b["results"], (kind, query)
        if kind not in ("acl", "flood"):  # ACL-hidden relevant ones may raise the marker
            assert a["hidden"] == b["hidden"], (kind, query)


def test_another_tenants_graph_moves_nothing(open_store: StoreFactory) -> None:
    """Held if it passes: entities, aliases and supersedes of tenant t2 (same source system,
    same external ids, same entity names) change nothing t1 sees."""
    worlds = []
    for name, other in (("alone", False), ("shared", True)):
        store = open_store(name, glossary=GLOSSARY)
        if other:
            load(store, [ident(BEN, "B"),
                         doc("zephyr", 'Project Zephyr ("Orbis") code name.', ["*"],
                             updated_at="2026-01-01T00:00:00Z", supersedes=["onboarding"]),
                         doc("onboarding", "Orbis Orbis Orbis onboarding", ["*"])],
                 tenant="t2")  # fmt: skip
        load(store, alias_world(extra=[]))
        worlds.append(store)
    for query, strategy in (("Project Zephyr", Strategy.GRAPH), ("Orbis", Strategy.GRAPH),
                            ("Onboarding file Orbis", Strategy.TEMPORAL)):  # fmt: skip
        assert seen(worlds[0], BEN, query, strategy=strategy) == seen(
            worlds[1], BEN, query, strategy=strategy
        ), query


def test_the_graph_marker_is_judged_on_text_alone(open_store: StoreFactory) -> None:
    """Held if it passes: a hidden document that names the question's entity only by LEI (no
    word of the question) never raises the marker of a graph search."""
    store = open_store(glossary=GLOSSARY)
    load(store, alias_world(extra=[doc("secret", f"Exposure limit raised for {ORBIS_LEI}.",
                                       ["A"])]))  # fmt: skip
    got = seen(store, BEN, "Orbis Data Holdings plc onboarding", strategy=Strategy.GRAPH)
    assert got["hidden"]["present"] is False


# --------------------------------------------------------------------------------------------
# Noninterference and hostile versions: the temporal strategy
# --------------------------------------------------------------------------------------------

QUESTION = "wire limit policy daily limit"


def versions(*, extra: list[Any]) -> list[Any]:
    return [
        ident(ANA, "A"), ident(BEN, "B"),
        doc("v1", "Wire limit policy: the daily limit is EUR 10,000.", ["*"],
            updated_at="2024-01-01T00:00:00Z"),
        doc("v2", "Wire limit policy: the daily limit is EUR 25,000 per client.", ["*"],
            updated_at="2025-01-01T00:00:00Z", supersedes=["v1"]),
        doc("other", "Card rules for travel abroad.", ["*"]),
        *extra,
    ]  # fmt: skip


HIDDEN_REPLACEMENTS = {
    "acl": [doc("v3", "Wire limit policy: the daily limit is EUR 50,000.", ["A"],
                updated_at="2025-06-01T00:00:00Z", supersedes=["v2", "v1"])],
    "clearance": [doc("v3", "Wire limit policy: EUR 50,000.", ["*"], classification="restricted",
                      updated_at="2025-06-01T00:00:00Z", supersedes=["v2", "v1"])],
    "corpus": [doc("v3", "Wire limit policy: EUR 50,000.", ["*"], corpus="drafts",
                   updated_at="2025-06-01T00:00:00Z", supersedes=["v2", "v1"])],
    # A readable replacement that names v2, but in another source system: not a version of it.
    "source": [doc("v3", "Wire limit policy: EUR 50,000.", ["*"], source="wiki",
                   updated_at="2025-06-01T00:00:00Z", supersedes=["v2", "v1"])],
    # Many unreadable replacements, cycles among them, dated far past and far future.
    "flood": [doc(f"h{i}", "Wire limit policy daily limit.", ["A"],
                  effective_at=("2099-01-01T00:00:00Z" if i % 2 else "1970-01-01T00:00:00Z"),
                  supersedes=["v1", "v2", f"h{(i + 1) % 20}"]) for i in range(20)],
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(HIDDEN_REPLACEMENTS))
def test_hidden_replacements_demote_nothing(open_store: StoreFactory, kind: str) -> None:
    """Held if it passes: a replacement P cannot read (ACL, clearance, corpus outside the
    request) or that is not a version of P's document (another source system: compared with
    the same document naming nothing) never demotes what P sees, now or as of any time."""
    worlds = []
    for name, extra in (("without", []), ("with", HIDDEN_REPLACEMENTS[kind])):
        store = open_store(name)
        load(store, versions(extra=[]))
        if kind == "source":
            load(store, [ident(BEN, "B", source="wiki")])
            extra = extra or [r.model_copy(update={"supersedes": []})
                              for r in HIDDEN_REPLACEMENTS[kind]]  # fmt: skip
        if extra:
            load(store, extra)
        worlds.append(store)
    for kw in (
        {"strategy": Strategy.TEMPORAL},
        {"strategy": Strategy.TEMPORAL, "as_of": datetime(2025, 7, 1, tzinfo=UTC)},
        {"strategy": Strategy.KEYWORD, "as_of": datetime(2030, 1, 1, tzinfo=UTC)},
    ):
        a = seen(worlds[0], BEN, QUESTION, corpora=("main",), **kw)
        b = seen(worlds[1], BEN, QUESTION, corpora=("main",), **kw)
        assert a["results"] == b["results"], (kind, kw)
        if kind not in ("acl", "flood"):  # ACL-hidden relevant versions may raise the marker
            assert a["hidden"] == b["hidden"], (kind, kw)


def test_cycles_and_a_hundred_supersedes_are_harmless(store: KnowledgeStore) -> None:
    """Held if it passes: readable versions that supersede each other in a cycle, and one that
    names 100 versions, are all still found (preferred, never dropped), deterministically;
    naming itself or more than 100 is refused at the record."""
    load(store, [
        ident(BEN, "B"),
        doc("a", "wire limit policy alpha", ["*"], updated_at="2025-01-01T00:00:00Z",
            supersedes=["b"]),
        doc("b", "wire limit policy beta", ["*"], updated_at="2025-01-01T00:00:00Z",
            supersedes=["c"]),
        doc("c", "wire limit policy gamma", ["*"], updated_at="2025-01-01T00:00:00Z",
            supersedes=["a"]),
        doc("many", "wire limit policy many", ["*"], updated_at="2025-02-01T00:00:00Z",
            supersedes=["a", "b", "c", *[f"x{i}" for i in range(97)]]),
    ])  # fmt: skip
    first = ids(store, BEN, "wire limit policy", strategy=Strategy.TEMPORAL)
    assert set(first) == {"a", "b", "c", "many"}
    assert first == ids(store, BEN, "wire limit policy", strategy=Strategy.TEMPORAL)
    with pytest.raises(ValidationError):
        doc("self", "x", ["*"], supersedes=["self"])
    with pytest.raises(ValidationError):
        doc("huge", "x", ["*"], supersedes=[f"x{i}" for i in range(101)])


# --------------------------------------------------------------------------------------------
# Hostile times
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["0999-01-01T00:00:00Z", "0001-01-01T00:30:00+05:00",
                                  "9999-12-31T23:00:00-05:00"])  # fmt: skip
def test_a_version_dated_outside_the_stored_years_is_refused_alone(
    store: KnowledgeStore, tmp_path: Path, when: str
) -> None:
    """Was a HOLE: times are compared as stored text, and ``strftime('%Y')`` wrote year 999
    as "999-...", which sorted after 2024 (``as_of=2025`` dropped it; a temporal search that
    ranked it raised ``ValueError`` parsing it back); a time near year 1 or 9999 overflowed on
    its way to UTC. Now a record's times must lie in the years 1000-9998 (UTC): such a line
    is refused with a message naming the field, and the rest of the feed is ingested."""
    with pytest.raises(ValidationError, match="outside the years 1000-9998"):
        doc("old", "wire limit policy ancient charter", ["*"], effective_at=when)
    feed = tmp_path / "feed.jsonl"
    feed.write_text("\n".join(json.dumps(r) for r in (
        {"type": "identity", "email": BEN, "source_system": "sp", "account_id": "B"},
        {"type": "document", "source_system": "sp", "external_id": "old", "corpus": "main",
         "text": "wire limit policy ancient charter", "acl": ["*"],
         "classification": "internal", "effective_at": when},
        {"type": "document", "source_system": "sp", "external_id": "new", "corpus": "main",
         "text": "wire limit policy modern rule", "acl": ["*"], "classification": "internal",
         "updated_at": "2024-01-01T00:00:00Z"},
    )) + "\n")  # fmt: skip
    report = ingest_jsonl(store, feed, "t1", embedder=store.embedder)
    assert report.errors == 1 and "effective_at" in report.messages[0], report.messages
    assert set(ids(store, BEN, "wire limit policy", strategy=Strategy.TEMPORAL)) == {"new"}


EDGE_TIMES = ["9999-12-31T23:00:00-05:00", "0001-01-01T00:30:00+05:00"]


@pytest.mark.parametrize("when", EDGE_TIMES)
def test_as_of_and_ranges_at_the_edge_of_time_fail_cleanly(
    store: KnowledgeStore, when: str
) -> None:
    """Fixed (traceback on caller input). An aware ``as_of`` / range bound whose UTC instant is
    outside datetime's range passes validation, then ``clock.iso``'s ``astimezone(UTC)``
    raises ``OverflowError`` inside the search (a 500, not a 4xx). Fix: reject (or clamp) such
    instants in ``SearchRequest`` / ``TimeRange`` validation."""
    load(store, [ident(BEN, "B"), doc("new", "wire limit policy", ["*"],
                                      effective_at="2024-01-01T00:00:00Z")])  # fmt: skip
    for kw in (
        {"as_of": when},
        {"time_range": {"start": when}},
        {"as_of": when, "strategy": Strategy.TEMPORAL},
    ):
        try:
            request = SearchRequest(query="wire limit policy", **kw)
        except ValidationError:
            continue  # refused as caller input: the defence
        store.search(principal(BEN), request)  # must answer, not raise


def ingest_beside(store: KnowledgeStore, bad: DocumentRecord) -> Ingestor:
    """Ingest ``bad`` and a harmless document in one batch; returns the ingestor."""
    ingestor = Ingestor(store, "t1", embedder=store.embedder)
    ingestor.add("bad", bad)
    ingestor.add("good", doc("good", "a harmless note about wire limits", ["*"]))
    ingestor.flush()
    return ingestor


HOSTILE_DOCUMENTS = {
    # re.IGNORECASE matches "İ" to "i"; casefold() makes "i̇" (two code points): KeyError.
    "unicode-month": lambda: doc("bad", "Payment due 1 aprİl 2024.", ["*"]),
    # int() of more than 4300 digits (sys.get_int_max_str_digits): ValueError.
    "huge-amount": lambda: doc("bad", "Claim of EUR " + "1" * 5000 + ".", ["*"]),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_DOCUMENTS))
def test_a_hostile_document_is_refused_alone(open_store: StoreFactory, kind: str) -> None:
    """Fixed (denial of service by a document author). The graph's extraction runs inside
    ``put_document`` and the time conversion in ``Ingestor.flush``; only ``InputError`` is
    caught there, so these raise out of ``flush``: the whole ingest run stops, and the
    harmless documents of its batch (and everything after it in the feed) are never
    written. Fix: make ``extract`` total (look months up by ``[:3].lower()`` on ASCII,
    bound digit runs before ``int``), validate times at the record, and report any failure
    of one document as that line's error."""
    store = open_store()
    load(store, [ident(BEN, "B")])
    bad = HOSTILE_DOCUMENTS[kind]()
    ingestor = ingest_beside(store, bad)  # must not raise
    assert ingestor.report.added >= 1
    assert "good" in ids(store, BEN, "harmless note wire limits", strategy=Strategy.KEYWORD)


def test_a_graph_question_with_a_unicode_month_does_not_crash(store: KnowledgeStore) -> None:
    """Fixed (traceback on caller input). The question goes through the same extraction: a
    graph search for "1 aprİl 2024" raises ``KeyError('apri̇l')``."""
    load(store, [ident(BEN, "B"), doc("d", "Payment due 1 April 2024.", ["*"])])
    got = ids(store, BEN, "payment due 1 aprİl 2024", strategy=Strategy.GRAPH)
    assert "d" in got


def test_strange_names_and_questions_are_harmless(open_store: StoreFactory) -> None:
    """Held if it passes: emoji, RTL text, combining marks and lone punctuation in glossary
    names, documents and questions neither crash extraction nor search."""
    store = open_store(glossary=GLOSSARY)
    load(store, [ident(BEN, "B"),
                 doc("rtl", "Loan from \u05d1\u05e0\u05e7 \u05dc\u05d0\u05d5\u05de\u05d9 "
                     "(\"‮Bank‬\").", ["*"]),
                 doc("emoji", "🏦 Bank pays EUR 5 to 🏦 (\"🏦\") and ‏ (\"x\").", ["*"]),
                 doc("marks", 'Ω̃ Corp ("Ω") é́ ("é́") ( "" ) ("\'") ', ["*"])])  # fmt: skip
    for query in ("🏦 Bank", "\u05d1\u05e0\u05e7 \u05dc\u05d0\u05d5\u05de\u05d9", "‮Bank‬",
                  "Ω", '"(" ) (', "é́ 🏦"):  # fmt: skip
        seen(store, BEN, query, strategy=Strategy.GRAPH)
    assert "rtl" in ids(store, BEN, "🏦 Bank", strategy=Strategy.GRAPH)  # one glossary entity


# --------------------------------------------------------------------------------------------
# Pathological text: regex time
# --------------------------------------------------------------------------------------------

PATHOLOGICAL = {
    # _DEFINED: every capital starts a name that runs to the end of the text, then fails.
    "defined-term": '"A." * 30000',
    # _EMAIL: every letter after a dot starts a local part that runs to the end.
    "email": '"a." * 60000',  # 120 KB
}


@pytest.mark.parametrize("kind", sorted(PATHOLOGICAL))
def test_extraction_is_not_quadratic_on_one_long_chunk(kind: str, tmp_path: Path) -> None:
    """Fixed (denial of service by a document author). The chunker never splits a run without
    whitespace, so a document's whole text can be one chunk (up to ``max_text_bytes``, 2 MB).
    ``_DEFINED`` and ``_EMAIL`` are quadratic on such text (60 KB of "A.": ~45 s, 120 KB of
    "a.": ~11 s here; 2 MB: hours), and extraction runs inside the document's write
    transaction, so the writer lock is held all that time. A linear extraction reads 60 KB
    in milliseconds.
    Fix: bound each pattern's runs (``[\\w&.,'-]{0,40}``, local part ``{1,64}``, domain
    ``{1,253}``), scan only whitespace-separated words of bounded length, or cut chunks at
    ``max_tokens`` characters as well as words."""
    script = textwrap.dedent(f"""
        from govrag.store.graph_extract import extract
        extract({PATHOLOGICAL[kind]})
    """)
    try:
        subprocess.run([sys.executable, "-c", script], check=True, timeout=5,
                       env={"PYTHONPATH": ":".join(sys.path)})  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"extracting {kind!r} text ({PATHOLOGICAL[kind]}) took more than 5 s")


def test_a_long_question_is_bounded() -> None:
    """Held if it passes: the longest question (4096 characters) is extracted quickly, and its
    phrases stay bounded (5 per word)."""
    from govrag.store.graph import query_entities

    worst = ("A " * 2048)[:4096]
    reached = query_entities(worst, GLOSSARY)
    assert len(reached) <= 5 * 2048
    script = "from govrag.store.graph_extract import extract; extract(('A.' * 2048)[:4096])"
    subprocess.run([sys.executable, "-c", script], check=True, timeout=5,
                   env={"PYTHONPATH": ":".join(sys.path)})  # fmt: skip


def test_extract_is_deterministic_and_checks_identifiers() -> None:
    """Held: random strings shaped like identifiers are not identifiers."""
    assert extract("AAAAAAAAAAAAAAAAAA00 DE00370400440532013000 US0000000000").mentions == set()


# --------------------------------------------------------------------------------------------
# Cache and tenancy of the new tables
# --------------------------------------------------------------------------------------------


def test_the_cache_never_serves_graph_or_temporal_across_callers_or_time(
    open_store: StoreFactory,
) -> None:
    """Held if it passes: a temporal ranking of "now" is never cached; graph and as-of
    rankings are cached per ACL fingerprint only (ana's alias never reaches ben's pack)."""
    store = open_store(glossary=GLOSSARY)
    load(store, alias_world(extra=[doc("m", 'Project Zephyr ("Orbis") merger.', ["A"]),
                                   *versions(extra=[])[2:]]))  # fmt: skip
    gateway = Gateway(store)
    temporal = SearchRequest(query=QUESTION, strategy=Strategy.TEMPORAL, top_k=5)
    gateway.retrieve(principal(BEN), "main", temporal, policy_version="p")
    assert len(gateway.cache) == 0
    graph = SearchRequest(query="Project Zephyr", strategy=Strategy.GRAPH, top_k=5)
    ana = gateway.retrieve(principal(ANA), "main", graph, policy_version="p")
    ben = gateway.retrieve(principal(BEN), "main", graph, policy_version="p")
    assert not ben.cache_hit
    assert "m" in {c.doc_id for c in ana.chunks}
    assert "m" not in {c.doc_id for c in ben.chunks}
    fresh = Gateway(store, cache=None).retrieve(principal(BEN), "main", graph, policy_version="p")
    assert [c.doc_id for c in ben.chunks] == [c.doc_id for c in fresh.chunks]


def test_postgres_row_security_covers_the_new_tables(open_store: StoreFactory) -> None:
    """Held if it passes: as the application role, with t1 set, none of t2's rows of
    doc_supersedes, entities, chunk_entities or relations is visible; with no tenant set,
    none at all."""
    store = open_store(glossary=GLOSSARY)
    if store.backend != "postgres":
        pytest.skip("row-level security is PostgreSQL's")
    import psycopg

    load(store, alias_world(extra=[doc("v9", 'Orbis ("Zed") v9', ["*"], supersedes=["x"])]),
         tenant="t2")  # fmt: skip
    with psycopg.connect(store.url, autocommit=True) as conn:  # type: ignore[attr-defined]
        for table in ("doc_supersedes", "entities", "chunk_entities", "relations"):
            (none,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            conn.execute("SELECT set_config('govrag.tenant', 't1', false)")
            (t1,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            conn.execute("RESET govrag.tenant")
            assert (none, t1) == (0, 0), table


# --------------------------------------------------------------------------------------------
# Both backends
# --------------------------------------------------------------------------------------------


def test_both_backends_rank_graph_and_temporal_alike(pg_cluster: Any, tmp_path: Path) -> None:
    """Held if it passes: the same data and questions give the same hits and scores on SQLite
    and PostgreSQL for the graph and temporal strategies and the time filters."""
    from conftest import drop_pg_database, make_pg_store, make_store, new_pg_database

    dsn = new_pg_database(pg_cluster)
    stores = [make_store(tmp_path / "lite", glossary=GLOSSARY),
              make_pg_store(pg_cluster, dsn, tmp_path / "pg-index", glossary=GLOSSARY,
                            exact_vector_threshold=0)]  # fmt: skip
    try:
        for s in stores:
            load(s, alias_world(extra=[doc("m", 'Project Zephyr ("Orbis") merger.', ["A"])]))
            load(s, versions(extra=HIDDEN_REPLACEMENTS["acl"])[2:])
        asks: list[dict[str, Any]] = [
            {"query": "What do we know about Orbis?", "strategy": Strategy.GRAPH},
            {"query": "Project Zephyr", "strategy": Strategy.GRAPH},
            {"query": QUESTION, "strategy": Strategy.TEMPORAL},
            {"query": QUESTION, "strategy": Strategy.TEMPORAL,
             "as_of": datetime(2024, 6, 1, tzinfo=UTC)},
            {"query": QUESTION, "time_range": TimeRange(start=datetime(2024, 6, 1, tzinfo=UTC))},
        ]  # fmt: skip
        for who in (ANA, BEN):
            for ask in asks:
                assert seen(stores[0], who, **ask) == seen(stores[1], who, **ask), (who, ask)
    finally:
        for s in stores:
            s.close()
        drop_pg_database(pg_cluster, dsn)

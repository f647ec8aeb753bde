"""When a withheld document counts for the hidden-item marker: a share of the query's terms.

The rule (``govrag/store/search.py``): of the query's ``n`` distinct analysed terms, a
document the caller could ask for but may not read counts when it holds at least
``m = max(2, ceil(share * n))``, ``share`` being ``[search] marker_min_term_share``; a query of
fewer than 2 distinct terms never raises the marker. Here: the rule on examples a person
would ask (on both backends), its arithmetic, the setting's validation, and a Hypothesis
property against a reference model written without govrag's code: for random small worlds
the marker names exactly the documents the model counts, and whether a document counts does
not change when other hidden documents are added or removed.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from govrag.errors import ConfigError
from govrag.harvest.records import DeleteRecord, Record
from govrag.settings import SearchSettings, load_settings
from govrag.store.analyzer import default_analyzer
from govrag.store.protocol import KnowledgeStore
from govrag.store.search import marker_min_terms
from govrag.types import Classification, Principal, SearchRequest, Strategy

from conftest import StoreFactory, doc, examples, group, ident, load, make_store, principal

#: The caller of the examples, and the owner of what it may not read.
PEOPLE: list[Record] = [ident("ben@x.example", "B"), ident("olga@x.example", "O")]
QUESTION = "Have any corporate clients breached the wire limit?"  # 5 terms: m = 3 at 0.5


def marker_sources(store: KnowledgeStore, query: str) -> list[str] | None:
    """The author emails the marker names for Ben's ``query``, or ``None``: no marker."""
    request = SearchRequest(query=query, strategy=Strategy.KEYWORD)
    hidden = store.search(principal("ben@x.example"), request).hidden
    if not hidden.present:
        return None
    return [s.author_email or "" for s in hidden.sources]


def test_the_question_has_five_terms() -> None:
    terms = default_analyzer().analyze(QUESTION)
    assert len(set(terms)) == 5, terms


def test_a_document_holding_four_of_five_terms_counts(open_store: StoreFactory) -> None:
    store = open_store()
    load(store, [*PEOPLE, doc("memo", "Corporate clients breached the wire rules", ["O"],
                              author="O")])  # fmt: skip
    assert marker_sources(store, QUESTION) == ["olga@x.example"]


def test_a_document_holding_one_of_five_terms_does_not(open_store: StoreFactory) -> None:
    store = open_store()
    load(store, [*PEOPLE, doc("memo", "Seating plan of the wire room", ["O"], author="O")])
    assert marker_sources(store, QUESTION) is None


def test_the_bar_is_a_share_of_the_terms(open_store: StoreFactory) -> None:
    """At the default share 0.5, 3 of 5 terms count and 2 do not; at 1.0 only all 5 do."""
    docs = [
        doc("three", "corporate clients wire", ["O"], author="O"),
        doc("two", "corporate clients lunch", ["O"], author="O"),
    ]
    default = open_store("default")
    load(default, [*PEOPLE, *docs])
    assert marker_sources(default, QUESTION) == ["olga@x.example"]
    every = open_store("every", marker_min_term_share=1.0)
    load(every, [*PEOPLE, *docs])
    assert marker_sources(every, QUESTION) is None


def test_a_one_term_query_never_raises_the_marker(open_store: StoreFactory) -> None:
    store = open_store()
    load(store, [*PEOPLE, doc("memo", "merger with halvorsen", ["O"], author="O")])
    for probe in ("merger", "halvorsen", "Merger? MERGER, mergers!", "the merger of it"):
        assert marker_sources(store, probe) is None, probe
    assert marker_sources(store, "merger halvorsen") == ["olga@x.example"]


def test_an_unknown_word_is_just_not_held(open_store: StoreFactory) -> None:
    """A term no document holds no longer empties the candidates: it is one term not held."""
    store = open_store()
    load(store, [*PEOPLE, doc("memo", "merger with halvorsen", ["O"], author="O")])
    assert marker_sources(store, "merger halvorsen xylophone") == ["olga@x.example"]
    assert marker_sources(store, "merger xylophone") is None  # 1 of 2, and m is at least 2


@pytest.mark.parametrize(
    ("n", "share", "m"),
    [(0, 0.6, None), (1, 0.6, None), (1, 1.0, None), (2, 0.6, 2), (3, 0.6, 2), (4, 0.6, 3),
     (5, 0.6, 3), (7, 0.6, 5), (10, 0.6, 6), (10, 0.7, 7), (5, 1.0, 5), (5, 0.1, 2),
     (20, 0.35, 7)],
)  # fmt: skip
def test_how_many_terms_count(n: int, share: float, m: int | None) -> None:
    assert marker_min_terms(n, share) == m


@pytest.mark.parametrize("value", ["0", "0.0", "-0.5", "1.01", "2", "nan"])
def test_a_share_outside_zero_to_one_is_a_clear_error(tmp_path: Path, value: str) -> None:
    (tmp_path / "govrag.toml").write_text(f"[search]\nmarker_min_term_share = {value}\n")
    with pytest.raises(ConfigError, match=r"govrag\.toml") as info:
        load_settings(tmp_path)
    assert "[search] marker_min_term_share" in str(info.value)


def test_the_share_defaults_and_accepts_one() -> None:
    assert SearchSettings().marker_min_term_share == 0.5
    assert SearchSettings(marker_min_term_share=1).marker_min_term_share == 1.0


# -- the property ------------------------------------------------------------------------------
#: Words the analyser keeps as they are (checked below), so the model needs no analyser.
VOCAB = ["wire", "limit", "risk", "credit", "loan", "fraud", "audit", "breach", "client", "year"]
#: Words no document holds.
JUNK = ["zebra", "quartz"]
#: ACLs: P reads through its account ``P``, its group ``g`` and ``*``; O through ``O``, ``h``.
READABLE = [("P",), ("g",), ("*",), ("O", "P")]
UNREADABLE = [("O",), ("h",), ()]
CALLER_READS = {"P", "g", "*"}
SHARES = [0.6, 0.34, 0.5, 0.7, 0.75, 1.0]
IDENTITIES: list[Record] = [
    ident("p@x.example", "P"),
    ident("o@x.example", "O"),
    group("g", ["P"]),
    group("h", ["O"]),
]


@dataclass(frozen=True)
class MDoc:
    index: int
    words: frozenset[str]
    acl: tuple[str, ...]
    level: int
    corpus: str

    @property
    def author(self) -> str:
        """Each document its own author, so the marker's contacts say which ones count."""
        return f"a{self.index}"

    @property
    def email(self) -> str:
        return f"a{self.index}@x.example"

    def record(self) -> Record:
        return doc(f"d{self.index}", " ".join(sorted(self.words)), list(self.acl),
                   corpus=self.corpus, classification=Classification(self.level).name.lower(),
                   author=self.author)  # fmt: skip


@dataclass(frozen=True)
class Case:
    docs: tuple[MDoc, ...]
    query: tuple[str, ...]
    share: float
    clearance: int
    corpora: tuple[str, ...] | None
    #: Documents deleted for the last check (the others stay).
    removed: frozenset[int]


@st.composite
def cases(draw: st.DrawFn) -> Case:
    docs: list[MDoc] = []
    for i in range(draw(st.integers(min_value=1, max_value=7))):
        fresh = st.sets(st.sampled_from(VOCAB), min_size=2, max_size=6).map(frozenset)
        # Often a copy of an earlier document's words: several hidden documents then answer
        # the same question (the attack that counted copies).
        words = draw(fresh | st.sampled_from([d.words for d in docs]) if docs else fresh)
        docs.append(MDoc(
            index=i,
            words=words,
            acl=draw(st.sampled_from(UNREADABLE + UNREADABLE + READABLE)),
            level=draw(st.integers(min_value=0, max_value=3)),
            corpus=draw(st.sampled_from(["c1", "c2"])),
        ))  # fmt: skip
    # Mostly words of one of the documents (a question about it), with others mixed in.
    about = sorted(draw(st.sampled_from(docs)).words)
    query = draw(st.lists(st.sampled_from(about), min_size=1, max_size=5, unique=True))
    if len(query) == 1 and draw(st.booleans()):
        query += about  # one-word probes are in the mix, but questions are the point
    query += draw(st.lists(st.sampled_from(VOCAB + JUNK), max_size=4))
    return Case(
        docs=tuple(docs),
        query=tuple(query),
        share=draw(st.sampled_from(SHARES)),
        clearance=draw(st.sampled_from([0, 1, 2, 3, 3, 3])),
        corpora=draw(st.sampled_from([None, None, ("c1",), ("c2",), ("c1", "c2")])),
        removed=frozenset(draw(st.sets(st.sampled_from([d.index for d in docs])))),
    )


def counted(case: Case, docs: tuple[MDoc, ...]) -> set[str]:
    """The reference model: the emails of the documents of ``docs`` that count."""
    terms = set(case.query)
    n = len(terms)
    if n < 2:
        return set()
    m = max(2, math.ceil(Fraction(str(case.share)) * n))  # exact: the share as written
    return {
        d.email
        for d in docs
        if d.level <= case.clearance
        and (case.corpora is None or d.corpus in case.corpora)
        and not CALLER_READS & set(d.acl)
        and len(terms & d.words) >= m
    }


def named(store: KnowledgeStore, case: Case, tenant: str, strategy: Strategy) -> set[str]:
    caller = Principal(sub="p", email="p@x.example", tenant=tenant,
                       clearance=Classification(case.clearance))  # fmt: skip
    request = SearchRequest(query=" ".join(case.query), strategy=strategy, corpora=case.corpora)
    hidden = store.search(caller, request).hidden
    assert hidden.present == bool(hidden.sources)
    return {s.author_email or "" for s in hidden.sources}


def test_the_vocabulary_needs_no_analyser() -> None:
    analyze = default_analyzer().analyze
    assert all(analyze(w) == [w] for w in VOCAB + JUNK)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_the_marker_counts_what_the_model_counts_document_by_document(case: Case) -> None:
    """The marker names exactly the documents the model counts; each document counts alone
    (its own tenant, no other document) exactly as it does among the others; and deleting
    other documents leaves the rest as the model says."""
    people = [*IDENTITIES, *(ident(d.email, d.author) for d in case.docs)]
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(Path(tmp), marker_max_contacts=20, marker_min_term_share=case.share)
        try:
            load(store, [*people, *(d.record() for d in case.docs)], "full")
            want = counted(case, case.docs)
            event(f"{min(len(want), 2)}+ documents count" if want else "no document counts")
            for strategy in Strategy:
                assert named(store, case, "full", strategy) == want, strategy
            for d in case.docs:
                tenant = f"solo{d.index}"
                load(store, [*people, d.record()], tenant)
                alone = named(store, case, tenant, Strategy.KEYWORD)
                assert alone == ({d.email} & want), d
            if case.removed:
                gone = [DeleteRecord(type="delete", source_system="sp", external_id=f"d{i}")
                        for i in sorted(case.removed)]  # fmt: skip
                load(store, list(gone), "full")
                kept = tuple(d for d in case.docs if d.index not in case.removed)
                assert named(store, case, "full", Strategy.KEYWORD) == counted(case, kept)
                assert counted(case, kept) == want - {d.email for d in case.docs
                                                      if d.index in case.removed}  # fmt: skip
        finally:
            store.close()


def test_contacts_come_from_the_first_hidden_documents_by_id(open_store: StoreFactory) -> None:
    """The truth store checks the marker's candidates a few at a time; candidates after the
    first batch still name contacts when the first ones name too few, and stop once enough
    are named: ten documents by Olga, then one each by Pia, Quinn and Rob, name Olga, Pia
    and Quinn (3 contacts by default), never Rob."""
    people = [*PEOPLE, ident("pia@x.example", "P"), ident("quinn@x.example", "Q"),
              ident("rob@x.example", "R")]  # fmt: skip
    hidden = [doc(f"olga-{i:02d}", "corporate clients wire breach", ["O"], author="O")
              for i in range(10)]  # fmt: skip
    hidden += [doc(f"z-{a}", "corporate clients wire breach", [a], author=a) for a in "PQR"]
    store = open_store()
    load(store, [*people, *hidden])
    assert marker_sources(store, QUESTION) == ["olga@x.example", "pia@x.example",
                                               "quinn@x.example"]  # fmt: skip

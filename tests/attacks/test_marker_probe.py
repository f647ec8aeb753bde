"""Probing the hidden-item marker with crafted queries: a curious principal's attempts.

P may not read O's merger memo but could ask O for it (same tenant, a routed corpus, within
P's clearance), so a real question about it shows P the marker: "relevant material exists,
ask O". A withheld document counts when it holds at least ``max(2, ceil(share * n))`` of the
query's ``n`` distinct terms (``govrag/store/search.py``). P tries to make it answer cheaper
questions: whether the memo says one given word (one-word probes, a word repeated, a word
wrapped in stopwords), or whether it says any word of a long list (a probe padded with junk,
or a whole dictionary sprayed at once, hoping a few hits are enough). Each must show nothing
and spend nothing (no audit event, no budget), while the real question still shows the
marker. On both backends, through the governed path and the store's own search.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from test_marker_oracle import (
    PROBER,
    make_deployment,  # noqa: F401  (the oracle's fixture, used below)
)

from govrag.deployment import Deployment
from govrag.harvest.records import Record
from govrag.store.analyzer import default_analyzer
from govrag.types import SearchRequest, Strategy

from conftest import doc as any_doc

MEMO = "Halvorsen merger terms: the board approves the acquisition at a premium of twelve percent"
#: Beside the oracle's people (P, the prober; O, the memo's author).
RECORDS: list[Record] = [
    any_doc("faq", "quarterly policy overview for branch staff", ["P"], corpus="c1"),
    any_doc("memo", MEMO, ["O"], corpus="c1", author="O"),
]
QUESTION = "What are the terms of the Halvorsen merger?"
#: Words no document holds.
JUNK = [f"zq{i}x" for i in range(40)]
MakeDeployment = Callable[..., Deployment]


@pytest.fixture
def deployment(make_deployment: MakeDeployment) -> MakeDeployment:  # noqa: F811
    """``make_deployment(**search)``: a deployment holding :data:`RECORDS` on each backend
    (the marker oracle's fixture)."""
    return lambda **search: make_deployment(RECORDS, **search)


def shown(dep: Deployment, probe: str) -> bool:
    """Whether any way P asks ``probe`` shows the marker: the governed search and the store's
    own search, in every strategy."""
    for strategy in Strategy:
        if dep.governed.search(PROBER, probe, strategy=strategy).hidden.present:
            return True
        request = SearchRequest(query=probe, strategy=strategy)
        if dep.store.search(PROBER, request).hidden.present:
            return True
    return False


def marker_events(dep: Deployment) -> list[Any]:
    return [e for e in dep.store.audit_events("t1") if e.kind == "hidden_marker"]


def memo_words() -> list[str]:
    """The memo's words as P would type them (stopwords and duplicates dropped)."""
    analyze = default_analyzer().analyze
    return list(dict.fromkeys(w for w in MEMO.replace(":", " ").split() if analyze(w)))


def test_one_word_probes_learn_nothing_and_spend_nothing(deployment: MakeDeployment) -> None:
    dep = deployment(marker_budget=3)
    words = memo_words()
    assert len(words) >= 8
    probes = [*words, *(f"{w} {w} {w.upper()}!" for w in words),
              *(f"the {w} of it, and what about {w}?" for w in words), "zq0x"]  # fmt: skip
    for probe in probes:
        assert not shown(dep, probe), probe
    # Nothing was shown, so nothing was audited and the budget is untouched.
    assert marker_events(dep) == []
    # The real question still shows it, as the first unit of the budget.
    assert dep.governed.search(PROBER, QUESTION).hidden.present
    (event,) = marker_events(dep)
    assert (event.payload["shown"], event.payload["used"]) == (True, 1)


@pytest.mark.parametrize("padding", [1, 3, 8, 20, 40])
def test_padding_a_probe_with_junk_raises_the_bar(deployment: MakeDeployment, padding: int) -> None:
    """Guessed words hidden among junk: the bar never falls as the query grows, so padding
    cannot make a guess cheaper. One guessed word is 1 of at least 2 terms (the bar is at
    least 2); two are 2 of at least 4 (the bar is at least 3)."""
    dep = deployment()
    junk = " ".join(JUNK[:padding])
    guesses = ["merger", "halvorsen", "premium"]
    if padding >= 2:
        guesses += ["merger halvorsen", "premium acquisition"]
    for guess in guesses:
        assert not shown(dep, f"{guess} {junk}"), (guess, padding)
    assert marker_events(dep) == []


def test_a_dictionary_sprayed_at_once_finds_nothing(deployment: MakeDeployment) -> None:
    """The memo's words inside a long list of others: the memo holds each of its own words,
    but they are a small share of the query's terms."""
    dep = deployment()
    words = memo_words()
    analyze = default_analyzer().analyze
    for spray in (JUNK[:30] + words[:4] + JUNK[30:], [*JUNK[:20], *words]):
        terms = set(analyze(" ".join(spray)))
        held = terms & set(analyze(MEMO))
        assert len(held) < 0.5 * len(terms)  # under the default share: it must not count
        assert not shown(dep, " ".join(spray))
    assert marker_events(dep) == []


def test_a_junk_word_does_not_hide_a_real_question(deployment: MakeDeployment) -> None:
    """The other side of the same rule: a question with a word the memo lacks (a typo, an
    extra word) still shows the marker, and the bar counts each term once."""
    dep = deployment()
    assert shown(dep, QUESTION)
    assert shown(dep, "What are the terms of the Halvorsen merger this year?")
    assert shown(dep, "halvorsen merger halvorsen merger halvorsen merger zq0x")  # 2 of 3
    assert not shown(dep, "halvorsen merger zq0x zq1x zq2x")  # 2 of 5: the bar is 3

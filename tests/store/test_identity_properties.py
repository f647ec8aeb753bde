"""Hypothesis: identity merges against an independent reference model (plain dicts).

Random sequences of binds, rebinds (with a right or wrong ``previous_email``), unbinds and
conflicting claims over a few emails and accounts. After every step the store agrees with
the reference on the call's outcome (changed / unchanged / refused), on the ACL epoch (bumped
exactly when something changed), and on what each email can reach: its accounts as the live
rights check reads them, and the documents a search returns (the search path's own
resolution). An email never reaches an account it is not the accepted owner of. A dry run
(``DryRunTarget``) over a store predicts the same outcomes and writes nothing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from govrag.errors import IdentityConflict
from govrag.harvest.harvester import DryRunTarget
from govrag.store.protocol import IngestWrites, KnowledgeStore
from govrag.types import SearchRequest, Strategy

from conftest import doc, examples, load, make_store, principal

EMAILS = ["u0@x.example", "u1@x.example", "u2@x.example"]
ACCOUNTS = ["a0", "a1", "a2"]
CHANGED, UNCHANGED, REFUSED = "changed", "unchanged", "refused"

emails = st.sampled_from(EMAILS)
accounts = st.sampled_from(ACCOUNTS)
operations = st.one_of(
    st.tuples(st.just("bind"), emails, accounts),
    st.tuples(st.just("rebind"), emails, accounts, emails),
    st.tuples(st.just("unbind"), emails, accounts),
)


class Reference:
    """Who owns each account; the rules written out as plainly as possible."""

    def __init__(self) -> None:
        self.owner: dict[str, str] = {}

    def apply(self, op: tuple[str, ...]) -> str:
        kind, email, account = op[0], op[1], op[2]
        current = self.owner.get(account)
        if kind == "unbind":
            if current != email:
                return UNCHANGED
            del self.owner[account]
            return CHANGED
        if current == email:
            return UNCHANGED  # re-sent binding (or rebind already applied)
        previous = op[3] if kind == "rebind" and op[3] != email else None
        if current is None and previous is None:
            self.owner[account] = email
            return CHANGED
        if previous is not None and current == previous:
            self.owner[account] = email
            return CHANGED
        return REFUSED  # owned by someone else, or a rebind from a non-owner

    def accounts_of(self, email: str) -> list[str]:
        return sorted(a for a, e in self.owner.items() if e == email)


def run_op(store: IngestWrites, op: tuple[str, ...]) -> str:
    """One operation on a store, or on a dry run's target; its outcome."""
    kind, email, account = op[0], op[1], op[2]
    try:
        if kind == "unbind":
            changed = store.remove_identity("t1", email, "sp", account)
        else:
            previous = op[3] if kind == "rebind" else None
            changed = store.put_identity("t1", email, "sp", account, previous_email=previous)
    except IdentityConflict:
        return REFUSED
    return CHANGED if changed else UNCHANGED


@contextmanager
def ledger() -> Iterator[KnowledgeStore]:
    """A fresh store with one document per account, readable by that account only."""
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(Path(tmp))
        try:
            load(store, [doc(f"doc-{a}", f"ledger entry {a}", [a]) for a in ACCOUNTS])
            yield store
        finally:
            store.close()


def readable_docs(store: KnowledgeStore, email: str) -> set[str]:
    req = SearchRequest(query="ledger", strategy=Strategy.KEYWORD, top_k=10)
    return {h.doc_id for h in store.search(principal(email), req).results}


@settings(max_examples=examples(28), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(operations, min_size=1, max_size=14))
def test_identity_merges_match_the_reference(ops: list[tuple[str, ...]]) -> None:
    with ledger() as store:
        ref = Reference()
        for op in ops:
            epoch = store.acl_epoch("t1")
            expected = ref.apply(op)
            assert run_op(store, op) == expected, (op, ref.owner)
            bumped = store.acl_epoch("t1") > epoch
            assert bumped == (expected == CHANGED), op
            for email in EMAILS:
                mine = ref.accounts_of(email)
                assert store.source_accounts("t1", email, "sp") == mine, (op, email)
                assert readable_docs(store, email) == {f"doc-{a}" for a in mine}, (op, email)
        assert store.stats("t1")["identities"] == len(ref.owner)


@settings(max_examples=examples(28), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stored=st.lists(operations, max_size=8),
    planned=st.lists(operations, min_size=1, max_size=10),
)
def test_a_dry_run_predicts_every_identity_outcome(
    stored: list[tuple[str, ...]], planned: list[tuple[str, ...]]
) -> None:
    """``ingest --dry-run`` answers each identity record as the store would after the
    records before it (bound, unchanged, refused), from the stored owners and its own run,
    and writes nothing."""
    with ledger() as store:
        ref = Reference()
        for op in stored:
            assert run_op(store, op) == ref.apply(op)
        before = {e: store.source_accounts("t1", e, "sp") for e in EMAILS}
        epoch = store.acl_epoch("t1")
        dry = DryRunTarget(store)
        for op in planned:
            assert run_op(dry, op) == ref.apply(op), (op, ref.owner)
        assert {e: store.source_accounts("t1", e, "sp") for e in EMAILS} == before
        assert store.acl_epoch("t1") == epoch

"""No public member of a store, or of a protocol a consumer holds, returns document content
without taking a principal.

Two checks, so a new member cannot slip past either: by signature (every public method whose
return type can carry chunk text or a title must take a ``Principal``), and by calling every
public member that takes no principal on a populated store of each backend and finding no
document's words or title in what it returns. A positive control (the owner's search finds
those words) keeps the second check from passing vacuously.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pydantic
import pytest

from govrag.audit.events import PinnedRetrieval, RoutePinned
from govrag.store.postgres import PostgresStore
from govrag.store.protocol import (
    AccessLedger,
    AuditLog,
    AuditWriter,
    GovernedReads,
    IngestWrites,
    KnowledgeStore,
    SessionStore,
    StoreAdmin,
)
from govrag.store.sqlite import SQLiteStore
from govrag.types import Principal, SearchRequest, Strategy

from conftest import doc, ident, load, principal

SURFACES: list[type] = [
    GovernedReads, IngestWrites, AuditWriter, AuditLog, SessionStore, AccessLedger,
    StoreAdmin, KnowledgeStore, SQLiteStore, PostgresStore,
]  # fmt: skip
#: Fields through which a value carries document content.
CONTENT_FIELDS = {"text", "title", "snippet", "content", "body"}
SECRET_TEXT = "quokka zanzibar protocol"
SECRET_TITLE = "Marmalade Ledger"


def public_members(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


def carries_content(tp: Any, seen: set[Any] | None = None) -> bool:
    """Whether a value of type ``tp`` can hold document content (a content field, anywhere)."""
    seen = set() if seen is None else seen
    if tp in seen or tp is None or tp is type(None):
        return False
    seen.add(tp)
    args = typing.get_args(tp)
    if args:
        return any(carries_content(a, seen) for a in args if not isinstance(a, int | str))
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        fields = {n: f.annotation for n, f in tp.model_fields.items()}
    elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
        fields = typing.get_type_hints(tp)
    else:
        return False
    return bool(CONTENT_FIELDS & set(fields)) or any(
        carries_content(t, seen) for t in fields.values()
    )


def test_the_gateway_facade_is_small() -> None:
    assert len(public_members(GovernedReads)) <= 12, public_members(GovernedReads)
    # Every narrow protocol is part of the whole, so a store is each of them.
    for part in SURFACES[:-3]:
        assert set(public_members(part)) <= set(public_members(KnowledgeStore)), part


@pytest.mark.parametrize("cls", SURFACES, ids=lambda c: c.__name__)
def test_content_needs_a_principal_by_signature(cls: type) -> None:
    checked = 0
    for name in public_members(cls):
        member = getattr(cls, name)
        if not callable(member) or isinstance(member, type):
            continue
        hints = typing.get_type_hints(member)
        if not carries_content(hints.get("return")):
            continue
        checked += 1
        params = {k: v for k, v in hints.items() if k != "return"}
        assert Principal in params.values(), (
            f"{cls.__name__}.{name} returns document content without taking a Principal"
        )
    if hasattr(cls, "search"):
        assert checked >= 1  # search, at least: the check is not vacuous


def test_the_primitives_are_not_public() -> None:
    """What run_search composes (rankings without the caller's tokens, chunk reads by id)
    is no public member of any store or protocol."""
    primitives = {
        "lexical_leg", "vector_leg", "chunk_info", "withheld_chunks", "readable_chunks",
        "filtered_doc_ids", "resolve_access", "known_corpora", "vector_space",
    }  # fmt: skip
    for cls in SURFACES:
        assert not primitives & set(public_members(cls)), cls


def _call(store: KnowledgeStore, name: str) -> Any:
    """Call member ``name`` (which takes no principal) with plausible arguments."""
    t = "t1"
    calls: dict[str, Any] = {
        "access_counts": lambda: store.access_counts(t),
        "account_owner": lambda: store.account_owner(t, "sp", "A"),
        "acl_epoch": lambda: store.acl_epoch(t),
        "append_audit": lambda: store.append_audit(t, "probe", {}, request_id="r", session_id="s"),
        "audit_chain": lambda: store.audit_chain(t),
        "audit_events": lambda: store.audit_events(t),
        "audit_session_pinned": lambda: store.audit_session_pinned(t, "s1"),
        "audit_tenants": lambda: store.audit_tenants(),
        "consume_marker": lambda: store.consume_marker(t, "ana@x.example", window=60, budget=5),
        "create_session": lambda: store.create_session(
            t,
            "s1",
            RoutePinned(
                sub="ana", route_id="r", retrieval=PinnedRetrieval(), route_table_version="v"
            ),
            request_id="r",
        ),
        "curate": lambda: store.curate(t),
        "delete_document": lambda: store.delete_document(t, "sp", "no-such-doc"),
        "describe_corpus": lambda: store.describe_corpus(t, "main", "the main corpus"),
        "document_writer": lambda: store.document_writer(t, "sp", "secret"),
        "generation": lambda: store.generation(t),
        "group_writer": lambda: store.group_writer(t, "sp", "G"),
        "identity_writer": lambda: store.identity_writer(t, "sp", "A"),
        "get_session": lambda: store.get_session(t, "s1"),
        "incidents": lambda: store.incidents(t),
        "is_empty": lambda: store.is_empty(t),
        "list_corpora": lambda: store.list_corpora(t),
        "observe_audit": lambda: store.observe_audit(lambda event: None),
        "put_group": lambda: store.put_group(t, "sp", "G", ["A"]),
        "put_identity": lambda: store.put_identity(t, "cy@x.example", "sp", "C"),
        "rebuild_index": lambda: store.rebuild_index(t),
        "schema_version": lambda: store.schema_version(),
        "record_access": lambda: store.record_access(t, [("sp", "secret")]),
        "record_incident": lambda: store.record_incident(t, "probe", {}),  # type: ignore[attr-defined]
        "remove_identity": lambda: store.remove_identity(t, "cy@x.example", "sp", "C"),
        "source_accounts": lambda: store.source_accounts(t, "ana@x.example", "sp"),
        "stats": lambda: store.stats(t),
        "stored_hashes": lambda: store.stored_hashes(t, [("sp", "secret")]),
        "sync_indexes": lambda: store.sync_indexes(t),
        "tenants": lambda: store.tenants(),
        "verify_audit": lambda: store.verify_audit(t),
        "verify_index": lambda: store.verify_index(t),
    }
    return calls[name]()


#: Members that take no principal and are not called: attributes and the lifecycle,
#: put_document (its argument is the content), and back_up, which writes the whole store to a
#: file by design: it is the operator's (``Operators.back_up``), which no edge serving callers
#: or examiners holds (tests/server/test_served_roles.py).
NOT_CALLED = {"backend", "dialect", "close", "drop_tenant", "put_document", "back_up"}


def test_no_member_without_a_principal_returns_content(store: KnowledgeStore) -> None:
    load(
        store,
        [
            ident("ana@x.example", "A"),
            doc("secret", f"the {SECRET_TEXT} is kept here", ["A"], title=SECRET_TITLE),
        ],
    )
    # Positive control: the owner's search shows the words, so their absence below counts.
    request = SearchRequest(query="quokka", strategy=Strategy.KEYWORD)
    hits = store.search(principal("ana@x.example"), request).results
    assert hits and "quokka" in hits[0].text
    called = []
    for name in public_members(type(store)):
        member = getattr(type(store), name)
        if name in NOT_CALLED or not callable(member):
            continue
        params = typing.get_type_hints(member)
        if Principal in params.values():
            continue
        result = _call(store, name)  # a KeyError here: a new member to add to _call
        called.append(name)
        shown = repr(result).casefold()
        for word in (*SECRET_TEXT.split(), *SECRET_TITLE.casefold().split()):
            assert word not in shown, (name, result)
    assert len(called) >= 25, called
    # The owner's search still works after every call above.
    assert store.search(principal("ana@x.example"), request).results

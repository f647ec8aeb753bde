"""Shared fixtures: real SQLite stores on temp dirs, records built in code."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from govrag.embed.hashing import HashEmbedder
from govrag.harvest.ingest import Ingestor
from govrag.harvest.records import DocumentRecord, GroupRecord, IdentityRecord, Record
from govrag.settings import SearchSettings
from govrag.store.protocol import KnowledgeStore
from govrag.store.sqlite import SQLiteStore
from govrag.types import Classification, Principal


def make_store(root: Path, **search: Any) -> SQLiteStore:
    return SQLiteStore(
        root / "govrag.db",
        index_dir=root / "index",
        embedder=HashEmbedder(dim=64),
        search=SearchSettings(**search),
    )


#: Backends the conformance tests run against. Each entry opens a store on named storage:
#: the same name twice gives two independent handles (as two processes would have) on the
#: same data. PostgreSQL joins this table with its backend.
StoreFactory = Callable[..., KnowledgeStore]
BACKENDS = ["sqlite"]


@pytest.fixture(params=BACKENDS)
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """``open_store(name="main", **search_settings)``: a store of the parametrized backend."""
    opened: list[KnowledgeStore] = []

    def factory(name: str = "main", **search: Any) -> KnowledgeStore:
        if request.param == "sqlite":
            s: KnowledgeStore = make_store(tmp_path / name, **search)
        else:  # pragma: no cover - a backend listed without a factory
            raise NotImplementedError(request.param)
        opened.append(s)
        return s

    yield factory
    for s in opened:
        s.close()


@pytest.fixture
def store(open_store: StoreFactory) -> KnowledgeStore:
    return open_store()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    """For tests of SQLite internals (outside the conformance suite)."""
    s = make_store(tmp_path / "sqlite")
    yield s
    s.close()


def ident(email: str, account: str, source: str = "sp") -> IdentityRecord:
    return IdentityRecord(type="identity", email=email, source_system=source, account_id=account)


def group(group_id: str, members: list[str], source: str = "sp") -> GroupRecord:
    return GroupRecord(type="group", source_system=source, group_id=group_id, members=members)


def doc(
    external_id: str,
    text: str,
    acl: list[str],
    *,
    corpus: str = "main",
    source: str = "sp",
    classification: str = "internal",
    author: str | None = None,
    title: str = "",
    metadata: dict[str, Any] | None = None,
) -> DocumentRecord:
    return DocumentRecord(
        type="document",
        source_system=source,
        external_id=external_id,
        corpus=corpus,
        title=title,
        text=text,
        acl=acl,
        classification=Classification.parse(classification),
        author=author,
        metadata=metadata or {},
    )


def load(store: KnowledgeStore, records: list[Record], tenant: str = "t1") -> None:
    ingestor = Ingestor(store, tenant, embedder=store.embedder)
    for i, record in enumerate(records):
        ingestor.add(f"record {i}", record)
    ingestor.flush()
    assert ingestor.report.errors == 0, ingestor.report.messages


def principal(
    email: str, tenant: str = "t1", clearance: str = "restricted", sub: str | None = None
) -> Principal:
    return Principal(
        sub=sub or email.split("@")[0], email=email, tenant=tenant, clearance=clearance
    )

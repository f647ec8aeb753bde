"""The live rights check over real HTTP on loopback: fail-closed under every fault."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import pytest

from govrag.gateway.rights import RightsTrim, StoredAclChecker
from govrag.gateway.rights_http import HttpRightsChecker
from govrag.types import Principal, SearchHit
from rights_server import RightsSource, serve, unanswered_connect

from conftest import principal

#: An upper bound only: a healthy loopback source answers in milliseconds, and a CI host
#: under load must never turn a healthy answer (or another fault) into a timeout.
DEADLINE_MS = 30_000
#: The timeout faults: a deadline against a source that holds every answer back until the
#: test ends, so only the deadline can end the check (whatever the machine's load).
TIMEOUT_DEADLINE_MS = 25
RUNS = 100
CALLER = principal("ana@x.example")


def hits(n: int = 20, source: str = "sp") -> list[SearchHit]:
    """The final top-20 of a request: 20 chunks of 10 documents."""
    return [
        SearchHit(doc_id=f"d{i // 2}", chunk_id=f"{source}:d{i // 2}#{i % 2}", corpus="c",
                  source_system=source, score=1.0 - i / 100, text=f"chunk {i}")
        for i in range(n)
    ]  # fmt: skip


def accounts_of(tenant: str, email: str, source_system: str) -> list[str]:
    return ["A"] if email == CALLER.email else []


@pytest.fixture
def source() -> RightsSource:
    s = RightsSource()
    s.grant("A", *(f"d{i}" for i in range(10)))
    return s


@pytest.fixture
def url(source: RightsSource) -> Iterator[str]:
    with serve(source) as u:
        yield u


def checker(url: str, **kw: object) -> HttpRightsChecker:
    options: dict[str, object] = {"deadline_ms": DEADLINE_MS, "batch_size": 4, "concurrency": 3}
    options.update(kw)
    return HttpRightsChecker(url, accounts_of, **options)  # type: ignore[arg-type]


def test_a_healthy_source_confirms_everything_it_grants(url: str, source: RightsSource) -> None:
    trim = RightsTrim(checker(url))
    kept, withheld, checks = trim.trim(CALLER, hits())
    assert [h.chunk_id for h in kept] == [h.chunk_id for h in hits()]  # all, in order
    assert withheld.count == 0
    assert [(c.source_system, c.checker, c.status, c.checked, c.withheld) for c in checks] == [
        ("sp", "http", "ok", 20, 0)
    ]
    assert source.requests == 3  # 10 documents in batches of 4


def test_a_revocation_at_the_source_is_withheld(url: str, source: RightsSource) -> None:
    source.revoke("A", "d3")
    kept, withheld, _ = RightsTrim(checker(url)).trim(CALLER, hits())
    assert "d3" not in {h.doc_id for h in kept} and len(kept) == 18
    assert withheld.count == 2 and withheld.reasons == {"revoked": 2}


FAULTS = [
    # (mode, expected reason, expected source status)
    ("connect_timeout", "source_unavailable", "source_unavailable"),
    ("read_timeout", "source_unavailable", "source_unavailable"),
    ("5xx", "source_unavailable", "source_unavailable"),
    ("429", "source_unavailable", "source_unavailable"),
    ("malformed_json", "malformed_response", "malformed_response"),
    ("wrong_shape", "malformed_response", "malformed_response"),
    ("partial", "unknown_document", "ok"),
    ("unknown_account", "unknown_account", "unknown_account"),
    ("checker_raising", "checker_error", "checker_error"),
]


@pytest.mark.parametrize(("mode", "reason", "status"), FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_matrix_every_unverified_chunk_is_withheld(
    source: RightsSource, mode: str, reason: str, status: str
) -> None:
    with ExitStack() as stack:
        if mode == "connect_timeout":
            url = stack.enter_context(unanswered_connect())
        else:
            url = stack.enter_context(serve(source))
        source.mode = mode
        source.delay_s = 3600.0  # held back until the server stops (see rights_server)
        deadline_ms = TIMEOUT_DEADLINE_MS if mode.endswith("timeout") else DEADLINE_MS
        lookup = accounts_of
        if mode == "checker_raising":

            def lookup(tenant: str, email: str, source_system: str) -> list[str]:
                raise RuntimeError("identity directory offline")

        http = HttpRightsChecker(url, lookup, deadline_ms=deadline_ms, batch_size=4,
                                 concurrency=3)  # fmt: skip
        stack.callback(http.close)
        trim = RightsTrim(http)
        served = unverified = 0
        # Held-back answers keep a server thread each until the test ends: fewer runs.
        runs = RUNS // 5 if mode.endswith("timeout") else RUNS
        for _ in range(runs):
            # Returning at all bounds the check: a read_timeout answer never comes before
            # the server stops, and a connect_timeout connect never completes.
            kept, withheld, checks = trim.trim(CALLER, hits())
            # Partial answers confirm what they name; every other chunk is unverified.
            confirmed_docs = {h.doc_id for h in kept}
            assert all(h.doc_id in confirmed_docs for h in kept)
            unverified += withheld.count
            served += sum(1 for h in kept if mode != "partial")
            assert withheld.count + len(kept) == 20
            assert withheld.reasons.get(reason, 0) == withheld.count > 0
            assert checks[0].status == status
        assert served == 0
        if mode == "partial":
            assert unverified == runs * 10  # half the documents answered, half withheld
        else:
            assert unverified == runs * 20
        assert not source.release.is_set()  # nothing was answered: the deadline ended it


def test_a_caller_without_an_account_at_the_source_is_withheld_without_asking(
    url: str, source: RightsSource
) -> None:
    stranger = Principal(sub="s", email="s@x.example", tenant="t1")
    kept, withheld, _ = RightsTrim(checker(url)).trim(stranger, hits())
    assert kept == [] and withheld.reasons == {"unknown_account": 20}
    assert source.requests == 0


def test_each_source_system_gets_its_own_checker(
    url: str, source: RightsSource, sqlite_store: object
) -> None:
    mixed = hits(4, "sp") + hits(4, "wiki")
    source.mode = "5xx"
    # sp answers 503; wiki uses the stored ACL (here: an empty store, so nothing readable).
    trim = RightsTrim(StoredAclChecker(sqlite_store), {"sp": checker(url)})  # type: ignore[arg-type]
    kept, withheld, checks = trim.trim(CALLER, mixed)
    assert kept == []
    assert withheld.reasons == {"revoked": 4, "source_unavailable": 4}
    assert [(c.source_system, c.checker, c.status) for c in checks] == [
        ("sp", "http", "source_unavailable"),
        ("wiki", "stored", "ok"),
    ]


@pytest.mark.parametrize("mode", ["5xx", "malformed_json"])
def test_the_log_never_shows_credentials_in_the_source_url(
    source: RightsSource, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A rights service behind basic auth, or one taking a key in the query: the warnings a
    # failed check logs name the service, never the secret.
    with serve(source) as url:
        secret_url = url.replace("http://", "http://svc:hunter2@", 1) + "?key=QK3Y"
        source.mode = mode
        http = HttpRightsChecker(secret_url, accounts_of, deadline_ms=DEADLINE_MS)
        try:
            with caplog.at_level("WARNING", logger="govrag"):
                _, withheld, _ = RightsTrim(http).trim(CALLER, hits())
        finally:
            http.close()
    assert withheld.count == 20
    logged = caplog.text
    assert "rights check at http://svc:***@127.0.0.1" in logged
    assert "hunter2" not in logged and "QK3Y" not in logged

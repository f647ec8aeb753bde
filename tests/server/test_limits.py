"""The server's limits over real HTTP, each tested at its bound: the body size (declared and
chunked), the rate per verified principal (a clock the test moves), the in-flight bound and the
deadline (a real search held open inside the governed path). A refused request leaves no
audit event; an admitted one runs the whole governed path."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from serving import Hold, seed_bank, start, wait_for

import govrag
from govrag.server import create_app

MAX_BODY = 2048
PROBLEMS = "https://govrag.dev/problems/"
SEARCH = {"query": "wire limit", "strategy": "keyword"}


class Clock:
    """The rate limit's clock: seconds that pass only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[govrag.Govrag]:
    root = seed_bank(tmp_path_factory.mktemp("limits") / "bank")
    server = {"max_body_bytes": MAX_BODY, "rate_per_minute": 6, "rate_burst": 3,
              "max_in_flight": 1, "deadline_s": 4.0}  # fmt: skip
    with govrag.open(root, auth={"dev_tokens": True, "tenants": ["bank"]},
                     server=server) as opened:  # fmt: skip
        # Warm the path (policy engine, indexes) so no test's request nears the deadline.
        ana = govrag.local_principal(opened.settings, "ana")
        opened.callers.search(ana, "wire", strategy=govrag.Strategy.KEYWORD)
        yield opened


@pytest.fixture(scope="module")
def hold(app: govrag.Govrag) -> Hold:
    hold = Hold()
    app.operators.observe_audit(hold)
    return hold


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def api(app: govrag.Govrag, hold: Hold, clock: Clock) -> FastAPI:
    api = create_app(app)
    api.state.limits.buckets.clock = clock  # the rate limit's clock is the test's
    return api


@pytest.fixture(scope="module")
def url(api: FastAPI) -> Iterator[str]:
    live = start(api)
    yield live.url
    live.stop()


@pytest.fixture(scope="module")
def client(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=60) as c:
        yield c


@pytest.fixture(autouse=True)
def _full_buckets(clock: Clock) -> None:
    clock.now += 3600.0  # an hour later every bucket is full again


def bearer(app: govrag.Govrag, sub: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {app.operators.dev_token(sub)}",
        "content-type": "application/json",
    }


def refused(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = r.json()
    assert body["type"] == PROBLEMS + code and body["status"] == status
    return body


def padded(size: int) -> bytes:
    """A valid search body of exactly ``size`` bytes (JSON allows trailing blanks)."""
    return b'{"query": "wire limit", "strategy": "keyword"}'.ljust(size)


# -- body size --------------------------------------------------------------------------------


def test_a_body_at_the_bound_is_taken_one_byte_more_is_a_413(
    client: httpx.Client, app: govrag.Govrag, hold: Hold
) -> None:
    assert client.post("/v1/search", content=padded(MAX_BODY),
                       headers=bearer(app, "ana")).status_code == 200  # fmt: skip
    before = len(hold.events)
    r = client.post("/v1/search", content=padded(MAX_BODY + 1), headers=bearer(app, "ana"))
    body = refused(r, 413, "payload-too-large")
    assert str(MAX_BODY) in body["detail"] and r.headers["connection"] == "close"
    assert len(hold.events) == before  # nothing was audited: nothing ran


def test_a_chunked_body_is_counted_as_it_is_read(
    client: httpx.Client, app: govrag.Govrag, hold: Hold
) -> None:
    def chunks(size: int) -> Iterator[bytes]:
        data = padded(size)
        yield from (data[i : i + 500] for i in range(0, len(data), 500))

    ok = client.post("/v1/search", content=chunks(MAX_BODY), headers=bearer(app, "ana"))
    assert ok.status_code == 200 and ok.request.headers["transfer-encoding"] == "chunked"
    before = len(hold.events)
    r = client.post("/v1/search", content=chunks(MAX_BODY + 1), headers=bearer(app, "ana"))
    refused(r, 413, "payload-too-large")
    assert len(hold.events) == before


def test_a_declared_length_over_the_bound_is_refused_before_the_body_is_sent(url: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        # Headers only: were the server waiting for the gigabyte announced, recv would time out.
        s.sendall(b"POST /v1/search HTTP/1.1\r\nHost: govrag\r\ncontent-type: application/json"
                  b"\r\nContent-Length: 1000000000\r\n\r\n")  # fmt: skip
        answer = b""
        while chunk := s.recv(65536):  # the server closes the connection after the 413
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 ") and b"payload-too-large" in body


# -- rate per principal -----------------------------------------------------------------------


def test_the_burst_is_admitted_and_the_next_request_is_a_429(
    client: httpx.Client, app: govrag.Govrag, hold: Hold, clock: Clock
) -> None:
    for _ in range(3):  # rate_burst
        assert client.post("/v1/search", json=SEARCH, headers=bearer(app, "ana")).status_code == 200
    before = len(hold.events)
    r = client.post("/v1/search", json=SEARCH, headers=bearer(app, "ana"))
    refused(r, 429, "rate-limited")
    assert r.headers["retry-after"] == "10"  # 6 a minute: the next token in 10 s
    assert len(hold.events) == before  # refused before the use case: nothing audited
    clock.now += 9.5
    r = client.post("/v1/search", json=SEARCH, headers=bearer(app, "ana"))
    assert r.status_code == 429 and r.headers["retry-after"] == "1"  # 0.5 s, rounded up
    clock.now += 0.5
    assert client.post("/v1/search", json=SEARCH, headers=bearer(app, "ana")).status_code == 200


def test_each_principal_has_its_own_bucket(client: httpx.Client, app: govrag.Govrag) -> None:
    for _ in range(3):
        client.post("/v1/search", json=SEARCH, headers=bearer(app, "ana"))
    assert client.post("/v1/search", json=SEARCH, headers=bearer(app, "ana")).status_code == 429
    assert client.post("/v1/search", json=SEARCH, headers=bearer(app, "ben")).status_code == 200


def test_unauthenticated_requests_take_from_no_bucket(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    forged = app.operators.dev_token("ana")[:-4] + "AAAA"
    for headers in ({}, {"Authorization": "Bearer junk"}, {"Authorization": f"Bearer {forged}"}):
        for _ in range(4):
            assert client.post("/v1/search", json=SEARCH, headers=headers).status_code == 401
    statuses = [client.post("/v1/search", json=SEARCH, headers=bearer(app, "ana")).status_code
                for _ in range(4)]  # fmt: skip
    assert statuses == [200, 200, 200, 429]


# -- in-flight bound and deadline -------------------------------------------------------------


def test_a_full_server_refuses_at_once_and_a_late_answer_is_a_503(
    client: httpx.Client, url: str, api: FastAPI, app: govrag.Govrag, hold: Hold
) -> None:
    answers: dict[str, httpx.Response] = {}

    def held_search() -> None:
        with httpx.Client(base_url=url, timeout=60) as own:
            answers["held"] = own.post("/v1/search", json={**SEARCH, "query": "held wire"},
                                       headers=bearer(app, "ana"))  # fmt: skip

    hold.arm()
    caller = threading.Thread(target=held_search)
    caller.start()
    assert hold.entered.wait(60), "the held search never reached the policy gate"
    held_id = hold.events[-1][0]
    try:
        before = len(hold.events)
        r = client.post("/v1/search", json=SEARCH, headers=bearer(app, "ben"))
        refused(r, 503, "overloaded")
        assert r.headers["retry-after"] == "1"
        assert len(hold.events) == before  # refused at the door: nothing audited
        assert client.get("/healthz").status_code == 200
        # The held caller gets its answer at the deadline while its work is still held.
        caller.join(60)
        late = answers["held"]
        body = refused(late, 503, "deadline-exceeded")
        assert body["request_id"] == late.headers["x-request-id"]
        # The work still runs, so it still holds its slot: the server is still full.
        refused(client.post("/v1/search", json=SEARCH, headers=bearer(app, "ben")), 503,
                "overloaded")  # fmt: skip
    finally:
        hold.release.set()
    wait_for(lambda: api.state.limits.in_flight == 0, "the held work to end")
    # The held use case ran to its end and closed its audit trail (a search ends validated).
    assert hold.kinds(held_id)[-1] == "validation"
    # Admitted again, a request runs the whole governed path: its ALLOW before its pack.
    ok = client.post("/v1/search", json=SEARCH, headers=bearer(app, "ben"))
    assert ok.status_code == 200, ok.text
    kinds = hold.kinds(ok.json()["request_id"])
    assert kinds.index("pep_decision") < kinds.index("context_pack")


def test_settings_bounds_are_enforced(tmp_path: Path) -> None:
    with pytest.raises(govrag.ConfigError, match=r"server\.max_in_flight"):
        govrag.open(tmp_path, server={"max_in_flight": 0})
    with pytest.raises(govrag.ConfigError, match=r"unknown field 'server\.max_body_byte'"):
        govrag.open(tmp_path, server={"max_body_byte": 10})

"""Operating the HTTP edge: request ids, the access log (one JSON line per request, never a
token, a body, a query string or document text), the Prometheus metrics (counts that move
with what the governed path decided, nothing that names a caller or a query) and the
graceful drain ``govrag serve`` configures."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from serving import Hold, seed_bank, start

import govrag
from govrag.cli.serve import uvicorn_options
from govrag.server import create_app

QUERY = "corporate wire limit"
SECRET_QS = "q=confidential-merger-plans"


class Lines(logging.Handler):
    """The records of ``govrag.access``, as parsed JSON."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.raw: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.raw.append(record.getMessage())

    def find(self, request_id: str) -> dict[str, Any]:
        found = [json.loads(line) for line in self.raw if request_id in line]
        assert len(found) == 1, (request_id, self.raw[-5:])
        line: dict[str, Any] = found[0]
        return line


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[govrag.Govrag]:
    root = seed_bank(tmp_path_factory.mktemp("ops") / "bank")
    with govrag.open(root, auth={"dev_tokens": True, "tenants": ["bank"]},
                     server={"max_body_bytes": 4096, "drain_s": 20}) as opened:  # fmt: skip
        yield opened


@pytest.fixture(scope="module")
def hold(app: govrag.Govrag) -> Hold:
    hold = Hold()
    app.operators.observe_audit(hold)
    return hold


@pytest.fixture(scope="module")
def api(app: govrag.Govrag, hold: Hold) -> FastAPI:
    api = create_app(app)

    # A route of the kind later increments add: a path parameter, and a handler that links
    # its request to the audit log.
    @api.get("/v1/things/{thing_id}")
    def thing(thing_id: str, request: Request) -> dict[str, str]:
        request.state.audit_request_id = f"req-of-{thing_id}"
        return {"thing": thing_id}

    return api


@pytest.fixture(scope="module")
def lines() -> Iterator[Lines]:
    handler = Lines()
    logger = logging.getLogger("govrag.access")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture(scope="module")
def client(api: FastAPI, lines: Lines) -> Iterator[httpx.Client]:
    live = start(api)
    with httpx.Client(base_url=live.url, timeout=60) as c:
        yield c
    live.stop()


def bearer(app: govrag.Govrag, sub: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {app.operators.dev_token(sub)}"}


def sample(exposition: str, name: str, **labels: str) -> float:
    """The value of one sample of a text exposition (0 when absent)."""
    for line in exposition.splitlines():
        match = re.fullmatch(r"([a-z_:]+)(?:\{(.*)\})? (\S+)", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if found == labels:
            return float(match.group(3))
    return 0.0


# -- request ids and the access log -----------------------------------------------------------


def test_every_answer_carries_its_own_request_id(client: httpx.Client, app: govrag.Govrag) -> None:
    answers = [client.get("/healthz"), client.post("/v1/search", json={"query": "x"}),
               client.get("/nowhere"), client.get("/healthz")]  # fmt: skip
    ids = [r.headers["x-request-id"] for r in answers]
    assert all(re.fullmatch(r"http-[0-9a-f]{16}", i) for i in ids) and len(set(ids)) == 4


def test_a_search_is_one_line_without_token_query_or_text(
    client: httpx.Client, app: govrag.Govrag, lines: Lines
) -> None:
    token = app.operators.dev_token("ana")
    r = client.post(f"/v1/search?{SECRET_QS}", json={"query": QUERY, "strategy": "keyword"},
                    headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert r.status_code == 200 and r.json()["results"], r.text
    raw = next(line for line in lines.raw if r.headers["x-request-id"] in line)
    for secret in (token, token.split(".")[2], QUERY, "confidential", "50,000", "wire-limits"):
        assert secret not in raw
    line = json.loads(raw)
    assert set(line) == {"time", "request_id", "method", "route", "status", "duration_ms", "sub",
                         "tenant", "audit_request_id"}  # fmt: skip
    assert line["audit_request_id"] == r.json()["request_id"]  # replay finds it by this id
    assert line["method"] == "POST" and line["route"] == "/v1/search" and line["status"] == 200
    assert (line["sub"], line["tenant"]) == ("ana", "bank")
    assert isinstance(line["duration_ms"], float) and line["time"].endswith("+00:00")


def test_a_refused_token_is_logged_without_a_caller(client: httpx.Client, lines: Lines) -> None:
    r = client.post("/v1/search", json={"query": QUERY}, headers={"Authorization": "Bearer xyz"})
    line = lines.find(r.headers["x-request-id"])
    assert line["status"] == 401 and "sub" not in line and "tenant" not in line
    assert "xyz" not in json.dumps(line)


def test_the_route_template_is_logged_never_the_path(
    client: httpx.Client, app: govrag.Govrag, lines: Lines
) -> None:
    r = client.get("/v1/things/private-thing-name", headers=bearer(app, "ben"))
    line = lines.find(r.headers["x-request-id"])
    assert line["route"] == "/v1/things/{thing_id}" and line["status"] == 200
    assert line["audit_request_id"] == "req-of-private-thing-name"
    missing = client.get("/v1/secret-path-segment")
    line = lines.find(missing.headers["x-request-id"])
    assert line["route"] == "<unmatched>" and line["status"] == 404


def test_a_refusal_is_logged_with_its_limit(client: httpx.Client, lines: Lines) -> None:
    r = client.post("/v1/search", content=b" " * 5000, headers={"content-type": "application/json"})
    assert r.status_code == 413
    line = lines.find(r.headers["x-request-id"])
    assert line["refused"] == "payload-too-large" and line["route"] == "/v1/search"


# -- metrics ----------------------------------------------------------------------------------


def test_metrics_count_what_the_governed_path_decided(
    client: httpx.Client, app: govrag.Govrag
) -> None:
    before = client.get("/metrics").text
    ana = client.post("/v1/search", json={"query": QUERY, "strategy": "keyword"},
                      headers=bearer(app, "ana"))  # fmt: skip
    ben = client.post("/v1/search", json={"query": QUERY, "strategy": "keyword"},
                      headers=bearer(app, "ben"))  # fmt: skip
    assert ana.status_code == ben.status_code == 200
    too_big = client.post("/v1/search", content=b" " * 5000)
    assert too_big.status_code == 413
    after = client.get("/metrics")
    assert after.status_code == 200 and after.headers["content-type"].startswith("text/plain")
    text = after.text

    def moved(name: str, **labels: str) -> float:
        return sample(text, name, **labels) - sample(before, name, **labels)

    assert moved("govrag_http_requests_total", route="/v1/search", status="200") == 2
    assert moved("govrag_http_requests_total", route="/v1/search", status="413") == 1
    assert moved("govrag_http_refusals_total", kind="payload-too-large") == 1
    assert moved("govrag_http_request_duration_seconds_count", route="/v1/search") == 3
    assert moved("govrag_pep_decisions_total", verdict="ALLOW", reason="allowed") == 2
    packs = moved("govrag_context_packs_total", cache="hit") + moved(
        "govrag_context_packs_total", cache="miss"
    )
    assert packs == 2
    validations = moved("govrag_validations_total", passed="true") + moved(
        "govrag_validations_total", passed="false"
    )
    assert validations == 2
    # ben may not read the wire document: the marker says something relevant was withheld,
    # to ben; the exposition counts no marker (tests/attacks/test_metrics_oracle.py).
    assert ben.json()["hidden"]["present"]
    assert "hidden_marker" not in text
    assert sample(text, "govrag_http_in_flight") == 0  # /metrics itself is not counted
    # Nothing in it names a caller, a query, a document or its text.
    for secret in ("ana", "ben", "bank.example", QUERY, "wire", "50,000", "card-fees"):
        assert secret not in text


def test_metrics_answer_loopback_and_reveal_no_tenant(client: httpx.Client) -> None:
    r = client.get("/metrics")  # this client is on loopback, and no metrics token is set
    assert r.status_code == 200 and "govrag_pep_decisions_total" in r.text
    assert "bank" not in r.text


def test_each_app_has_its_own_registry(app: govrag.Govrag) -> None:
    # A second app in the same process neither clashes with the first nor shares its counts.
    other = create_app(app)
    assert other.state.metrics.registry is not create_app(app).state.metrics.registry


def test_metrics_and_access_log_can_be_turned_off(app: govrag.Govrag) -> None:
    with govrag.open(app.settings.deployment, auth={"dev_tokens": True, "tenants": ["bank"]},
                     server={"metrics": False, "access_log": False}) as quiet:  # fmt: skip
        api = create_app(quiet)
        assert "/metrics" not in {getattr(r, "path", None) for r in api.routes}
        assert not hasattr(api.state, "metrics")


# -- graceful drain ---------------------------------------------------------------------------


def test_a_stopping_server_drains_the_request_in_flight(
    api: FastAPI, app: govrag.Govrag, hold: Hold
) -> None:
    options = uvicorn_options(app.settings.server)
    assert options == {"timeout_graceful_shutdown": 20.0, "access_log": False,
                       "proxy_headers": False}  # fmt: skip
    # A server of its own, configured as `govrag serve` configures uvicorn.
    live = start(api, **options)
    answers: dict[str, httpx.Response] = {}

    def held_search() -> None:
        with httpx.Client(base_url=live.url, timeout=60) as own:
            answers["held"] = own.post("/v1/search", json={"query": QUERY, "strategy": "keyword"},
                                       headers=bearer(app, "ana"))  # fmt: skip

    hold.arm()
    caller = threading.Thread(target=held_search)
    caller.start()
    try:
        assert hold.entered.wait(60), "the held search never reached the policy gate"
        live.server.should_exit = True  # what SIGTERM does: stop accepting, drain
        with pytest.raises(httpx.TransportError):  # new connections are no longer taken
            for _ in range(200):
                httpx.get(f"{live.url}/healthz", timeout=5)
                threading.Event().wait(0.05)
    finally:
        hold.release.set()
    caller.join(60)
    live.thread.join(60)
    assert answers["held"].status_code == 200 and answers["held"].json()["results"]
    assert not live.thread.is_alive()

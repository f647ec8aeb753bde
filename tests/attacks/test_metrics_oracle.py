"""``GET /metrics`` is neither a membership oracle nor anyone's to read.

The attacker holds a token and has spent its hidden-item marker budget, so searches no longer
tell it whether a document it may not read matches. It reads the Prometheus exposition before
and after a search instead: if any count moved only when hidden material matched (a
``hidden_marker`` event withheld as ``budget_exhausted``), the budget would bound nothing. So
two worlds that differ only in one document the attacker may not read, with the same history
of requests, must serve the same exposition byte for byte (once the latency histogram and
the series' creation times, which move with the clock in both worlds, are set aside).

And the exposition (every tenant's decisions and incidents at once) is the operator's: a
client that is not on loopback, a loopback request relayed by a proxy (a forwarding header,
whatever address it claims), or, with ``[server] metrics_token_env``, any request without
that secret gets one fixed 403.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

import govrag
from govrag.errors import ConfigError
from govrag.server import create_app
from server.serving import UNLIMITED, bank, bearer, serving

FORBIDDEN = {"type": "https://govrag.dev/problems/forbidden", "title": "Forbidden",
             "status": 403, "detail": "GET /metrics is the operator's: send the metrics token, "
             "or scrape from loopback"}  # fmt: skip
#: In ana's wire-limits document only, which ben may not read.
PROBE = "corporate wire limit"
#: In ana's branch-hours document, which ben may not read either: spends ben's one marker.
SPEND = "branches open weekdays"
TOKEN_ENV = "GOVRAG_TEST_METRICS_TOKEN"
TOKEN = "metrics-scraper-secret-0123456789abcdef"


def open_world(root: Path, *, hidden: bool) -> govrag.Govrag:
    """The bank of ``server/serving.py``; without ana's wire-limits document unless
    ``hidden``. ben's marker budget is one marker a day."""
    feed = bank(root)
    if not hidden:
        kept = [line for line in feed.read_text().splitlines()
                if json.loads(line).get("external_id") != "wire-limits"]  # fmt: skip
        feed.write_text("".join(f"{line}\n" for line in kept))
    opened = govrag.open(root, auth={"dev_tokens": True, "tenants": ["bank"]},
                         search={"marker_budget": 1}, server=UNLIMITED)  # fmt: skip
    assert opened.operators.ingest(feed).ok
    return opened


def comparable(exposition: str) -> str:
    """The exposition without what moves with the clock in any world: the latency histogram
    and each series' creation time (its labels are kept: a series that exists in one world
    only still shows)."""
    kept = []
    for line in exposition.splitlines():
        if "govrag_http_request_duration_seconds" in line:
            continue
        kept.append(re.sub(r"^(\S+_created(?:\{.*\})?) \S+$", r"\1 <time>", line))
    return "\n".join(kept)


def attack(app: govrag.Govrag) -> tuple[str, list[dict[str, Any]]]:
    """ben spends his marker, then probes; returns the exposition and his answers."""
    with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        answers = []
        for query in (SPEND, PROBE, PROBE):
            r = client.post("/v1/search", json={"query": query, "strategy": "keyword"},
                            headers=bearer(app, "ben"))  # fmt: skip
            assert r.status_code == 200, r.text
            answers.append(r.json())
        metrics = client.get("/metrics")
        assert metrics.status_code == 200
        return metrics.text, answers


def test_a_spent_marker_budget_leaves_the_exposition_unmoved(tmp_path: Path) -> None:
    seen = {}
    for hidden in (True, False):
        with open_world(tmp_path / f"hidden-{hidden}", hidden=hidden) as app:
            seen[hidden] = attack(app)
    (with_doc, answers_with), (without, answers_without) = seen[True], seen[False]
    # ben's own answers already tell him nothing: one marker shown, then the budget.
    for answers in (answers_with, answers_without):
        assert [a["hidden"]["present"] for a in answers] == [True, False, False]
        assert [a["results"] for a in answers[1:]] == [[], []]
    # The exposition must not tell anyone else either.
    assert comparable(with_doc) == comparable(without)
    assert "hidden_marker" not in with_doc and "budget" not in with_doc


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[govrag.Govrag]:
    with open_world(tmp_path_factory.mktemp("metrics") / "bank", hidden=True) as opened:
        yield opened


@pytest.mark.parametrize("peer", ["203.0.113.7", "10.0.0.5", "::ffff:10.0.0.5", "2001:db8::1",
                                  "testclient"])  # fmt: skip
def test_a_peer_not_on_loopback_is_refused(app: govrag.Govrag, peer: str) -> None:
    with TestClient(create_app(app), client=(peer, 40000)) as client:
        for headers in ({}, {"X-Forwarded-For": "127.0.0.1"}, bearer(app, "eve")):
            r = client.get("/metrics", headers=headers)
            assert r.status_code == 403 and r.json() == FORBIDDEN, (peer, headers)
            assert "govrag_" not in r.text


@pytest.mark.parametrize("header", [{"X-Forwarded-For": "127.0.0.1"},
                                    {"Forwarded": "for=127.0.0.1"}, {"X-Real-IP": "::1"},
                                    {"X-Forwarded-For": "203.0.113.7, 127.0.0.1"}])  # fmt: skip
def test_a_proxied_request_is_refused_even_on_loopback(
    app: govrag.Govrag, header: dict[str, str]
) -> None:
    # A reverse proxy on the same host connects from loopback for anyone on the Internet.
    with serving(app) as url:
        assert httpx.get(f"{url}/metrics", timeout=60).status_code == 200  # a local scraper
        r = httpx.get(f"{url}/metrics", headers=header, timeout=60)
        assert r.status_code == 403 and r.json() == FORBIDDEN


def test_with_a_metrics_token_only_its_holder_reads(
    app: govrag.Govrag, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with govrag.open(app.settings.deployment, auth={"dev_tokens": True, "tenants": ["bank"]},
                     server={"metrics_token_env": TOKEN_ENV}) as guarded:  # fmt: skip
        api = create_app(guarded)
        with serving(guarded) as url:
            refused = [
                httpx.get(f"{url}/metrics", headers=headers, timeout=60)
                for headers in ({}, bearer(guarded, "eve"), {"Authorization": f"Bearer {TOKEN}x"},
                                {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"})
            ]  # fmt: skip
            two = httpx.get(f"{url}/metrics", timeout=60, headers=httpx.Headers(
                [("Authorization", f"Bearer {TOKEN}"), ("Authorization", "Bearer x")]))  # fmt: skip
            scraped = httpx.get(f"{url}/metrics", timeout=60,
                                headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        for r in [*refused, two]:
            assert r.status_code == 403 and r.json() == FORBIDDEN
        assert scraped.status_code == 200 and "govrag_pep_decisions_total" in scraped.text
        # The token is the credential from anywhere (a scraper on another host).
        with TestClient(api, client=("203.0.113.7", 40000)) as remote:
            r = remote.get("/metrics", headers={"Authorization": f"bearer {TOKEN}"})
            assert r.status_code == 200


@pytest.mark.parametrize("value", [None, "", "short"])
def test_a_metrics_token_that_is_missing_or_short_stops_the_server(
    app: govrag.Govrag, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(TOKEN_ENV, raising=False)
    else:
        monkeypatch.setenv(TOKEN_ENV, value)
    with (
        govrag.open(
            app.settings.deployment,
            auth={"dev_tokens": True, "tenants": ["bank"]},
            server={"metrics_token_env": TOKEN_ENV},
        ) as guarded,
        pytest.raises(ConfigError, match=f"environment variable {TOKEN_ENV}"),
    ):
        create_app(guarded)

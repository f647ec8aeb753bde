"""The HTTP API against its own OpenAPI schema: requests generated from the schema
(Schemathesis, valid and invalid alike) sent over real HTTP on loopback with a valid bearer
token.

Every answer must be what the schema says the operation answers: no server error, a status
code the operation documents, the content type it documents, a body that validates against
the documented schema, and an operation that declares bearer security refuses a request
without a token or with a made-up one (Schemathesis's ``ignored_auth`` sends both for each
operation that succeeded with the real one). A failure here is a bug of the edge or of the
use case behind it, never of the test.

Bounded: ``make test`` runs :data:`EXAMPLES` valid and as many invalid cases per operation,
derandomized (300 per operation; the whole file in about 100 s on two cores, alone);
``make test-slow`` runs :data:`DEEP_EXAMPLES` of each with fresh seeds (about 4 minutes). A
check is not assumed to fire: each was seen failing an API that skips auth or answers a 500.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_schema_conformance,
    status_code_conformance,
)
from serving import UNLIMITED, bank, serving

import govrag

#: Cases per operation and mode in ``make test`` and in ``make test-slow``.
EXAMPLES = 150
DEEP_EXAMPLES = 300
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, ignored_auth]  # fmt: skip


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[govrag.Govrag]:
    feed = bank(tmp_path_factory.mktemp("schemathesis") / "bank")
    settings_: dict[str, Any] = {
        "auth": {"dev_tokens": True, "tenants": ["bank", "other"]},
        "writeback": {"enabled": True, "allowed_agents": ["ana"]},
        # Hundreds of requests with one token: the rate limit (tests/server/test_limits.py)
        # would answer most of them 429 and leave the routes untested.
        "server": UNLIMITED,
    }
    with govrag.open(feed.parent, **settings_) as opened:
        assert opened.operators.ingest(feed).ok
        yield opened


@pytest.fixture(scope="module")
def url(app: govrag.Govrag) -> Iterator[str]:
    with serving(app) as base:
        yield base


#: Every operation of the schema (checked against it below, so none is left out).
OPERATIONS = [
    ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"),
    ("POST", "/v1/sessions"), ("GET", "/v1/sessions/{session_id}"),
    ("POST", "/v1/search"), ("POST", "/v1/retrieve"), ("POST", "/v1/ask"),
    ("GET", "/v1/corpora"), ("GET", "/v1/documents/{source_system}/{external_id}"),
    ("POST", "/v1/click"), ("POST", "/v1/memory"),
    ("GET", "/v1/audit/requests/{request_id}"), ("GET", "/v1/audit/verify"),
]  # fmt: skip


@pytest.fixture(scope="module")
def api_schema(url: str) -> Any:
    return schemathesis.openapi.from_url(f"{url}/openapi.json")


def call(case: Any, app: govrag.Govrag, url: str) -> None:
    # A token made now, for each case: a run longer than a token's life stays valid.
    headers = {"Authorization": f"Bearer {app.operators.dev_token('ana')}"}
    case.call_and_validate(base_url=url, headers=headers, checks=CHECKS)


def fuzz(api_schema: Any, app: govrag.Govrag, url: str, method: str, path: str,
         mode: str, examples: int, *, derandomize: bool) -> None:  # fmt: skip
    operation = api_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=GenerationMode(mode)))
    @settings(max_examples=examples, deadline=None, derandomize=derandomize, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def run(case: Any) -> None:
        call(case, app, url)

    run()


def test_the_operations_are_the_schemas(url: str) -> None:
    served = httpx.get(f"{url}/openapi.json").json()["paths"]
    assert {(m.upper(), p) for p, item in served.items() for m in item} == set(OPERATIONS)


#: (operation, mode): an operation without parameters has no invalid request to generate.
CASES = [(method, path, mode) for method, path in OPERATIONS for mode in ("positive", "negative")
         if mode == "positive" or path not in ("/healthz", "/readyz", "/metrics")]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_every_operation_answers_as_its_schema_says(
    api_schema: Any, app: govrag.Govrag, url: str, method: str, path: str, mode: str
) -> None:
    fuzz(api_schema, app, url, method, path, mode, EXAMPLES, derandomize=True)


@pytest.mark.slow
@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_every_operation_answers_as_its_schema_says_deeply(
    api_schema: Any, app: govrag.Govrag, url: str, method: str, path: str, mode: str
) -> None:
    fuzz(api_schema, app, url, method, path, mode, DEEP_EXAMPLES, derandomize=False)

"""The live rights check over HTTP: ask the source system itself (docs/rights-check.md).

One ``POST`` per batch of document ids, batches in flight at most ``concurrency`` at a time,
the whole check bounded by one deadline::

    -> {"source_system": "sharepoint", "accounts": ["S-1"], "doc_ids": ["d1", "d2"]}
    <- {"results": [{"doc_id": "d1", "allowed": true}, {"doc_id": "d2", "allowed": false}],
        "unknown_accounts": [], "unknown_doc_ids": []}

A document is confirmed only by ``"allowed": true`` (a JSON boolean) in a well-formed 200
answer that names no unknown account. Everything else withholds the batch's unconfirmed
documents: a timeout or connection error, a 5xx, 429 or other non-200 status
(``source_unavailable``), a body that is not that shape (``malformed_response``), an unknown
account (``unknown_account``), a document missing from the answer or reported unknown
(``unknown_document``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

import httpx
from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError

from govrag.gateway.rights import (
    MALFORMED_RESPONSE,
    REVOKED,
    SOURCE_UNAVAILABLE,
    UNKNOWN_ACCOUNT,
    UNKNOWN_DOCUMENT,
    RightsCheck,
)
from govrag.store_url import redact_endpoint
from govrag.types import Principal

log = logging.getLogger("govrag.gateway")

#: ``(tenant, email, source_system) -> the caller's accounts there``.
AccountLookup = Callable[[str, str, str], list[str]]


class _Result(BaseModel):
    model_config = ConfigDict(extra="ignore")
    doc_id: str
    allowed: StrictBool


class _Answer(BaseModel):
    # Sources may add fields; what govrag relies on must be exactly this shape.
    model_config = ConfigDict(extra="ignore")
    results: list[_Result]
    unknown_accounts: list[str] = []
    unknown_doc_ids: list[str] = []


class HttpRightsChecker:
    """Confirms rights at a source system's HTTP endpoint, fail-closed, within a deadline."""

    kind = "http"

    def __init__(
        self,
        url: str,
        accounts: AccountLookup,
        *,
        deadline_ms: int = 500,
        batch_size: int = 50,
        concurrency: int = 4,
        token_env: str | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.url = url
        #: The URL as the log shows it: a password or a key in the query is never shown.
        self.shown_url = redact_endpoint(url)
        self.accounts = accounts
        self.deadline_s = deadline_ms / 1000.0
        self.batch_size = batch_size
        self.token_env = token_env
        self._client = client or httpx.Client(
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        )
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rights")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def check(
        self, principal: Principal, source_system: str, doc_ids: Sequence[str]
    ) -> RightsCheck:
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return RightsCheck()
        accounts = self.accounts(principal.tenant, principal.email, source_system)
        if not accounts:  # nobody to ask about: the source cannot confirm anything
            return RightsCheck.failed(ids, UNKNOWN_ACCOUNT)
        deadline = time.monotonic() + self.deadline_s
        batches = [ids[i : i + self.batch_size] for i in range(0, len(ids), self.batch_size)]
        futures: list[Future[RightsCheck]] = [
            self._pool.submit(self._ask, source_system, accounts, batch, deadline)
            for batch in batches
        ]
        wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        out = RightsCheck()
        for batch, future in zip(batches, futures, strict=True):
            if future.done() and not future.cancelled() and future.exception() is None:
                part = future.result()
            else:
                future.cancel()
                part = RightsCheck.failed(batch, SOURCE_UNAVAILABLE)
            out.confirmed |= part.confirmed
            out.denied.update(part.denied)
            if out.status == "ok":
                out.status = part.status
        out.confirmed -= set(out.denied)
        return out

    def _ask(
        self, source_system: str, accounts: list[str], batch: list[str], deadline: float
    ) -> RightsCheck:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return RightsCheck.failed(batch, SOURCE_UNAVAILABLE)
        headers = {}
        if self.token_env:
            headers["Authorization"] = f"Bearer {os.environ.get(self.token_env, '')}"
        try:
            response = self._client.post(
                self.url,
                json={"source_system": source_system, "accounts": accounts, "doc_ids": batch},
                headers=headers,
                timeout=httpx.Timeout(remaining),
            )
        except httpx.HTTPError as exc:
            log.warning(
                "rights check at %s failed: %s: %s",
                self.shown_url,
                type(exc).__name__,
                str(exc).replace(self.url, self.shown_url),
            )
            return RightsCheck.failed(batch, SOURCE_UNAVAILABLE)
        if response.status_code != 200:
            log.warning("rights check at %s answered HTTP %d", self.shown_url, response.status_code)
            return RightsCheck.failed(batch, SOURCE_UNAVAILABLE)
        try:
            answer = _Answer.model_validate_json(response.content)
        except ValidationError:
            log.warning("rights check at %s answered a malformed body", self.shown_url)
            return RightsCheck.failed(batch, MALFORMED_RESPONSE)
        if answer.unknown_accounts:
            return RightsCheck.failed(batch, UNKNOWN_ACCOUNT)
        return _verdicts(batch, answer)


def _verdicts(batch: list[str], answer: _Answer) -> RightsCheck:
    asked = set(batch)
    allowed: dict[str, bool] = {}
    for r in answer.results:
        if r.doc_id in asked:  # an answer about a document not asked about is ignored
            # Conflicting answers for one document: a denial wins.
            allowed[r.doc_id] = allowed.get(r.doc_id, True) and r.allowed
    unknown = set(answer.unknown_doc_ids)
    out = RightsCheck()
    for doc_id in batch:
        if doc_id in unknown or doc_id not in allowed:
            out.denied[doc_id] = UNKNOWN_DOCUMENT
        elif allowed[doc_id]:
            out.confirmed.add(doc_id)
        else:
            out.denied[doc_id] = REVOKED
    return out

"""govrag's errors as ``application/problem+json`` (RFC 9457), with stable ``type`` codes.

A refused token is always the same 401 body, whatever the reason; "absent" and "not yours"
are one 404 (the API raises :class:`~govrag.errors.NotFoundError` for both); a bad body is a
400 naming the field. Nothing unexpected leaks: any other exception is a 500 with a fixed
body and the request id, logged in full on the server.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi.responses import JSONResponse

from govrag.errors import (
    TOKEN_REFUSED,
    AuthError,
    ConfigError,
    GovragError,
    InputError,
    LlmError,
    NotFoundError,
    StoreError,
)

log = logging.getLogger("govrag.server")
MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "https://govrag.dev/problems/"

_PROBLEM: dict[str, Any] = {
    "content": {MEDIA_TYPE: {}},
    "description": "A problem document (RFC 9457); `type` is a code of docs/serving.md.",
}
#: The error responses every ``/v1`` route may give, for the OpenAPI schema.
ERRORS: dict[int | str, dict[str, Any]] = {
    status: _PROBLEM for status in (400, 401, 404, 413, 429, 500, 502, 503)
}

#: (error class, status, type code), most specific first.
_MAPPING: list[tuple[type[GovragError], int, str]] = [
    (AuthError, 401, "unauthorized"),
    (NotFoundError, 404, "not-found"),
    (InputError, 400, "invalid-request"),
    (LlmError, 502, "model-unavailable"),
    (StoreError, 503, "store-unavailable"),
    (ConfigError, 500, "deployment-misconfigured"),
]


def problem(status: int, code: str, title: str, detail: str | None = None,
            **extra: Any) -> JSONResponse:  # fmt: skip
    body: dict[str, Any] = {"type": TYPE_BASE + code, "title": title, "status": status}
    if detail is not None:
        body["detail"] = detail
    body.update(extra)
    headers = {"WWW-Authenticate": 'Bearer realm="govrag"'} if status == 401 else None
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def unauthorized() -> JSONResponse:
    """The one body of every refused token."""
    return problem(401, "unauthorized", "Unauthorized", TOKEN_REFUSED)


def from_error(exc: GovragError, request_id: str) -> JSONResponse:
    """The problem document of a govrag error."""
    if isinstance(exc, AuthError):
        log.info("token refused (%s): %s [%s]", exc.fault, exc.detail, request_id)
        return unauthorized()
    for cls, status, code in _MAPPING:
        if isinstance(exc, cls):
            if status >= 500:
                log.error("%s [%s]: %s", code, request_id, exc)
                # Server-side faults are named, not described: their text is the operator's.
                return problem(status, code, code.replace("-", " ").capitalize(),
                               request_id=request_id)  # fmt: skip
            return problem(status, code, code.replace("-", " ").capitalize(), str(exc))
    log.error("unexpected govrag error [%s]: %r", request_id, exc)
    return problem(500, "internal", "Internal error", request_id=request_id)

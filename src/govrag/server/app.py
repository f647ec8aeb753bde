"""The FastAPI application of one opened deployment: routes over the application API.

Every route under ``/v1`` needs a bearer token; :func:`create_app` verifies it with
``Govrag.verify_token`` before the handler runs, and the handler passes the verified
:class:`~govrag.types.Principal` to exactly one use case of the API. Nothing here decides
what a caller may see: the route, the policy gate, the store's ACL filter and the rights
re-check all run inside the use case, as they do for the CLI.

Handlers are plain functions: FastAPI runs them on its thread pool, and the API's store and
policy engine are safe to share between threads.
"""

from __future__ import annotations

import logging
import secrets
from typing import Annotated, Any

from govrag.errors import AuthError, GovragError, MissingExtraError

try:
    from fastapi import Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
    from starlette.exceptions import HTTPException
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingExtraError(getattr(exc, "name", None) or "fastapi", "server",
                            "The HTTP server") from exc  # fmt: skip

from govrag.app import Govrag
from govrag.server.bodies import AskBody, SearchBody
from govrag.server.limits import admit
from govrag.server.operations import install
from govrag.server.problems import MEDIA_TYPE, from_error, problem
from govrag.types import Principal

log = logging.getLogger("govrag.server")

_bearer = HTTPBearer(auto_error=False, description="A JWT from the identity provider "
                     "configured in [auth] (docs/auth.md).")  # fmt: skip
_PROBLEM = {"content": {MEDIA_TYPE: {}}, "description": "A problem document (RFC 9457)."}
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: _PROBLEM,
    401: _PROBLEM,
    404: _PROBLEM,
    500: _PROBLEM,
    502: _PROBLEM,
    503: _PROBLEM,
}


def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller: the verified claims of its bearer token, or a 401 (every reason alike)."""
    govrag: Govrag = request.app.state.govrag
    if len(request.headers.getlist("authorization")) > 1:
        # Which one counts would be this server's guess, and a proxy in front may guess the
        # other way: a request carrying two is refused like one carrying a bad token.
        raise AuthError("malformed", "more than one Authorization header")
    verified = govrag.verify_token(credentials.credentials if credentials else None)
    return admit(request, verified.principal)  # the rate limit counts verified callers only


#: A handler parameter of this type is the verified caller (module level: FastAPI resolves
#: the handlers' annotations here).
Caller = Annotated[Principal, Depends(_principal)]


def create_app(govrag: Govrag) -> FastAPI:
    """The HTTP API of ``govrag`` (an opened deployment, which the caller closes)."""
    api = FastAPI(title="govrag", version="1", summary="Governed retrieval over HTTP.",
                  docs_url=None, redoc_url=None,
                  # No 307 to the same path with a slash: its Location is built from the
                  # caller's Host header.
                  redirect_slashes=False)  # fmt: skip

    api.state.govrag = govrag
    install(api, govrag)  # [server]: limits, request ids, access log, metrics

    @api.exception_handler(GovragError)
    def _govrag_error(request: Request, exc: GovragError) -> JSONResponse:
        return from_error(exc, _request_id(request))

    @api.exception_handler(RequestValidationError)
    def _bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = sorted({".".join(str(p) for p in e["loc"][1:]) or "body" for e in exc.errors()})
        return problem(400, "invalid-request", "Invalid request",
                       f"invalid field(s): {', '.join(fields)}; see the OpenAPI schema",
                       fields=fields)  # fmt: skip

    @api.exception_handler(HTTPException)
    def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # Starlette's own refusals (no such path, a method the route does not take, a body
        # that is not JSON) are problem documents too, never its {"detail": ...}.
        codes = {404: "not-found", 405: "method-not-allowed"}
        code = codes.get(
            exc.status_code, "invalid-request" if exc.status_code < 500 else "internal"
        )
        response = problem(exc.status_code, code, code.replace("-", " ").capitalize())
        if exc.headers:
            response.headers.update(exc.headers)  # Allow: on a 405
        return response

    @api.exception_handler(Exception)
    def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        request_id = _request_id(request)
        # Called after the except block: the exception is passed, not taken from the context.
        log.error("unexpected error [%s]", request_id, exc_info=exc)
        return problem(500, "internal", "Internal error", request_id=request_id)

    @api.get("/healthz", tags=["operations"], summary="Liveness: the process answers.")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @api.post("/v1/search", tags=["retrieval"], responses=_ERRORS,
              summary="A governed search: PEP-gated and audited per corpus.")  # fmt: skip
    def search(body: SearchBody, caller: Caller) -> dict[str, Any]:
        result = govrag.search(caller, body.query, corpora=body.corpora, route=body.route,
                               session=body.session, strategy=body.strategy,
                               top_k=body.top_k, filters=body.filters)  # fmt: skip
        return result.as_dict()

    @api.post("/v1/ask", tags=["retrieval"], responses=_ERRORS,
              summary="A grounded answer with citations, or an abstention.")  # fmt: skip
    def ask(body: AskBody, caller: Caller) -> dict[str, Any]:
        answer = govrag.ask(caller, body.question, route=body.route, session=body.session,
                            text=body.text)  # fmt: skip
        return answer.as_dict()

    return api


def _request_id(request: Request) -> str:
    """An id for this HTTP request, to find its log lines from an error body."""
    rid = getattr(request.state, "request_id", None)
    if rid is None:
        rid = request.state.request_id = f"http-{secrets.token_hex(8)}"
    return str(rid)

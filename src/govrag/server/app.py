"""The FastAPI application of one opened deployment: the ``/v1`` routes over the application
API, liveness and readiness, and errors as problem documents.

Every route under ``/v1`` needs a bearer token (:mod:`govrag.server.caller`); the routes
themselves are in :mod:`govrag.server.routes`, one use case each. ``/healthz`` says the
process answers; ``/readyz`` says the deployment can (store reachable with the schema this
code reads, routes and policies loaded), without saying why not to an unauthenticated caller.
"""

from __future__ import annotations

import logging
import secrets

from govrag.errors import GovragError, MissingExtraError

try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException
except ImportError as exc:  # pragma: no cover - exercised by the missing-extra test
    raise MissingExtraError(getattr(exc, "name", None) or "fastapi", "server",
                            "The HTTP server") from exc  # fmt: skip

from govrag.app import Govrag
from govrag.server.operations import install
from govrag.server.problems import from_error, problem
from govrag.server.responses import Health, Ready
from govrag.server.routes import router

log = logging.getLogger("govrag.server")


def create_app(govrag: Govrag, *, mcp_url: str | None = None) -> FastAPI:
    """The HTTP API of ``govrag`` (an opened deployment, which the caller closes); with
    ``mcp_url`` (where clients reach it, ending in ``/mcp``) also the MCP endpoint
    (:mod:`govrag.server.mcp_http`, extra ``mcp``), whose sessions live with the app's
    lifespan."""
    mcp = None
    if mcp_url is not None:
        try:
            from govrag.server.mcp_http import McpEndpoint
        except ImportError as exc:
            raise MissingExtraError(exc.name or "mcp", "mcp", "The MCP server") from exc
        mcp = McpEndpoint(
            govrag.callers,
            mcp_url,
            issuer=govrag.settings.auth.issuer,
            max_body_bytes=govrag.settings.server.max_body_bytes,
        )
    api = FastAPI(title="govrag", version="1", summary="Governed retrieval over HTTP.",
                  docs_url=None, redoc_url=None, lifespan=mcp.lifespan if mcp else None,
                  # No 307 to the same path with a slash: its Location is built from the
                  # caller's Host header.
                  redirect_slashes=False)  # fmt: skip

    # Handlers reach the callers' and the examiners' use cases, never the operator's.
    api.state.callers = govrag.callers
    api.state.examiners = govrag.examiners
    operators = govrag.operators
    install(api, operators)  # [server]: limits, request ids, access log, metrics

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
    def healthz() -> Health:
        return Health()

    @api.get("/readyz", tags=["operations"], response_model=Ready,
             responses={503: {"model": Ready}},
             summary="Readiness: store, schema, routes and policies.")  # fmt: skip
    def readyz() -> JSONResponse:
        readiness = operators.readiness()
        if not readiness.ready:
            failed = {k: v for k, v in readiness.checks.items() if v is not None}
            log.error("not ready: %s", failed)
        body = Ready.model_validate(readiness.as_dict())
        return JSONResponse(body.model_dump(mode="json"), status_code=200 if body.ready else 503)

    # The /v1 routes as the app's own, not an included router (which this FastAPI wraps as
    # one opaque route): a request refused before routing is then labelled by its route's
    # template in the access log and the metrics.
    api.router.routes.extend(router.routes)
    if mcp is not None:
        api.router.routes.extend(mcp.routes())
    return api


def _request_id(request: Request) -> str:
    """An id for this HTTP request, to find its log lines from an error body."""
    rid = getattr(request.state, "request_id", None)
    if rid is None:
        rid = request.state.request_id = f"http-{secrets.token_hex(8)}"
    return str(rid)

"""Who is calling: the verified bearer token of a request, as handler parameters.

A handler that takes :data:`Caller` runs only for a request whose token
``Govrag.verify_token`` accepted; every refusal (no token, a bad one, two ``Authorization``
headers) is the same 401 before the handler is called. :data:`Api` is the opened deployment
the app serves. Both are FastAPI dependencies, declared once here for every router.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from govrag.app import Govrag
from govrag.errors import AuthError
from govrag.server.limits import admit
from govrag.types import Principal

_bearer = HTTPBearer(auto_error=False, description="A JWT from the identity provider "
                     "configured in [auth] (docs/auth.md).")  # fmt: skip


def _govrag(request: Request) -> Govrag:
    govrag: Govrag = request.app.state.govrag
    return govrag


def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller: the verified claims of its bearer token, or a 401 (every reason alike)."""
    govrag = _govrag(request)
    if len(request.headers.getlist("authorization")) > 1:
        # Which one counts would be this server's guess, and a proxy in front may guess the
        # other way: a request carrying two is refused like one carrying a bad token.
        raise AuthError("malformed", "more than one Authorization header")
    verified = govrag.verify_token(credentials.credentials if credentials else None)
    return admit(request, verified.principal)  # the rate limit counts verified callers only


async def authenticate(request: Request) -> Principal:
    """:data:`Caller` for an endpoint that is not a FastAPI route (the MCP endpoint): the
    same header rules, the same verification and the same rate limit, so a token is refused
    or admitted on every route alike. Raises :class:`AuthError` or a rate-limit refusal."""
    credentials = await _bearer(request)
    return await run_in_threadpool(_principal, request, credentials)


#: The opened deployment this app serves.
Api = Annotated[Govrag, Depends(_govrag)]
#: The verified caller (module level: FastAPI resolves the handlers' annotations here).
Caller = Annotated[Principal, Depends(_principal)]

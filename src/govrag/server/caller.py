"""Who is calling: the verified bearer token of a request, as handler parameters.

A handler that takes :data:`Caller` runs only for a request whose token
``Callers.verify_token`` accepted; every refusal (no token, a bad one, two ``Authorization``
headers) is the same 401 before the handler is called. :data:`Api` is the callers' use cases
of the deployment the app serves, :data:`Examination` the examiners'; the operator's
(:class:`~govrag.app.Operators`, with its principal-free replay) is never a handler's. All
are FastAPI dependencies, declared once here for every router.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from govrag.app import Callers, Examiners
from govrag.errors import AuthError
from govrag.server.limits import admit
from govrag.types import Principal

_bearer = HTTPBearer(auto_error=False, description="A JWT from the identity provider "
                     "configured in [auth] (docs/auth.md).")  # fmt: skip


def _callers(request: Request) -> Callers:
    callers: Callers = request.app.state.callers
    return callers


def _examiners(request: Request) -> Examiners:
    examiners: Examiners = request.app.state.examiners
    return examiners


def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller: the verified claims of its bearer token, or a 401 (every reason alike)."""
    if len(request.headers.getlist("authorization")) > 1:
        # Which one counts would be this server's guess, and a proxy in front may guess the
        # other way: a request carrying two is refused like one carrying a bad token.
        raise AuthError("malformed", "more than one Authorization header")
    verified = _callers(request).verify_token(credentials.credentials if credentials else None)
    return admit(request, verified.principal)  # the rate limit counts verified callers only


async def authenticate(request: Request) -> Principal:
    """:data:`Caller` for an endpoint that is not a FastAPI route (the MCP endpoint): the
    same header rules, the same verification and the same rate limit, so a token is refused
    or admitted on every route alike. Raises :class:`AuthError` or a rate-limit refusal."""
    credentials = await _bearer(request)
    return await run_in_threadpool(_principal, request, credentials)


#: The callers' use cases of the deployment this app serves.
Api = Annotated[Callers, Depends(_callers)]
#: The examiners' use cases (replay and audit verification, own tenant, examiner role).
Examination = Annotated[Examiners, Depends(_examiners)]
#: The verified caller (module level: FastAPI resolves the handlers' annotations here).
Caller = Annotated[Principal, Depends(_principal)]

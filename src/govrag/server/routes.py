"""The ``/v1`` routes: one use case of the application API each, for the verified caller.

Every handler takes :data:`~govrag.server.caller.Caller` (no token, no handler) and passes it
to exactly one method of :class:`~govrag.app.Govrag`; nothing here decides what the caller may
see. The route, the policy gate and its committed audit row, the store's ACL filter, the
rights re-check and the validation gate all run inside the use case, as for the CLI. A
handler's result is validated into its response model (:mod:`govrag.server.responses`).

Handlers are plain functions: FastAPI runs them on its thread pool, and the API's store and
policy engine are safe to share between threads.
"""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request, Response

from govrag.app import Memory
from govrag.server.bodies import (
    AskBody,
    ClickBody,
    MemoryBody,
    Name,
    RetrieveBody,
    SearchBody,
    SessionBody,
)
from govrag.server.caller import Api, Caller, Examination
from govrag.server.problems import ERRORS
from govrag.server.responses import (
    Admission,
    Answered,
    Corpora,
    Document,
    Replayed,
    Searched,
    SessionView,
    Verified,
)

router = APIRouter(prefix="/v1", responses=ERRORS)


def _traced(request: Request, request_id: str) -> str:
    """Note the audit log's request id for the access log (replay finds the request by it)."""
    request.state.audit_request_id = request_id
    return request_id


@router.post("/sessions", tags=["sessions"], status_code=201,
             summary="Open a session pinned to a route for its life.")  # fmt: skip
def open_session(body: SessionBody, caller: Caller, api: Api) -> SessionView:
    info = api.open_session(caller, route=body.route, intent=body.intent)
    return SessionView.model_validate(asdict(info))


@router.get("/sessions/{session_id}", tags=["sessions"],
            summary="A session of yours (anyone else's is not found).")  # fmt: skip
def get_session(session_id: Name, caller: Caller, api: Api) -> SessionView:
    return SessionView.model_validate(asdict(api.session(caller, session_id)))


@router.post("/search", tags=["retrieval"],
             summary="A governed search: PEP-gated and audited per corpus.")  # fmt: skip
def search(body: SearchBody, caller: Caller, api: Api, request: Request) -> Searched:
    result = api.search(caller, body.query, corpora=body.corpora, route=body.route,
                        session=body.session, strategy=body.strategy, top_k=body.top_k,
                        filters=body.filters, as_of=body.as_of, time_range=body.time_range,
                        min_score=body.min_score)  # fmt: skip
    _traced(request, result.request_id)
    return Searched.of(result)


@router.post("/retrieve", tags=["retrieval"],
             summary="A retrieve tool call your model proposed: checked, gated.")  # fmt: skip
def retrieve(body: RetrieveBody, caller: Caller, api: Api, request: Request) -> Searched:
    result = api.retrieve(caller, body.tool, body.arguments, route=body.route,
                          session=body.session, strategy=body.strategy,
                          top_k=body.top_k)  # fmt: skip
    _traced(request, result.request_id)
    return Searched.of(result)


@router.post("/ask", tags=["retrieval"],
             summary="A grounded answer with citations, or an abstention.")  # fmt: skip
def ask(body: AskBody, caller: Caller, api: Api, request: Request) -> Answered:
    answer = api.ask(caller, body.question, route=body.route, session=body.session,
                     text=body.text)  # fmt: skip
    _traced(request, answer.request_id)
    return Answered.model_validate(answer.as_dict())


@router.get("/corpora", tags=["retrieval"],
            summary="The corpora of the route's scope you may list.")  # fmt: skip
def corpora(caller: Caller, api: Api, request: Request, route: Name | None = None,
            session: Name | None = None) -> Corpora:  # fmt: skip
    listing = api.corpora(caller, route=route, session=session)
    _traced(request, listing.request_id)
    return Corpora.of(listing)


# ``external_id`` may hold slashes (a file's path in its source): the rest of the path is it.
@router.get("/documents/{source_system}/{external_id:path}", tags=["retrieval"],
            summary="A document's metadata, if you may read it (else not found).")  # fmt: skip
def document(source_system: Name, external_id: Name, caller: Caller, api: Api,
             request: Request, route: Name | None = None,
             session: Name | None = None) -> Document:  # fmt: skip
    found = api.document(caller, source_system, external_id, route=route, session=session)
    _traced(request, found.request_id)
    return Document.of(found)


@router.post("/click", tags=["retrieval"], status_code=204,
             summary="Count a click on a document you may read (else not found).")  # fmt: skip
def click(body: ClickBody, caller: Caller, api: Api) -> Response:
    api.click(caller, body.source_system, body.external_id, route=body.route,
              session=body.session)  # fmt: skip
    return Response(status_code=204)


@router.post("/memory", tags=["write-back"],
             summary="Offer memory for one of your sessions (fail-closed admission).")  # fmt: skip
def remember(body: MemoryBody, caller: Caller, api: Api) -> Admission:
    memory = Memory(source_turn_id=body.source_turn_id, gate=body.gate, content=body.content,
                    confidence=body.confidence, expires_at=body.expires_at,
                    supersedes=body.supersedes)  # fmt: skip
    result = api.remember(caller, body.session, memory)
    return Admission(admitted=result.admitted, id=result.id, reason=result.reason.value)


# What a record did not set is left out, as in `govrag replay --json` (an older log's replay
# lacks the fields of later releases, rather than showing them null).
@router.get("/audit/requests/{request_id}", tags=["examiner"], response_model_exclude_unset=True,
            summary="Replay a request from the audit log (examiner role).")  # fmt: skip
def replay(request_id: Name, caller: Caller, examiners: Examination) -> Replayed:
    return Replayed.model_validate(examiners.replay(caller, request_id).as_dict())


@router.get("/audit/verify", tags=["examiner"],
            summary="Verify your tenant's audit chain (examiner role).")  # fmt: skip
def audit_verify(caller: Caller, examiners: Examination) -> Verified:
    verified = examiners.audit_verify(caller).as_dict()
    verified.pop("checkpoint_dir")  # the server's file system is not the examiner's business
    return Verified.model_validate(verified)

"""What an examiner does: replay a request and verify the audit log, in its own tenant.

:class:`Examiners` is what an edge serving examiners receives (the HTTP server's replay and
audit routes). Each member takes the verified caller and serves only a caller with the
``examiner`` role, in that caller's own tenant; anyone else gets the
:class:`~govrag.errors.NotFoundError` of a request that never ran, so the audit log is no
way to learn what others asked. The operator's principal-free replay stays on
:class:`~govrag.app.operators.Operators`, which this object holds but does not expose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from govrag.app.operators import Operators
from govrag.errors import NotFoundError, require_text
from govrag.types import Principal

if TYPE_CHECKING:
    from govrag.audit import Replay
    from govrag.audit.anchor import AuditVerification

#: The role a token must carry to replay requests and verify the audit log over an edge.
EXAMINER_ROLE = "examiner"


class Examiners:
    """The use cases of examiners of one opened deployment (see the module docstring)."""

    def __init__(self, operators: Operators) -> None:
        self._operators = operators

    def replay(self, examiner: Principal, request_id: str) -> Replay:
        """:meth:`Operators.replay` for a caller with the ``examiner`` role, in its own tenant. For
        anyone else the request is as absent as one that never ran (one
        :class:`NotFoundError`): the audit log is not a way to learn what others asked."""
        require_text(request_id=request_id)
        if EXAMINER_ROLE not in examiner.roles:
            from govrag.audit import shown_request_id

            raise NotFoundError(f"no request {shown_request_id(request_id)} to replay")
        return self._operators.replay(request_id, tenant=examiner.tenant)

    def audit_verify(self, examiner: Principal) -> AuditVerification:
        """:meth:`Operators.audit_verify` of the caller's own tenant, for the ``examiner`` role only
        (anyone else: :class:`NotFoundError`)."""
        if EXAMINER_ROLE not in examiner.roles:
            raise NotFoundError("no audit verification for this caller")
        return self._operators.audit_verify(examiner.tenant)

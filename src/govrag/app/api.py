"""The application API: one object per opened deployment, handing each audience its own.

Every edge (the CLI, the demo, the benches, the HTTP and MCP servers) is a thin adapter
over this API: it turns its input into these calls and their results into its output, and
holds no use-case logic of its own. So a rule (a source lock, a dry run that writes
nothing, a click decided by the policy gate before it counts) is written once and no edge
can skip it.

The use cases are split by who they serve, and an edge gets only the objects of the people
it serves:

- :attr:`Govrag.callers` (:class:`~govrag.app.callers.Callers`): search, answers,
  sessions, tools, clicks, memory, each for a verified principal;
- :attr:`Govrag.examiners` (:class:`~govrag.app.examiners.Examiners`): replay and audit
  verification for a caller with the ``examiner`` role, in its own tenant;
- :attr:`Govrag.operators` (:class:`~govrag.app.operators.Operators`): ingest, the audit
  anchor, the principal-free replay, indexes, checks, evaluation.

Identity is never looked up by name in a caller's or examiner's use case: each takes a
:class:`~govrag.types.Principal`, the verified claims of the caller (from a token, or from
``principals.json`` through :func:`~govrag.app.operators.local_principal` in development).

:class:`Govrag` opens nothing until a use case needs it (no database connection, no
embedding model, no policy engine): ``govrag replay`` never loads PyTorch.
"""

from __future__ import annotations

from functools import cached_property

from govrag.app.callers import Callers
from govrag.app.examiners import Examiners
from govrag.app.operators import Operators
from govrag.deployment import Deployment
from govrag.settings import Settings


class Govrag:
    """One opened deployment. Use as a context manager (or call :meth:`close`)."""

    def __init__(self, deployment: Deployment) -> None:
        self._dep = deployment

    @property
    def settings(self) -> Settings:
        """The deployment's settings (``govrag.toml``, environment, overrides)."""
        return self._dep.settings

    @cached_property
    def callers(self) -> Callers:
        """The callers' use cases: what an edge serving callers gets."""
        return Callers(self._dep)

    @cached_property
    def operators(self) -> Operators:
        """The operator's use cases, the principal-free replay among them."""
        return Operators(self._dep)

    @cached_property
    def examiners(self) -> Examiners:
        """The examiners' use cases: replay and audit verification, own tenant only."""
        return Examiners(self.operators)

    def close(self) -> None:
        """Close what the use cases opened (store, model client, policy engines)."""
        self._dep.close()

    def __enter__(self) -> Govrag:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

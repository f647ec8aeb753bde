"""Who is who in the sources: identities (email -> source accounts) and groups.

What the ACL pre-filter resolves a caller through (``acl.py``), written by ingest. Each call
is one transaction, and every change bumps the tenant's ACL epoch, so no cached result
survives a change of who may read what. An account has at most one owner (a unique index):
a placeholder or hostile claim never captures a real user's rights. Like groups and documents,
a binding records the configured source that made it (``writer``), and another configured
source sharing the source system may not move or remove it.
"""

from __future__ import annotations

from collections.abc import Sequence

from govrag.errors import IdentityConflict, SourceConflict
from govrag.store.database import Database, bump_epoch, claim, ensure_source, ensure_tenant
from govrag.store.dialect import Conn


class IdentityRepository:
    """Identity bindings and group memberships of each tenant."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def put_identity(
        self,
        tenant: str,
        email: str,
        source_system: str,
        account_id: str,
        *,
        previous_email: str | None = None,
        writer: str | None = None,
    ) -> bool:
        """Bind an email to a source-system account. Returns whether anything changed.

        An account has at most one owner (a unique index, so concurrent claims cannot race
        past it): binding an account that another email owns raises
        :class:`~govrag.errors.IdentityConflict` and changes nothing, so a placeholder or
        hostile claim never captures a real user's rights. ``previous_email`` rebinds the
        account after an email change, atomically and only if ``previous_email`` owns it
        now (compare and set); otherwise :class:`~govrag.errors.IdentityConflict`.
        Re-sending a binding that already holds (with or without ``previous_email``) is a
        no-op (its owner stays as it is). A change bumps the ACL epoch.

        ``writer`` is the configured source writing (``None``: an operator's feed, not limited,
        which leaves the binding's owner as it is). A new binding becomes the writer's; a
        rebind of a binding another configured source made is refused with
        :class:`~govrag.errors.SourceConflict` and changes nothing; one no source owns is
        claimed.
        """
        email = email.casefold()
        previous = None if previous_email is None else previous_email.casefold()
        try:
            with self._db.tx(tenant) as conn:
                ensure_tenant(conn, self._db.dialect, tenant)
                if previous is None or previous == email:
                    try:
                        cur = conn.execute(
                            "INSERT INTO identities(tenant_id, email, source_system, account_id, "
                            "writer) VALUES (?, ?, ?, ?, ?) "
                            "ON CONFLICT (tenant_id, email, source_system, account_id) DO NOTHING",
                            (tenant, email, source_system, account_id, writer),
                        )
                    except self._db.unique_violation as exc:
                        # Another email owns the account. (PostgreSQL has aborted the
                        # transaction: the owner is read after it, for the message.)
                        raise _Owned() from exc
                else:
                    # A configured source moves only a binding it (or no source) owns, in the
                    # same statement, so no concurrent claim slips between check and write.
                    mine = "" if writer is None else " AND (writer IS NULL OR writer = ?)"
                    cur = conn.execute(
                        "UPDATE identities SET email = ?, writer = COALESCE(?, writer) "
                        "WHERE tenant_id = ? AND source_system = ? AND account_id = ? "
                        f"AND email = ?{mine}",
                        (email, writer, tenant, source_system, account_id, previous)
                        + (() if writer is None else (writer,)),
                    )
                    if cur.rowcount == 0:
                        if writer is not None:
                            _refuse_anothers(conn, tenant, source_system, account_id, previous,
                                             writer, unbind=False)  # fmt: skip
                        owner = _account_owner(conn, tenant, source_system, account_id)
                        if owner != email:
                            raise IdentityConflict.refused(
                                email, source_system, account_id, owner, previous
                            )
                changed = cur.rowcount > 0
                if changed:
                    ensure_source(conn, tenant, source_system)
                    bump_epoch(conn, tenant)
                return changed
        except _Owned as owned:
            with self._db.tx(tenant, read=True) as conn:
                owner = _account_owner(conn, tenant, source_system, account_id)
            raise IdentityConflict.refused(
                email, source_system, account_id, owner, None
            ) from owned.__cause__

    def account_owner(self, tenant: str, source_system: str, account_id: str) -> str | None:
        """The email bound to a source-system account, if any."""
        with self._db.tx(tenant, read=True) as conn:
            return _account_owner(conn, tenant, source_system, account_id)

    def remove_identity(
        self,
        tenant: str,
        email: str,
        source_system: str,
        account_id: str,
        *,
        writer: str | None = None,
    ) -> bool:
        """Unbind an email from a source-system account; the next search no longer grants
        the account's rights to it. Returns whether a binding was removed (then the ACL
        epoch is bumped). A configured source ``writer`` removes only a binding it (or no
        source) made; another source's is :class:`~govrag.errors.SourceConflict`."""
        email = email.casefold()
        mine = "" if writer is None else " AND (writer IS NULL OR writer = ?)"
        with self._db.tx(tenant) as conn:
            cur = conn.execute(
                "DELETE FROM identities WHERE tenant_id = ? AND email = ? "
                f"AND source_system = ? AND account_id = ?{mine}",
                (tenant, email, source_system, account_id) + (() if writer is None else (writer,)),
            )
            removed = cur.rowcount > 0
            if not removed and writer is not None:
                _refuse_anothers(conn, tenant, source_system, account_id, email, writer,
                                 unbind=True)  # fmt: skip
            if removed:
                bump_epoch(conn, tenant)
            return removed

    def identity_writer(self, tenant: str, source_system: str, account_id: str) -> str | None:
        """The configured source that owns an account's binding (``None``: none does, or the
        account is not bound)."""
        with self._db.tx(tenant, read=True) as conn:
            return _writer(conn, tenant, source_system, account_id)

    def put_group(
        self,
        tenant: str,
        source_system: str,
        group_id: str,
        members: Sequence[str],
        *,
        writer: str | None = None,
    ) -> bool:
        """Replace a group's direct members. Returns whether the membership changed.

        ``writer`` is the configured source writing it (``None``: no configured source, an
        operator's feed, which may write any group and leaves its owner as it is). A source
        owns the groups it wrote and claims one no source owns; a group another source owns
        is refused with :class:`~govrag.errors.SourceConflict` and nothing changes.
        """
        wanted = set(members)
        with self._db.tx(tenant) as conn:
            ensure_tenant(conn, self._db.dialect, tenant)
            ensure_source(conn, tenant, source_system)
            key = (tenant, source_system, group_id)
            conn.execute(
                "INSERT INTO groups(tenant_id, source_system, group_id, writer) "
                "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (*key, writer),
            )
            if writer is not None:
                claim(conn, "groups", "group_id", key, writer, kind="group", delete=False)
            have = {
                r[0]
                for r in conn.execute(
                    "SELECT member_id FROM group_members WHERE tenant_id = ? AND "
                    "source_system = ? AND group_id = ?",
                    (tenant, source_system, group_id),
                ).fetchall()
            }
            if have == wanted:
                return False
            conn.executemany(
                "DELETE FROM group_members WHERE tenant_id = ? AND source_system = ? "
                "AND group_id = ? AND member_id = ?",
                [(tenant, source_system, group_id, m) for m in have - wanted],
            )
            conn.executemany(
                "INSERT INTO group_members(tenant_id, source_system, group_id, member_id) "
                "VALUES (?, ?, ?, ?)",
                [(tenant, source_system, group_id, m) for m in wanted - have],
            )
            bump_epoch(conn, tenant)
            return True

    def group_writer(self, tenant: str, source_system: str, group_id: str) -> str | None:
        """The configured source that owns a group (``None``: none does, or no such group)."""
        rows = self._db.q(
            tenant,
            "SELECT writer FROM groups WHERE tenant_id = ? AND source_system = ? AND group_id = ?",
            (tenant, source_system, group_id),
        )
        return None if not rows or rows[0][0] is None else str(rows[0][0])

    def source_accounts(self, tenant: str, email: str, source_system: str) -> list[str]:
        """The caller's own accounts in a source system (what a live rights check asks about)."""
        rows = self._db.q(
            tenant,
            "SELECT account_id FROM identities WHERE tenant_id = ? AND email = ? "
            "AND source_system = ? ORDER BY account_id",
            (tenant, email.casefold(), source_system),
        )
        return [str(r[0]) for r in rows]


class _Owned(Exception):
    """Internal: an identity insert hit the one-owner index (the driver error is its cause)."""


def _account_owner(conn: Conn, tenant: str, source_system: str, account_id: str) -> str | None:
    row = conn.execute(
        "SELECT email FROM identities WHERE tenant_id = ? AND source_system = ? AND account_id = ?",
        (tenant, source_system, account_id),
    ).fetchone()
    return None if row is None else str(row[0])


def _writer(conn: Conn, tenant: str, source_system: str, account_id: str) -> str | None:
    row = conn.execute(
        "SELECT writer FROM identities WHERE tenant_id = ? AND source_system = ? "
        "AND account_id = ?",
        (tenant, source_system, account_id),
    ).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def _refuse_anothers(
    conn: Conn,
    tenant: str,
    source_system: str,
    account_id: str,
    email: str,
    writer: str,
    *,
    unbind: bool,
) -> None:
    """Raise :class:`~govrag.errors.SourceConflict` if ``email``'s binding of the account
    was made by a configured source other than ``writer`` (why a guarded write missed)."""
    row = conn.execute(
        "SELECT email, writer FROM identities WHERE tenant_id = ? AND source_system = ? "
        "AND account_id = ?",
        (tenant, source_system, account_id),
    ).fetchone()
    if row is not None and row[0] == email and row[1] is not None and row[1] != writer:
        raise SourceConflict.binding(
            account_id, source_system, email, str(row[1]), writer, unbind=unbind
        )

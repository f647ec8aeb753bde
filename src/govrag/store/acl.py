"""The ACL pre-filter's pieces: who the caller is in the sources, and the access predicate.

A caller's email resolves in one SQL statement to its source-system accounts and their
transitive groups: its principal tokens. With its clearance and the requested corpora they
make its :class:`~govrag.store.records.AccessScope`, which every leg applies *inside* its
ranking: as :data:`ACL_EXISTS` in SQL, as :func:`leg_args` in a derived index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from govrag.store.database import Database, json_list
from govrag.store.records import EVERYONE, AccessScope, principal_token, token_pair
from govrag.types import Principal

# Email -> source accounts -> transitive groups, in one statement. Groups nest within one
# source system: a member id is an account or a group id of the group's own system.
_RESOLVE = """
WITH RECURSIVE reach(source_system, principal_id) AS (
    SELECT source_system, account_id FROM identities WHERE tenant_id = ? AND email = ?
    UNION
    SELECT m.source_system, m.group_id FROM reach r
    JOIN group_members m {by_member}
    ON m.tenant_id = ? AND m.source_system = r.source_system AND m.member_id = r.principal_id
)
SELECT source_system, principal_id FROM reach
"""


def acl_exists(doc: str) -> str:
    """The caller's ACL predicate on the document aliased ``doc``: some ACL row names one of
    the caller's principals (bound as pairs). The principal list is uncorrelated, so engines
    build it once."""
    return (
        f"EXISTS (SELECT 1 FROM doc_acl a WHERE {{plus}}a.tenant_id = {doc}.tenant_id "
        f"AND a.doc_id = {doc}.doc_id "
        "AND (a.source_system, a.principal_id) IN (SELECT ss, pid FROM {pairs}))"
    )


#: :func:`acl_exists` on a document ``d``.
ACL_EXISTS = acl_exists("d")


def resolve_access(
    db: Database, principal: Principal, corpora: Sequence[str], *, every_corpus: bool
) -> AccessScope:
    """The caller's principal tokens (one SQL statement), ceiling and corpus scope.

    ``every_corpus``: ``corpora`` is every corpus of the tenant, so legs skip that filter.
    """
    tenant = principal.tenant
    with db.tx(tenant, read=True) as conn:
        rows = conn.execute(db.dialect.sql(_RESOLVE), (tenant, principal.email, tenant)).fetchall()
        top = conn.execute(
            "SELECT MAX(classification) FROM documents WHERE tenant_id = ?", (tenant,)
        ).fetchone()[0]
    tokens = {principal_token(ss, pid) for ss, pid in rows}
    if tokens:
        tokens.add(EVERYONE)  # "*" is everyone with an identity in the tenant
    return AccessScope(
        tenant=tenant,
        tokens=frozenset(tokens),
        ceiling=int(principal.clearance),
        corpora=tuple(corpora),
        filter_corpora=not every_corpus,
        filter_ceiling=top is None or int(top) > int(principal.clearance),
    )


def token_pairs(scope: AccessScope) -> str:
    """The caller's principals as the bound pairs :data:`ACL_EXISTS` takes."""
    return json_list(sorted(token_pair(t) for t in scope.tokens))


def leg_args(
    scope: AccessScope, acl: bool, doc_ids: Sequence[int] | None, limit: int
) -> dict[str, Any]:
    """Keyword arguments of a derived index's search: the corpora, the ceiling and, with
    ``acl``, the caller's principal tokens (the hidden-item marker ranks without those)."""
    return {
        "corpora": scope.corpora if scope.filter_corpora else None,
        "acl_tokens": sorted(scope.tokens) if acl else None,
        "max_classification": scope.ceiling if scope.filter_ceiling else None,
        "doc_ids": doc_ids,
        "limit": limit,
    }

"""``govrag audit verify | checkpoint | keygen [--rotate]``: the audit log and its anchor
outside the database (signed checkpoints, ``docs/audit.md``); ``govrag escalations``: the failed
validations routes passed to people. Thin: the use cases are the application API's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from govrag.cli.common import DeploymentOpt, JsonOpt, TenantOpt, emit, err, guard, open_app

if TYPE_CHECKING:
    from govrag.audit.anchor import AuditVerification, CheckpointRun, TenantAudit
    from govrag.audit.escalations import Escalation


def register(app: typer.Typer) -> None:
    audit_app = typer.Typer(
        help="Check the hash-chained audit log against its signed checkpoints.",
        no_args_is_help=True,
    )
    audit_app.command("verify")(audit_verify)
    audit_app.command("checkpoint")(audit_checkpoint)
    audit_app.command("keygen")(audit_keygen)
    app.add_typer(audit_app, name="audit")
    app.command("escalations")(escalations)


def escalations(
    queue: Annotated[str | None, typer.Option(help="Only this queue's.")] = None,
    tenant: TenantOpt = None,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the failed validations routes escalated (on_validation_failure: escalate), oldest
    first, each with its request for govrag replay."""

    def run() -> list[Escalation]:
        with open_app(deployment) as app:
            return app.operators.escalations(tenant=tenant, queue=queue)

    found = guard(run)
    if as_json:
        emit([e.as_dict() for e in found])
        return
    for e in found:
        print(f"{e.at}  {e.queue}  {e.request_id}  {e.route_id}  {e.sub}  {e.reason}")
    err.print(f"{len(found)} escalation(s)" + (f" in queue {queue!r}" if queue else ""),
              highlight=False)  # fmt: skip


def _anchor_line(t: TenantAudit) -> str:
    cp = t.checkpoint
    if cp is None:
        return f"tenant {t.chain.tenant}: no checkpoint"
    behind = max(0, t.chain.events - cp.head_seq)
    age = t.checkpoint_age_s or 0.0
    return (f"tenant {t.chain.tenant}: checkpoint at event {cp.head_seq} ({age:.0f} s old, "
            f"{behind} events behind the head, {t.checkpoints} in its history)")  # fmt: skip


def audit_verify(tenant: TenantOpt = None, deployment: DeploymentOpt = None,
                 as_json: JsonOpt = False) -> None:  # fmt: skip
    """Recompute every tenant's chain and compare it with its signed checkpoints; exit 1
    and name each finding (a broken row, a cut or wiped log, a dropped tenant, events
    under an unknown tenant, a forged checkpoint)."""

    def run() -> AuditVerification:
        with open_app(deployment) as app:
            return app.operators.audit_verify(tenant)

    report = guard(run)
    if as_json:
        emit(report.as_dict())
    else:
        for t in report.tenants:
            r = t.chain
            if r.broken is None:
                err.print(f"tenant {r.tenant}: {r.events} events, chain intact; head "
                          f"{r.head_seq} {r.head_hash}", highlight=False)  # fmt: skip
            else:
                seq, event_id, problem = r.broken
                err.print(f"tenant {r.tenant}: BROKEN at event {seq} ({event_id}): {problem}",
                          style="red", highlight=False)  # fmt: skip
            err.print(_anchor_line(t), highlight=False)
        for f in report.findings:
            err.print(f.message, style="red", highlight=False)
        for t in report.tenants:
            for w in t.warnings:
                err.print(f"warning: {w}", style="yellow", highlight=False)
        if report.ok:
            err.print(f"ok: every chain reaches its checkpoints ({report.key_id})",
                      highlight=False)  # fmt: skip
    if not report.ok:
        raise typer.Exit(1)


def audit_checkpoint(
    tenant: TenantOpt = None,
    adopt: Annotated[
        bool,
        typer.Option(help="Also sign tenants that have no checkpoint yet (check them first)."),
    ] = False,
    deployment: DeploymentOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Sign each tenant's current chain head into the checkpoint directory. A chain that
    does not verify against its checkpoints is refused (exit 1), never signed."""

    def run() -> CheckpointRun:
        with open_app(deployment) as app:
            return app.operators.audit_checkpoint(tenant, adopt=adopt)

    result = guard(run)
    if as_json:
        emit(result.as_dict())
    else:
        for cp, path in result.written:
            err.print(f"tenant {cp.tenant}: signed event {cp.head_seq} ({cp.head_event_id}) "
                      f"-> {path}", highlight=False)  # fmt: skip
        for _, why in result.refused:
            err.print(f"refused: {why}", style="red", highlight=False)
        if not result.written and not result.refused:
            err.print("no tenant has audit events; nothing to sign")
    if result.refused:
        raise typer.Exit(1)


def audit_keygen(
    rotate: Annotated[
        bool,
        typer.Option(
            help="Replace the existing key with a new one; its public half is kept in "
            "the keyring (the first [audit] verify_keys folder), so what it signed "
            "still verifies."
        ),
    ] = False,
    deployment: DeploymentOpt = None,
) -> None:
    """Create the Ed25519 key that signs checkpoints, at ``[audit] signing_key`` (mode
    0600, with its public key beside it); an existing key is never replaced, only rotated
    with --rotate."""

    def run() -> str:
        with open_app(deployment) as app:
            if not rotate:
                path, kid = app.operators.audit_keygen()
                return f"wrote {path} ({kid}); keep it out of the database's reach and back it up"
            r = app.operators.audit_rotate_key()
            return (f"rotated {r.signing_key}: new key {r.key_id} signs from now on; the "
                    f"retired key {r.retired_key_id} is gone, its public half kept in "
                    f"{r.retired_public} so the checkpoints it signed still verify (if "
                    "[audit] verify_key names a copy of the public key, replace it with "
                    f"{r.public})")  # fmt: skip

    err.print(guard(run), highlight=False)

"""Attack: a configured source that may not touch another source's group takes over one of the
group's members instead.

The promise (README, "Data and configuration cannot widen rights"): sources sharing a
``source_system`` manage only their own groups, documents and identity bindings
(``test_shared_source_system.py`` covers groups and documents). HR's folder source binds
``ana@bank.example`` to its account ``S-ana`` and puts ``S-ana`` in its group ``G-staff``,
which alone may read HR's ``policy.md``. A second configured source, the JSONL ``export`` of
the same ``sharepoint`` system, is refused when it rewrites ``G-staff``; so whoever writes
``export.jsonl`` sends one identity line instead: ``previous_email`` rebinding ``S-ana`` from
Ana to Mallory (then Mallory reads HR's policy), or ``"active": false`` unbinding it (then Ana
no longer does). Both are refused, naming the account, both sources and the fix; nothing
changes, the rest of the file still lands, and a dry run predicts the same refusals. The
operator's own feed (a JSONL file ingested by path, no configured source) is not limited.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import govrag
from govrag.types import Principal

from conftest import BACKENDS, pg_store_settings

TOML = """
[sources.hr]
connector = "filesystem"
path = "hr"
source_system = "sharepoint"
corpus = "policy"

[sources.export]
connector = "jsonl"
path = "export.jsonl"
source_system = "sharepoint"
"""
HR_POLICY = "HR policy: the staff travel allowance is EUR 300 per night."
ANA, MALLORY = "ana@bank.example", "mallory@bank.example"


def lines(*records: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def ident(email: str, account: str, **extra: Any) -> dict[str, Any]:
    return {"type": "identity", "source_system": "sharepoint", "email": email,
            "account_id": account, **extra}  # fmt: skip


@pytest.fixture(params=BACKENDS)
def dep(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[govrag.Govrag]:
    root = tmp_path / "dep"
    govrag.init(root, tenant="bank", corpora=["policy"])
    (root / "govrag.toml").write_text((root / "govrag.toml").read_text() + TOML)
    hr = root / "hr"
    hr.mkdir()
    (hr / "_access.json").write_text(json.dumps({"acl": ["G-staff"]}))
    (hr / "policy.md").write_text(HR_POLICY)
    (hr / "_identities.jsonl").write_text(lines(
        {"type": "identity", "email": ANA, "account_id": "S-ana"},
        {"type": "group", "group_id": "G-staff", "members": ["S-ana", "S-mal"]},
    ))  # fmt: skip
    overrides: dict[str, Any] = {}
    if request.param == "postgres":
        overrides["store"] = pg_store_settings(request.getfixturevalue("pg_cluster"))
    with govrag.open(root, **overrides) as app:
        assert app.operators.ingest("hr").ok
        yield app


def texts(app: govrag.Govrag, email: str) -> list[str]:
    who = Principal(sub=email.split("@")[0], email=email, tenant="bank",
                    doc_entitlements=("policy:read",))  # fmt: skip
    found = app.callers.search(who, "staff travel allowance per night")
    return sorted(c.text for c in found.results)


def export(app: govrag.Govrag, *records: dict[str, Any]) -> list[str]:
    """Write ``export.jsonl``, dry-run it, ingest it; the messages (the dry run's agree)."""
    path = Path(app.settings.deployment) / "export.jsonl"
    path.write_text(lines(*records))
    predicted = app.operators.ingest("export", dry_run=True).report.messages
    messages = app.operators.ingest("export").report.messages
    assert predicted == messages
    return messages


@pytest.mark.parametrize(
    ("line", "verb"),
    [
        (ident(MALLORY, "S-ana", previous_email=ANA), "rebind"),
        (ident(ANA, "S-ana", active=False), "unbind"),
    ],
    ids=["previous_email", "inactive"],
)
def test_a_jsonl_source_cannot_take_over_a_member_of_anothers_group(
    dep: govrag.Govrag, line: dict[str, Any], verb: str
) -> None:
    assert texts(dep, ANA) == [HR_POLICY]
    assert texts(dep, MALLORY) == []
    # The refused line is reported by number; the next line (a free account) still lands.
    messages = export(dep, line, ident(MALLORY, "S-mal"))
    assert len(messages) == 1, messages
    assert messages[0].startswith(f"{dep.settings.deployment}/export.jsonl:1: ")
    for part in ("account 'S-ana'", "'sharepoint'", "source 'hr'", "source 'export'", verb):
        assert part in messages[0], messages
    # HR's group and document are as HR wrote them; so is who its member S-ana is.
    assert texts(dep, ANA) == [HR_POLICY]
    assert texts(dep, MALLORY) == [HR_POLICY]  # through S-mal, which export bound


def test_a_source_manages_its_own_bindings_and_the_operators_feed_any(dep: govrag.Govrag) -> None:
    # export binds a free account and may then move and unbind its own binding.
    assert export(dep, ident(MALLORY, "S-mal")) == []
    assert export(dep, ident("m2@bank.example", "S-mal", previous_email=MALLORY)) == []
    assert texts(dep, "m2@bank.example") == [HR_POLICY]
    assert export(dep, ident("m2@bank.example", "S-mal", active=False)) == []
    assert texts(dep, "m2@bank.example") == []
    # The operator's feed (a path, no configured source) may move HR's binding ...
    feed = Path(dep.settings.deployment) / "feed.jsonl"
    feed.write_text(lines(ident("ana.new@bank.example", "S-ana", previous_email=ANA)))
    assert dep.operators.ingest(feed).ok
    assert texts(dep, "ana.new@bank.example") == [HR_POLICY]
    # ... and HR still owns it: export may not move it on.
    messages = export(dep, ident(MALLORY, "S-ana", previous_email="ana.new@bank.example"))
    assert len(messages) == 1 and "source 'hr'" in messages[0], messages
    assert texts(dep, MALLORY) == []

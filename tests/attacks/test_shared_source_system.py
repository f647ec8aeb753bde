"""Attack: two configured sources share a ``source_system``; one rewrites the other's rights.

An operator configures two folder sources that export from one system (``sharepoint``): HR's
folder and Legal's. Each source's ``_identities.jsonl`` lists the groups it knows, and each
folder has a ``policy.md``. Whoever may write Legal's folder (or a careless export of it)
lists group ``G-staff`` with Legal's members only, writes its own ``policy.md``, then deletes
it. The promise: a source changes or deletes only the groups and documents it wrote; a write
to another source's group or document is refused, naming the group or document, both sources
and the fix, and the other source's rights and text stay as they were.
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

[sources.legal]
connector = "filesystem"
path = "legal"
source_system = "sharepoint"
corpus = "policy"

[sources.export]
connector = "jsonl"
path = "export.jsonl"
source_system = "sharepoint"
"""
HR_POLICY = "HR policy: the staff travel allowance is EUR 300 per night."
LEGAL_POLICY = "Legal policy: the staff travel allowance is EUR 9 per night."


def lines(*records: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def ident(email: str, account: str) -> dict[str, Any]:
    return {"type": "identity", "email": email, "account_id": account}


def folder(root: Path, members: list[str], text: str, ids: list[dict[str, Any]]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "_access.json").write_text(json.dumps({"acl": ["G-staff"]}))
    (root / "policy.md").write_text(text)
    group = {"type": "group", "group_id": "G-staff", "members": members}
    (root / "_identities.jsonl").write_text(lines(*ids, group))


@pytest.fixture(params=BACKENDS)
def dep(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[govrag.Govrag]:
    root = tmp_path / "dep"
    govrag.init(root, tenant="bank", corpora=["policy"])
    (root / "govrag.toml").write_text((root / "govrag.toml").read_text() + TOML)
    folder(root / "hr", ["S-ana"], HR_POLICY, [ident("ana@bank.example", "S-ana")])
    folder(root / "legal", ["S-leo"], LEGAL_POLICY, [ident("leo@bank.example", "S-leo")])
    overrides: dict[str, Any] = {}
    if request.param == "postgres":
        overrides["store"] = pg_store_settings(request.getfixturevalue("pg_cluster"))
    with govrag.open(root, **overrides) as app:
        yield app


def ana() -> Principal:
    return Principal(sub="ana", email="ana@bank.example", tenant="bank",
                     doc_entitlements=("policy:read",))  # fmt: skip


def texts(app: govrag.Govrag) -> list[str]:
    found = app.callers.search(ana(), "staff travel allowance per night")
    return sorted(c.text for c in found.results)


def test_a_source_cannot_take_over_anothers_group_or_document(dep: govrag.Govrag) -> None:
    hr = dep.operators.ingest("hr")
    assert hr.ok, hr.report.messages
    assert texts(dep) == [HR_POLICY]
    # A dry run of Legal predicts the refusals below, and changes nothing.
    predicted = dep.operators.ingest("legal", dry_run=True).report.messages
    legal = dep.operators.ingest("legal")
    assert [m.split(": ", 1)[1] for m in predicted] == [
        m.split(": ", 1)[1] for m in legal.report.messages
    ]
    # Legal's G-staff and policy.md are the HR source's: refused, by name, with both sources.
    messages = legal.report.messages
    group = [m for m in messages if "G-staff" in m]
    assert len(group) == 1, messages
    assert "'hr'" in group[0] and "'legal'" in group[0] and "sharepoint" in group[0]
    document = [m for m in messages if "policy.md" in m and "G-staff" not in m]
    assert len(document) == 1 and "'hr'" in document[0] and "'legal'" in document[0], messages
    # HR's group and document are as HR wrote them: ana still reads HR's text, not Legal's.
    assert texts(dep) == [HR_POLICY]
    # Legal's folder drops policy.md: nothing of HR's is deleted.
    (Path(dep.settings.deployment) / "legal" / "policy.md").unlink()
    dep.operators.ingest("legal")
    assert texts(dep) == [HR_POLICY]


def test_a_jsonl_source_cannot_delete_or_regroup_anothers(dep: govrag.Govrag) -> None:
    assert dep.operators.ingest("hr").ok
    export = Path(dep.settings.deployment) / "export.jsonl"
    export.write_text(lines(
        {"type": "group", "source_system": "sharepoint", "group_id": "G-staff", "members": []},
        {"type": "delete", "source_system": "sharepoint", "external_id": "policy.md"},
    ))  # fmt: skip
    outcome = dep.operators.ingest("export")
    messages = outcome.report.messages
    assert len(messages) == 2 and outcome.report.errors == 2, messages
    assert messages[0].startswith(f"{export}:1: ") and "group 'G-staff'" in messages[0]
    assert messages[1].startswith(f"{export}:2: ") and "may not delete it" in messages[1]
    assert all("source 'hr'" in m and "source 'export'" in m for m in messages)
    assert texts(dep) == [HR_POLICY]


def test_the_operators_feed_may_correct_and_a_free_group_is_claimed(dep: govrag.Govrag) -> None:
    root = Path(dep.settings.deployment)
    # The operator's own feed (a JSONL file by path, no configured source) writes first: its
    # rows belong to no source, and the first source to write one takes it.
    feed = root / "feed.jsonl"
    feed.write_text(lines(
        {"type": "group", "source_system": "sharepoint", "group_id": "G-staff",
         "members": ["S-old"]},
    ))  # fmt: skip
    assert dep.operators.ingest(feed).ok
    assert dep.operators.ingest("hr").ok  # claims G-staff: ana reads HR's policy
    assert texts(dep) == [HR_POLICY]
    assert not dep.operators.ingest("legal").ok  # G-staff and policy.md are HR's now
    # The feed may still correct HR's group (it is the operator's); HR keeps owning it.
    feed.write_text(lines(
        {"type": "group", "source_system": "sharepoint", "group_id": "G-staff", "members": []},
    ))  # fmt: skip
    assert dep.operators.ingest(feed).ok
    assert texts(dep) == []
    (root / "hr" / "policy.md").write_text(HR_POLICY + " Updated.")
    assert dep.operators.ingest("hr").ok  # re-lists S-ana in its own group
    assert texts(dep) == [HR_POLICY + " Updated."]

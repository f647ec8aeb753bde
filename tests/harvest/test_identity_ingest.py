"""Identity records at ingest: placeholder emails refused, rebinds, unbinds, conflicts
reported per record (the run goes on), the filesystem identities file as a snapshot, and the
per-source lock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fs_helpers import SOURCE, run, write

from govrag.errors import InputError
from govrag.harvest.ingest import ingest_jsonl, parse_record
from govrag.harvest.records import IdentityRecord
from govrag.harvest.state import load_state, lock_path, source_lock
from govrag.settings import IngestSettings
from govrag.store.protocol import KnowledgeStore
from govrag.store.sqlite import SQLiteStore

ANA, BEN = "ana@bank.example", "ben@bank.example"


def identity(email: str, account: str, **extra: Any) -> dict[str, Any]:
    return {"type": "identity", "email": email, "source_system": "sp", "account_id": account,
            **extra}  # fmt: skip


def jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def accounts(store: KnowledgeStore, email: str, source: str = "sp") -> list[str]:
    return store.source_accounts("t1", email, source)


# -- records ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"active": False, "previous_email": BEN},
         "'active': false (unbind) and 'previous_email' (rebind) cannot be combined"),
        ({"previous_email": "ben"}, "field 'previous_email': 'ben' is not an email address"),
        ({"previous_email": "b\x01@x"}, "field 'previous_email'"),
        ({"previous_email": " ben@bank.example"},
         "field 'previous_email': email ' ben@bank.example' has leading or trailing whitespace"),
        ({"previous_email": "straße@bank.example"}, "'ß' (U+00DF) becomes 'ss'"),
        ({"active": "no"}, "field 'active'"),
        ({"active": 0}, "field 'active'"),
    ],
)  # fmt: skip
def test_bad_identity_fields_are_named(extra: dict[str, Any], message: str) -> None:
    raw = json.dumps(identity(ANA, "S-1", **extra)).encode()
    with pytest.raises(InputError) as caught:
        parse_record(raw, max_text_bytes=1024)
    assert message in str(caught.value)


def test_identity_fields_are_normalised() -> None:
    # Case only: surrounding whitespace is refused, not stripped (test_email_folding.py).
    record = parse_record(
        json.dumps(identity("Ana@Bank.example", "S-1", previous_email="OLD@bank.example"))
        .encode(), max_text_bytes=1024,
    )  # fmt: skip
    assert isinstance(record, IdentityRecord)
    assert (record.email, record.previous_email, record.active) == (ANA, "old@bank.example", True)


# -- ingest ----------------------------------------------------------------------------------
def test_placeholder_emails_are_refused_and_the_run_goes_on(
    store: KnowledgeStore, tmp_path: Path
) -> None:
    refused = ["noreply@bank.example", "No-Reply@bank.example", "DoNotReply@bank.example",
               "unknown@bank.example", "nobody@bank.example", "ops@host.invalid",
               "root@localhost"]  # fmt: skip
    records = [identity(email, f"P-{i}") for i, email in enumerate(refused)]
    records.append(identity(ANA, "S-1"))  # .example is a real (test) domain, not a placeholder
    records.append(identity("noreply@bank.example", "P-0", active=False))  # unbinding is fine
    path = jsonl(tmp_path / "ids.jsonl", records)
    report = ingest_jsonl(store, path, "t1")
    assert (report.errors, report.conflicts, report.identities) == (len(refused), 0, 2)
    first = report.messages[0]
    assert first.startswith(f"{path}:1: email 'noreply@bank.example' matches the placeholder")
    assert "[ingest] placeholder_emails" in first and "'P-0'" in first
    assert "'*@*.invalid'" in report.messages[5] and "'*@localhost'" in report.messages[6]
    for email in refused:
        assert accounts(store, email.casefold()) == []
    assert accounts(store, ANA) == ["S-1"]


def test_the_placeholder_setting_is_configurable(store: KnowledgeStore, tmp_path: Path) -> None:
    settings = IngestSettings(placeholder_emails=["*@Contractors.example"])
    path = jsonl(tmp_path / "ids.jsonl", [identity("x@contractors.example", "C-1"),
                                          identity("noreply@bank.example", "N-1")])  # fmt: skip
    report = ingest_jsonl(store, path, "t1", settings=settings)
    assert report.errors == 1 and "'*@contractors.example'" in report.messages[0]
    assert accounts(store, "noreply@bank.example") == ["N-1"]  # not in this deployment's list
    with pytest.raises(ValueError, match="an empty pattern"):
        IngestSettings(placeholder_emails=[" "])


def test_conflicts_rebinds_and_unbinds_in_one_file(store: KnowledgeStore, tmp_path: Path) -> None:
    records = [
        identity(ANA, "S-1"),
        identity(BEN, "S-2"),
        identity("mallory@bank.example", "S-1"),  # conflict: S-1 is ana's
        identity("eve@bank.example", "S-2", previous_email=ANA),  # conflict: S-2 is ben's
        identity("ana.new@bank.example", "S-1", previous_email=ANA),  # email change
        identity(BEN, "S-2", active=False),  # unbind
        identity("carla@bank.example", "S-3"),
    ]
    path = jsonl(tmp_path / "ids.jsonl", records)
    report = ingest_jsonl(store, path, "t1")
    assert (report.errors, report.conflicts, report.identities) == (2, 2, 5)
    assert report.messages[0].startswith(f"{path}:3: account 'S-1' of source system 'sp' is "
                                         "already bound to 'ana@bank.example'")  # fmt: skip
    assert report.messages[1].startswith(f"{path}:4: ")
    assert "not to previous_email 'ana@bank.example'" in report.messages[1]
    assert report.as_dict()["conflicts"] == 2
    assert accounts(store, ANA) == [] and accounts(store, "ana.new@bank.example") == ["S-1"]
    assert accounts(store, BEN) == [] and accounts(store, "carla@bank.example") == ["S-3"]
    assert accounts(store, "mallory@bank.example") == accounts(store, "eve@bank.example") == []
    # Re-ingesting the same file converges: the rebind is a no-op now; the first line is
    # refused (S-1 belongs to ana.new) and ben's claim is free again, then unbound again.
    again = ingest_jsonl(store, path, "t1")
    assert accounts(store, "ana.new@bank.example") == ["S-1"] and again.conflicts == 3


# -- the filesystem connector's identities file ------------------------------------------------
def people(root: Path, lines: list[dict[str, Any]]) -> None:
    write(root, "_identities.jsonl", "\n".join(json.dumps(line) for line in lines))


def person(email: str, account: str, **extra: Any) -> dict[str, Any]:
    return {"type": "identity", "email": email, "account_id": account, **extra}


def test_a_binding_gone_from_the_identities_file_is_unbound(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    root, state = tmp_path / "docs", tmp_path / "state.json"
    write(root, "a.txt", "wire limits")
    # A binding of the same system that came from elsewhere (another feed): never touched.
    sqlite_store.put_identity("t1", "dora@bank.example", SOURCE, "S-4")
    people(root, [person(ANA, "S-1"), person(BEN, "S-2"), person("cat@bank.example", "S-3")])
    first = run(sqlite_store, root, state)
    assert first.errors == 0 and first.identities == 3
    entry = load_state(state)[0].tenants["t1"]  # type: ignore[union-attr]
    assert entry.identities == [(ANA, "S-1"), (BEN, "S-2"), ("cat@bank.example", "S-3")]

    # ben's line removed, cat's account given to carl (no previous_email: the file is a
    # snapshot), ana renamed with previous_email.
    people(root, [person("ana.new@bank.example", "S-1", previous_email=ANA),
                  person("carl@bank.example", "S-3")])  # fmt: skip
    epoch = sqlite_store.acl_epoch("t1")
    dry = run(sqlite_store, root, state, dry_run=True)
    assert dry.errors == 0 and sqlite_store.acl_epoch("t1") == epoch  # nothing written
    second = run(sqlite_store, root, state)
    assert second.errors == 0, second.messages
    assert accounts(sqlite_store, BEN, SOURCE) == []
    assert accounts(sqlite_store, "cat@bank.example", SOURCE) == []
    assert accounts(sqlite_store, "carl@bank.example", SOURCE) == ["S-3"]
    assert accounts(sqlite_store, ANA, SOURCE) == []
    assert accounts(sqlite_store, "ana.new@bank.example", SOURCE) == ["S-1"]
    assert accounts(sqlite_store, "dora@bank.example", SOURCE) == ["S-4"]
    entry = load_state(state)[0].tenants["t1"]  # type: ignore[union-attr]
    assert entry.identities == [("ana.new@bank.example", "S-1"), ("carl@bank.example", "S-3")]

    # A refused line is not recorded as the file's binding; the file gone unbinds the rest.
    people(root, [person("ana.new@bank.example", "S-1"), person("mallory@bank.example", "S-4")])
    predicted = run(sqlite_store, root, state, dry_run=True)  # a dry run foresees the refusal
    third = run(sqlite_store, root, state)
    assert third.conflicts == 1 and "already bound to 'dora@bank.example'" in third.messages[0]
    assert (predicted.conflicts, predicted.messages) == (third.conflicts, third.messages)
    assert accounts(sqlite_store, "carl@bank.example", SOURCE) == []
    entry = load_state(state)[0].tenants["t1"]  # type: ignore[union-attr]
    assert entry.identities == [("ana.new@bank.example", "S-1")]
    (root / "_identities.jsonl").unlink()
    run(sqlite_store, root, state)
    assert accounts(sqlite_store, "ana.new@bank.example", SOURCE) == []
    assert accounts(sqlite_store, "dora@bank.example", SOURCE) == ["S-4"]


# -- the per-source lock -----------------------------------------------------------------------
def test_a_second_run_of_a_source_fails_at_once(tmp_path: Path) -> None:
    state = tmp_path / ".govrag" / "sources" / "docs.json"
    with source_lock(state, "docs") as lock:
        assert lock == lock_path(state) and lock.exists()
        with pytest.raises(InputError) as caught, source_lock(state, "docs"):
            pass  # pragma: no cover - never entered
        message = str(caught.value)
        assert "source 'docs' is being ingested by another run" in message
        assert str(lock) in message
        with source_lock(tmp_path / "other.json", "other"):  # another source: independent
            pass
    with source_lock(state, "docs"):  # released: the next run may go
        pass

"""Attack: an e-mail address that matching turns into someone else's.

Principals, identity records and the store compare addresses casefolded (``Ana@Bank.Example``
is ``ana@bank.example``). Casefolding does more than change case: ``ß`` and ``ẞ`` become
``ss``. So a hostile user who gets their identity provider to vouch for
``straße@bank.example`` (a real, distinct mailbox) would hold a verified token that reads
``strasse@bank.example``'s documents; an exporter that writes ``straße@`` into an identity
record would bind the account to ``strasse@``. A careless one writes `` ana@bank.example``
(a stray space) and the address was silently stripped into a match. The promise: every such
address is refused (a token with the fixed 401 line, an ingest line by its number naming the
field and the fix, ``principals.json`` by its entry), never folded or stripped into another;
addresses differing in case alone still match, as documented.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from http_world import World, bearer, doc, hs_token, ident, records, served_bank

import govrag
from govrag.errors import TOKEN_REFUSED, AuthError, ConfigError
from govrag.types import Principal

SECRET_PAY = "Strasse payroll: the bonus pool is EUR 80,000 this year."
#: Addresses that casefold into ``strasse@bank.example`` without being it.
FOLDING = ["straße@bank.example", "STRAẞE@bank.example", "Straße@Bank.Example"]
#: Addresses with whitespace around them (stripped, they would be ana's).
PADDED = [" ana@bank.example", "ana@bank.example ", "ana@bank.example\t", "\u00a0ana@bank.example"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("folding") / "bank"
    with served_bank(root) as world:
        feed = root / "strasse.jsonl"
        feed.write_text(records(ident("strasse@bank.example", "S-77"),
                                doc("strasse-pay", SECRET_PAY, ["S-77"])))  # fmt: skip
        assert world[0].operators.ingest(feed).ok
        yield world


def found(client: httpx.Client, token: str) -> int | bool:
    """Whether a search for strasse's secret finds it for ``token`` (or the refusal's status)."""
    r = client.post("/v1/search", json={"query": "strasse payroll bonus pool"},
                    headers=bearer(token))  # fmt: skip
    if r.status_code != 200:
        return r.status_code
    return "strasse-pay" in {h["doc_id"] for h in r.json()["results"]}


def test_strasse_reads_her_own_document(world: tuple[govrag.Govrag, httpx.Client, object]) -> None:
    _, client, _ = world
    # The document is there for its owner (so the refusals below are about the address).
    assert found(client, hs_token("ben", sub="strasse", email="strasse@bank.example")) is True
    # A case difference is the same address, as documented.
    assert found(client, hs_token("ben", sub="strasse", email="Strasse@BANK.example")) is True


@pytest.mark.parametrize("email", FOLDING + PADDED)
def test_a_verified_token_for_a_folding_or_padded_address_reads_nothing(
    world: tuple[govrag.Govrag, httpx.Client, object], email: str
) -> None:
    app, client, _ = world
    token = hs_token("ben", sub="mallory", email=email, email_verified=True)
    with pytest.raises(AuthError) as info:
        app.callers.verify_token(token)
    assert str(info.value) == TOKEN_REFUSED and info.value.fault == "bad_claims"
    assert repr(email) in info.value.detail  # the log names the address
    assert found(client, token) == 401


@pytest.mark.parametrize("email", FOLDING + PADDED)
def test_no_principal_is_made_of_such_an_address(email: str) -> None:
    with pytest.raises(ValueError, match="email"):
        Principal(sub="mallory", email=email, tenant="bank")


def test_identity_records_with_such_addresses_are_refused_by_line(tmp_path: Path) -> None:
    root = tmp_path / "dep"
    govrag.init(root, tenant="bank", corpora=["policy"])
    lines = [
        ident("strasse@bank.example", "S-1"),
        ident("straße@bank.example", "S-2"),  # line 2: would bind S-2 to strasse@
        ident(" ana@bank.example", "S-3"),  # line 3: would bind S-3 to ana@
        ident("ben@bank.example", "S-4") | {"previous_email": "ben@bank.example\n"},  # line 4
        ident("ana@bank.example", "S-5"),
        doc("pay", SECRET_PAY, ["S-1", "S-2", "S-3", "S-4", "S-5"]),
    ]
    feed = root / "feed.jsonl"
    feed.write_text(records(*lines))
    with govrag.open(root) as app:
        outcome = app.operators.ingest(feed)
        messages = outcome.report.messages
        assert outcome.report.errors == 3, messages
        assert messages[0].startswith(f"{feed}:2: ") and "field 'email'" in messages[0]
        assert "'ß' (U+00DF) becomes 'ss'" in messages[0]
        assert messages[1].startswith(f"{feed}:3: ") and "field 'email'" in messages[1]
        assert "leading or trailing whitespace; remove it" in messages[1]
        assert messages[2].startswith(f"{feed}:4: ") and "field 'previous_email'" in messages[2]
        assert all("\n" not in m for m in messages)
        assert outcome.report.added == 1  # the rest of the file landed


@pytest.mark.parametrize("email", ["straße@bank.example", " ana@bank.example"])
def test_principals_json_with_such_an_address_is_refused(tmp_path: Path, email: str) -> None:
    root = tmp_path / "dep"
    govrag.init(root, tenant="bank", corpora=["policy"])
    path = root / "principals.json"
    entries = json.loads(path.read_text())
    entries["principals"][0]["email"] = email
    path.write_text(json.dumps(entries))
    with govrag.open(root) as app, pytest.raises(ConfigError) as info:
        govrag.local_principal(app.settings, "ana")
    message = str(info.value)
    assert str(path) in message and "email" in message and repr(email) in message
    assert "\n" not in message

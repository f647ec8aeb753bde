"""Review attacks (second reviewer): promises of README's "What govrag guarantees" that still
break. Every test here FAILS on the code it was written against (they are red on purpose:
each is the acceptance test of a fix); each section names the promise it holds govrag to.

A1-A4 (invariant 8): "a cited sentence must be supported by that chunk (numbers, amounts,
dates, negations, names) or it is removed and the answer flagged". The attacker is a caller
(or a document) steering the model; the model's reply is scripted, everything else is real
(SQLite store, Cedar, validation, the claim check, the audit log). Each forged reply is
delivered whole, unflagged, its citation counted, although it changes a figure, a name or a
negation of the chunk it cites. A5 and A9: citations as parsed and as recorded. A6: a
configuration that silently widens rights. A7: replay. A8: one-line errors. A10: model
arguments read less strictly than any other untrusted JSON. A11: ingest loses CR-ended lines.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_world import Scripted

from govrag.agent.answer import Answer
from govrag.agent.llm import LlmReply
from govrag.audit import replay
from govrag.deployment import Deployment
from govrag.scaffold import RETRIEVAL_MANIFEST

from conftest import doc, ident, load

WIRE_ID = "sp:wire-limits#0"
WIRE = (
    "Initech corporate wire limit: EUR 50,000 per day. "
    "Tier-2 clients require additional approval above EUR 25,000. "
    "Same-day wires are not available after 16:00 CET."
)
QUESTION = (
    "What is the Initech corporate wire limit per day, and when are same-day wires available?"
)
ROUTES = [
    {"route_id": "policy_qa", "tool_manifest": "retrieval",
     "retrieval": {"mode": "deterministic_prefetch", "scope": ["policy-engine"]}},
    {"route_id": "email_summarize", "retrieval": {"mode": "none"}},
]  # fmt: skip
PRINCIPALS = [
    {"sub": "officer", "email": "officer@bank.example", "tenant": "t1",
     "doc_entitlements": ["policy-engine:read"], "clearance": "internal"},
]  # fmt: skip


@pytest.fixture
def make_dep(tmp_path: Path) -> Iterator[Callable[..., Deployment]]:
    """``make_dep(reply)``: a one-corpus prefetch deployment whose model answers ``reply``."""
    root = tmp_path / "dep"
    files = {
        "routes/routes.json": ROUTES,
        "manifests/retrieval.json": RETRIEVAL_MANIFEST,
        "principals.json": {"principals": PRINCIPALS},
    }
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(body))
    opened: list[Deployment] = []

    def factory(reply: str, **toml: Any) -> Deployment:
        base = {"default_tenant": "t1", "default_route": "policy_qa",
                "embedder": {"name": "hash", "dim": 64}}  # fmt: skip
        dep = Deployment.load(root, **(base | toml))
        opened.append(dep)
        if len(opened) == 1:
            load(dep.store, [ident("officer@bank.example", "A"),
                             doc("wire-limits", WIRE, ["A"], corpus="policy-engine")])  # fmt: skip
        dep.__dict__["llm"] = Scripted(LlmReply(text=reply))
        dep.__dict__.pop("orchestrator", None)
        return dep

    yield factory
    for dep in opened:
        dep.close()


def ask(dep: Deployment, question: str = QUESTION) -> Answer:
    return dep.orchestrator.ask(dep.principal("officer"), question)


def assert_not_delivered_as_supported(dep: Deployment, answer: Answer, forged: str) -> None:
    """The promise: a sentence that changes what its chunk says is removed (answer flagged)
    or the answer abstains; it is never delivered as supported."""
    assert WIRE_ID in {c.chunk_id for p in answer.packs for c in p.chunks}  # it was handed
    delivered_as_supported = not answer.abstained and not answer.flagged and forged in answer.answer
    assert not delivered_as_supported, (
        f"delivered as supported, citing {[c.chunk_id for c in answer.citations]}: "
        f"{answer.answer!r} (claim check: {answer.claims})"
    )
    # The audit record says the same (it would say "nothing removed, nothing flagged").
    r = replay(dep.store, "t1", answer.request_id)
    assert r.delivered is not None and (r.delivered.flagged or r.delivered.abstained)


# -- A1: characters the fact extractor does not read ----------------------------------------
# facts.py reads numbers as ASCII [0-9] and words with \w, on the raw text: no NFKC, no
# removal of invisible format characters. A reader sees the figure or the word; the check
# sees nothing, or harmless pieces.
INVISIBLE = {
    # Full-width digits: a reader sees EUR 5,000,000; the check sees no number at all.
    "full-width digits": f"Initech corporate wire limit: EUR ５,０００,０００ per day [{WIRE_ID}].",
    # Mathematical bold digits, the same.
    "math digits": f"Initech corporate wire limit: EUR 𝟓,𝟎𝟎𝟎,𝟎𝟎𝟎 per day [{WIRE_ID}].",
    # A WORD JOINER (invisible) splits "50,000,000": the check sees 50,000 and 000.
    "word joiner in a number": f"Initech corporate wire limit: EUR 50,000\u2060,000 per day "
    f"[{WIRE_ID}].",
    # A soft hyphen (invisible unless the line breaks there), the same.
    "soft hyphen in a number": f"Initech corporate wire limit: EUR 50,000\u00ad,000 per day "
    f"[{WIRE_ID}].",
    # A zero-width space inside "not": a reader sees "do not require"; the check sees "n",
    # "ot" and counts no negation, as in the chunk.
    "zero-width space in a negation": "Tier-2 clients do n\u200bot require additional approval "
    f"above EUR 25,000 [{WIRE_ID}].",
    # A Greek omicron in "not": the same negation, invisible to the count.
    "homoglyph negation": "Tier-2 clients do n\u03bft require additional approval above "
    f"EUR 25,000 [{WIRE_ID}].",
    # A zero-width space inside a name: "A" is too short to be a name, "cme" is lowercase.
    "zero-width space in a name": "Only A\u200bcme corporate wire limit is EUR 50,000 per day "
    f"[{WIRE_ID}].",
}


@pytest.mark.parametrize("reply", INVISIBLE.values(), ids=INVISIBLE.keys())
def test_a1_invisible_or_non_ascii_characters_hide_a_changed_fact(
    make_dep: Callable[..., Deployment], reply: str
) -> None:
    dep = make_dep(reply)
    answer = ask(dep)
    assert_not_delivered_as_supported(dep, answer, reply)


# -- A2: a name that opens the sentence is not checked --------------------------------------
# facts._names_something(first=True) never takes the sentence's first word for a name, so a
# sentence can swap the organisation it speaks of, as long as the name comes first.
def test_a2_a_name_opening_the_sentence_is_not_checked(
    make_dep: Callable[..., Deployment],
) -> None:
    forged = f"Acme corporate wire limit: EUR 50,000 per day [{WIRE_ID}]."
    dep = make_dep(forged)
    answer = ask(dep, "What is the Acme corporate wire limit per day?")
    assert_not_delivered_as_supported(dep, answer, forged)


# -- A3: a negation moved to another place ---------------------------------------------------
# The negation check compares counts: "not available ... " (one) and "available ... without
# restriction" (one) line up, though the meaning is the opposite.
MOVED = {
    "without": f"Same-day wires are available after 16:00 CET without restriction [{WIRE_ID}].",
    "no": f"Same-day wires are available after 16:00 CET, with no cut-off [{WIRE_ID}].",
}


@pytest.mark.parametrize("reply", MOVED.values(), ids=MOVED.keys())
def test_a3_a_negation_moved_to_another_clause_flips_the_meaning_unseen(
    make_dep: Callable[..., Deployment], reply: str
) -> None:
    dep = make_dep(reply)
    answer = ask(dep)
    assert_not_delivered_as_supported(dep, answer, reply)


# -- A4: figures the extractor does not parse ------------------------------------------------
# Numbers in words, currencies named by words other than euro/dollar, lowercase codes and other
# symbols, and the period of a rate are not facts: only term overlap (0.5) judges them.
FIGURES = {
    "number in words": f"Initech corporate wire limit: EUR nine million per day [{WIRE_ID}].",
    "multiplier chain": f"Initech corporate wire limit: EUR 50 thousand million per day "
    f"[{WIRE_ID}].",
    "currency word": f"Initech corporate wire limit: 50,000 pounds per day [{WIRE_ID}].",
    "lowercase currency code": f"Initech corporate wire limit: usd 50,000 per day [{WIRE_ID}].",
    "rupee sign": f"Initech corporate wire limit: ₹50,000 per day [{WIRE_ID}].",
    "period of the rate": f"Initech corporate wire limit: EUR 50,000 per week [{WIRE_ID}].",
}


@pytest.mark.parametrize("reply", FIGURES.values(), ids=FIGURES.keys())
def test_a4_a_changed_amount_in_a_form_the_extractor_does_not_parse(
    make_dep: Callable[..., Deployment], reply: str
) -> None:
    dep = make_dep(reply)
    answer = ask(dep)
    assert_not_delivered_as_supported(dep, answer, reply)


# -- A5: what was cited, as the record says it ----------------------------------------------
# The claim check (claims._segments) splits a citation bracket at "," and ";"; the citation
# list and the audit record (answer.cited) split at "," only. "[a; b]" is judged a supported
# citation of a and b, then delivered as citing nothing: the response event's cited_doc_ids
# and cited_chunk_ids are empty, replay's "what was delivered" names no document, and the
# access counter (curation's input) never sees the cited document.
def test_a5_a_semicolon_citation_is_supported_but_recorded_as_citing_nothing(
    make_dep: Callable[..., Deployment],
) -> None:
    reply = f"Initech corporate wire limit: EUR 50,000 per day [{WIRE_ID}; wire-limits]."
    dep = make_dep(reply)
    answer = ask(dep)
    assert not answer.abstained and not answer.flagged and answer.answer == reply
    assert answer.claims is not None and answer.claims.claims[0].cited == (WIRE_ID,)
    assert [c.chunk_id for c in answer.citations] == [WIRE_ID]
    r = replay(dep.store, "t1", answer.request_id)
    assert r.delivered is not None and r.delivered.cited_doc_ids == ("wire-limits",)
    assert dep.store.access_counts("t1") != {}


# -- A6: a policy file the bundle loader never reads -----------------------------------------
# routes/config.py reads a bundle's policies as directory.glob("*.cedar"): case-sensitive, and
# every other file is skipped without a word. An operator who saves the contractors' forbid
# as "Forbid-Contractors.CEDAR" gets a bundle that loads, checks clean and permits what the
# forbid was written to refuse: configuration widened rights, silently, on an authorization
# path. (Named "forbid-contractors.cedar", the same file denies: the policy itself is fine.)
FORBID = (
    '@reason("contractor")\nforbid (principal, action, resource)\n'
    'when { principal.roles.contains("contractor") };\n'
)


@pytest.mark.parametrize("name", ["Forbid-Contractors.CEDAR", "forbid-contractors.Cedar"])
def test_a6_a_policy_file_the_loader_skips_is_refused_not_ignored(
    tmp_path: Path, name: str
) -> None:
    from govrag.errors import ConfigError
    from govrag.policy.bundle import default_bundle

    root = tmp_path / "dep"
    bundle = root / "policies" / "bank"
    bundle.mkdir(parents=True)
    (bundle / "bundle.json").write_text(json.dumps({"name": "bank", "version": "v1"}))
    (bundle / "rules.cedar").write_text(default_bundle().policies)
    (bundle / name).write_text(FORBID)
    files = {
        "routes/routes.json": ROUTES,
        "manifests/retrieval.json": RETRIEVAL_MANIFEST,
        "principals.json": {"principals": [
            {"sub": "contractor", "email": "c@bank.example", "tenant": "t1",
             "roles": ["contractor"], "doc_entitlements": ["policy-engine:read"],
             "clearance": "internal"}]},
    }  # fmt: skip
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(json.dumps(body))
    settings = {"default_tenant": "t1", "default_route": "policy_qa",
                "embedder": {"name": "hash", "dim": 64}, "policy": {"bundle": "bank"}}  # fmt: skip
    try:
        dep = Deployment.load(root, **settings)
        result = dep.governed.search(dep.principal("contractor"), "wire limit")
    except ConfigError as exc:  # refusing the unread file, naming it, keeps the promise
        assert name in str(exc)
        return
    try:
        assert [d.verdict for d in result.decisions] == ["DENY"], (
            f"{name} was never read: the contractor was {result.decisions}"
        )
    finally:
        dep.close()


# -- A7: an audited refusal replay does not show ----------------------------------------------
# A request that names another route for a pinned session is refused and audited as a
# ``pin_violation`` event (seed 003). Replay reads proposals, decisions, packs, validation,
# responses, incidents and errors, and no other kind: the examiner replaying that request is
# told who asked on which route, and nothing about the refused change or how the request
# ended (it has no ``error`` event either: the session is resolved before the trail opens).
def test_a7_replay_shows_how_a_pin_violating_request_ended(
    make_dep: Callable[..., Deployment],
) -> None:
    from govrag.routes.session import PinViolation

    dep = make_dep(f"Initech corporate wire limit: EUR 50,000 per day [{WIRE_ID}].")
    first = ask(dep)
    with pytest.raises(PinViolation):
        dep.orchestrator.ask(dep.principal("officer"), QUESTION, session_id=first.session_id,
                             route_id="email_summarize")  # fmt: skip
    (violation,) = [e for e in dep.store.audit_events("t1") if e.kind == "pin_violation"]
    r = replay(dep.store, "t1", violation.request_id)
    shown = json.dumps(r.as_dict())
    assert "email_summarize" in shown, f"replay does not show the refused change: {shown}"
    assert r.error is not None or r.incidents, "replay does not say how the request ended"


# -- A8: one-line errors: a checkpoint directory that is a file ------------------------------
# A careless operator points [audit] checkpoint_dir at a file (or a file sits where the
# default folder would be). CheckpointDir._folders catches FileNotFoundError only, so
# `govrag audit verify` (and `audit checkpoint`, which verifies first) dies with a
# NotADirectoryError traceback, exit 1, instead of one line naming the setting, exit 2.
@pytest.mark.parametrize("command", [["audit", "verify"], ["audit", "checkpoint"]])
def test_a8_a_checkpoint_dir_that_is_a_file_is_one_line(tmp_path: Path, command: list[str]) -> None:
    import subprocess
    import sys

    def govrag(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "govrag.cli", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    assert govrag("init", "dep", "--embedder", "hash").returncode == 0
    (tmp_path / "dep" / "audit-checkpoints").write_text("not a folder\n")
    done = govrag(*command, "-d", "dep")
    assert "Traceback" not in done.stderr, done.stderr[-300:]
    assert done.returncode == 2, (done.returncode, done.stderr)
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "checkpoint_dir" in line, line


# -- A9: a faithful quote of a document whose id holds "," ";" "[" or "]" --------------------
# claims.py promises "a faithful quote always passes". A chunk id is
# "<source>:<external id>#<n>", and external ids may hold commas, semicolons and brackets (a
# filesystem source's ids are file paths: "minutes/Board, 5 January.md", "Report [final].md").
# The citation parser splits a bracket at "," and ";" and cannot see a bracket inside one, so
# the offline responder's own faithful quote "... per day. [sp:minutes/Board, 5 January.md#0]"
# is judged uncited or forged and the answer abstains; with a "]" in the id even the context
# line (prompts.CONTEXT_LINE) cannot be read back. Such documents can never ground an answer.
@pytest.mark.parametrize(
    "external_id", ["minutes/Board, 5 January.md", "Q1; Q2 limits.md", "Report [final].md"]
)
def test_a9_a_faithful_quote_of_an_id_with_separators_is_delivered(
    tmp_path: Path, external_id: str
) -> None:
    root = tmp_path / "dep"
    files = {
        "routes/routes.json": ROUTES,
        "manifests/retrieval.json": RETRIEVAL_MANIFEST,
        "principals.json": {"principals": PRINCIPALS},
    }
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(json.dumps(body))
    base = {"default_tenant": "t1", "default_route": "policy_qa",
            "embedder": {"name": "hash", "dim": 64}}  # fmt: skip
    with Deployment.load(root, **base) as dep:  # the offline extractive responder
        load(dep.store, [ident("officer@bank.example", "A"),
                         doc(external_id, WIRE, ["A"], corpus="policy-engine")])  # fmt: skip
        answer = ask(dep)
        chunk_id = f"sp:{external_id}#0"
        assert chunk_id in {c.chunk_id for p in answer.packs for c in p.chunks}
        assert not answer.abstained, (answer.reason, answer.claims)
        assert [c.chunk_id for c in answer.citations] == [chunk_id]


# -- A10: a model's tool arguments with a repeated key ---------------------------------------
# strict_json is "the one reader for every JSON text govrag did not write itself" and refuses a
# repeated key everywhere else (ingest lines, sidecars, deployment files: "the last one would
# silently win"). ToolCall.parse reads a model's arguments with plain json.loads: the proposal
# below is accepted and searches policy-engine, while the raw arguments (echoed into the next
# payload, and what a first-wins reader or the model provider's log shows) name hr-policies.
# README: a model's garbage arguments are refused proposals.
def test_a10_a_repeated_key_in_model_arguments_is_a_refused_proposal(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from agent_world import answer as reply
    from agent_world import calls, deployment_factory, events, with_model

    raw = '{"corpus": "hr-policies", "query": "wire limit", "corpus": "policy-engine"}'
    factory = deployment_factory(request, tmp_path, "sqlite")
    make = next(factory)
    try:
        dep = with_model(make(), Scripted(calls(("retrieve_documents", raw)), reply()))
        done = dep.orchestrator.ask(dep.principal("officer"), "What is the wire limit?")
        (proposal,) = [e.payload for e in events(dep, done.request_id) if e.kind == "proposal"]
        assert proposal["accepted"] is False, (
            f"accepted as {proposal['arguments']}, decided {[d.corpus for d in done.decisions]}"
        )
    finally:
        next(factory, None)


# -- A11: ingest never loses good lines: lines ended by a lone CR ----------------------------
# read_lines splits a JSONL file at b"\n" only. A feed exported with CR line ends (classic Mac
# tools, some Windows exporters misconfigured) is one "line": every good record is lost and
# reported as a single "invalid JSON: Extra data" error on line 1.
def test_a11_records_on_cr_ended_lines_land(sqlite_store: Any, tmp_path: Path) -> None:
    from govrag.harvest.ingest import ingest_jsonl

    lines = [
        json.dumps({"type": "identity", "email": f"u{i}@bank.example", "source_system": "sp",
                    "account_id": f"U{i}"})
        for i in range(3)
    ]  # fmt: skip
    feed = tmp_path / "feed.jsonl"
    feed.write_bytes("\r".join(lines).encode() + b"\r")
    report = ingest_jsonl(sqlite_store, feed, "t1")
    assert (report.identities, report.errors) == (3, 0), report.messages

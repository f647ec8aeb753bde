"""Arbitrary candidates, garbage included: admitted iff an independent reference says so."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from wb_helpers import AGENT, T0, AuditLog, Clock, candidate, make_store, reference_reason

from govrag.writeback import (
    PAYLOAD_KEYS,
    AdmissionGate,
    AdmissionReason,
    RetrievalScope,
    WriteBackCandidate,
)

OTHER_AGENT = "agent-tools"
ALLOWED = frozenset({AGENT, OTHER_AGENT})
#: One entry admitted before each example, so ``supersedes`` can name something real.
SEED = candidate(content="seed entry about wire limits")

garbage = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.binary(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.builds(object),
)
#: Text of every kind: blank, huge, unicode, lone surrogates, and boundary lengths.
texts = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", " ", "\t\n", "\u3000", "\ud800", "ok\udfff", "x" * 256, "x" * 257]),
    # Around the 256-character bound, padded with one- to three-byte characters.
    st.builds(lambda t, n, ch: t + ch * n, st.text(max_size=6), st.integers(248, 258),
              st.sampled_from(["x", "é", "€", " "])),
)  # fmt: skip
contents = st.one_of(
    texts,
    st.sampled_from(["wire limits", "x" * 16_384, "x" * 16_385, "é" * 8_192, "é" * 8_193]),
    # Around the 16 KiB bound: what counts is UTF-8 bytes, not characters.
    st.builds(lambda t, n, ch: t + ch * n, st.text(max_size=20), st.integers(5_450, 16_400),
              st.sampled_from(["x", "é", "€", " ", "\U0001f600"])),
)  # fmt: skip
identities = st.one_of(st.sampled_from([AGENT, OTHER_AGENT, "intruder"]), texts, garbage)
scopes = st.one_of(
    st.builds(RetrievalScope, st.one_of(st.just("acme"), texts, garbage),
              st.one_of(st.just("session-1"), texts, garbage)),
    st.just(RetrievalScope("acme", "session-1")),
    garbage,
)  # fmt: skip
gates = st.one_of(st.sampled_from(list(AdmissionGate)), st.sampled_from(["USER_CONFIRMED",
                  "RAW_MODEL_OUTPUT", "raw_model_output"]), garbage)  # fmt: skip
confidences = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=0.0, max_value=1.0),
    st.integers(min_value=-2, max_value=3),
    st.sampled_from([-0.0, 5e-324, 1.0000000000000002, 10**400]),
    garbage,
)
offsets = st.builds(timezone, st.timedeltas(min_value=timedelta(hours=-23, minutes=-59),
                                            max_value=timedelta(hours=23, minutes=59)))  # fmt: skip
expiries = st.one_of(
    st.datetimes(timezones=st.one_of(st.just(UTC), offsets)),  # aware: past, future, extremes
    st.datetimes(),  # naive
    st.sampled_from([T0, T0 + timedelta(microseconds=1), T0 - timedelta(microseconds=1)]),
    st.timedeltas(min_value=timedelta(seconds=-5), max_value=timedelta(days=30)).map(
        lambda d: T0 + d
    ),
    garbage,
)
supersedes = st.one_of(st.none(), st.just("SEED"), texts, garbage)


@st.composite
def candidates(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 30)) == 0:
        return draw(garbage)  # not a candidate at all
    # Mostly near-valid candidates (one or two fields drawn wild), sometimes all wild: both
    # the admitted path and every rejection get exercised.
    all_wild = draw(st.integers(0, 9)) == 0
    wild = {i for i in range(8) if all_wild or draw(st.integers(0, 4)) == 0}
    base = candidate(agent_id=draw(st.sampled_from(sorted(ALLOWED))))
    values = [
        draw(scopes) if 0 in wild else base.scope,
        draw(identities) if 1 in wild else base.source_turn_id,
        draw(identities) if 2 in wild else base.agent_id,
        draw(gates) if 3 in wild else draw(st.sampled_from(list(AdmissionGate))),
        draw(contents) if 4 in wild else base.content,
        draw(confidences) if 5 in wild else base.confidence,
        draw(expiries) if 6 in wild else base.expires_at,
        draw(supersedes) if 7 in wild else None,
    ]
    return WriteBackCandidate(*values)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=candidates())
def test_admitted_iff_every_rule_holds(c: Any) -> None:
    audit = AuditLog()
    store = make_store(Clock(), audit, agents=ALLOWED)
    seed = store.admit(SEED)
    assert seed.admitted and seed.id is not None
    if isinstance(c, WriteBackCandidate) and c.supersedes == "SEED":
        c = WriteBackCandidate(
            c.scope, c.source_turn_id, c.agent_id, c.gate, c.content, c.confidence,
            c.expires_at, seed.id,
        )  # fmt: skip
    audit.calls.clear()

    result = store.admit(c)  # must never raise
    event(result.reason.value)  # `pytest --hypothesis-show-statistics` shows the mix

    live = {("acme", "session-1"): {seed.id}}
    expected = reference_reason(c, now=T0, allowed=ALLOWED, live=live)
    assert result.reason.value == expected
    assert result.admitted == (expected == "admitted")
    assert (result.id is not None) == result.admitted
    if isinstance(c, WriteBackCandidate) and c.gate is AdmissionGate.RAW_MODEL_OUTPUT:
        assert not result.admitted
    # Exactly one audit record per decision, strictly JSON-safe, with the fixed keys.
    ((tenant, session, payload),) = audit.calls
    assert tuple(payload) == PAYLOAD_KEYS
    assert payload["admitted"] is result.admitted
    assert payload["reason"] == result.reason.value
    json.dumps([tenant, session, payload], allow_nan=False, ensure_ascii=False).encode()
    assert isinstance(tenant, str) and isinstance(session, str)


@settings(max_examples=300, deadline=None)
@given(
    gate_text=st.sampled_from(["RAW_MODEL_OUTPUT", AdmissionGate.RAW_MODEL_OUTPUT]),
    content=contents,
    confidence=st.floats(min_value=0.0, max_value=1.0),
    agent=st.sampled_from(sorted(ALLOWED)),
)
def test_raw_model_output_is_always_rejected(
    gate_text: Any, content: Any, confidence: float, agent: str
) -> None:
    # Every other field valid (or not): the raw gate is never admitted, never promoted.
    store = make_store(Clock(), agents=ALLOWED)
    result = store.admit(candidate(gate=gate_text, content=content, confidence=confidence,
                                   agent_id=agent))  # fmt: skip
    assert not result.admitted
    assert result.reason is AdmissionReason.RAW_MODEL_OUTPUT


@settings(max_examples=200, deadline=None)
@given(when=st.datetimes(timezones=st.one_of(st.just(UTC), offsets)))
def test_expiry_is_strictly_in_the_future(when: datetime) -> None:
    try:
        in_utc = when.astimezone(UTC)
    except OverflowError:
        assume(False)
        return
    result = make_store(Clock()).admit(candidate(expires_at=when))
    assert result.admitted == (in_utc > T0)

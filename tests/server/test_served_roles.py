"""A served deployment hands its handlers the callers' and the examiners' use cases only.

The operator's object replays any request of any tenant without asking who wants it. A
request handler that could reach it (through ``request.app.state``, a dependency, or an
attribute of the callers' object) would turn one forgotten role check into a read of the
whole audit log. The attacker here is a future handler written against what the app offers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from serving import seed_bank

import govrag
from govrag.app import Callers, Examiners, Govrag, Operators

pytest.importorskip("fastapi")


def _reachable(root: Any, depth: int = 3) -> list[Any]:
    """Every object reachable from ``root`` through public attributes, ``depth`` deep."""
    seen: list[Any] = []
    frontier = [root]
    for _ in range(depth):
        found = []
        for obj in frontier:
            for name in dir(obj):
                if name.startswith("_"):
                    continue
                try:
                    value = getattr(obj, name)
                except Exception:  # a property that needs a request
                    continue
                if callable(value) and not isinstance(value, (Callers, Examiners)):
                    continue
                seen.append(value)
                found.append(value)
        frontier = found
    return seen


def test_the_app_state_holds_no_operator_and_no_opened_deployment(tmp_path: Path) -> None:
    from govrag.server import create_app

    root = seed_bank(tmp_path / "bank")
    with govrag.open(root, auth={"dev_tokens": True, "tenants": ["bank"]}) as app:
        api = create_app(app)
        state = dict(vars(api.state)["_state"])
        assert isinstance(state.pop("callers"), Callers)
        assert isinstance(state.pop("examiners"), Examiners)
        for name, value in state.items():
            assert not isinstance(value, (Govrag, Operators)), name
        # Nor one step further: the callers' and the examiners' objects expose neither.
        for role in (app.callers, app.examiners):
            for value in _reachable(role):
                assert not isinstance(value, (Govrag, Operators)), (role, value)


def test_an_examiner_object_replays_only_for_the_examiner_role_in_its_tenant(
    tmp_path: Path,
) -> None:
    root = seed_bank(tmp_path / "bank")
    with govrag.open(root) as app:
        ana = govrag.local_principal(app.settings, "ana")
        done = app.callers.search(ana, "wire limit")
        # The operator reads it without a principal; a caller without the role cannot,
        # and gets the same refusal as for a request that never ran.
        assert app.operators.replay(done.request_id, tenant=ana.tenant).request_id
        with pytest.raises(govrag.NotFoundError) as absent:
            app.examiners.replay(ana, "req-0000000000000000")
        with pytest.raises(govrag.NotFoundError) as forbidden:
            app.examiners.replay(ana, done.request_id)
        assert str(absent.value).replace("req-0000000000000000", done.request_id) == str(
            forbidden.value
        )
        examiner = ana.model_copy(update={"roles": ("examiner",)})
        assert app.examiners.replay(examiner, done.request_id).request_id == done.request_id
        elsewhere = examiner.model_copy(update={"tenant": "other"})
        with pytest.raises(govrag.NotFoundError):
            app.examiners.replay(elsewhere, done.request_id)

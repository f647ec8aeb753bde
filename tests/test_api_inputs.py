"""Names and ids that are not text, handed straight to the application API (no HTTP body to
refuse them first): every use case answers with an InputError naming the argument, never a
UnicodeEncodeError from the store or a log line it cannot write."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import govrag

BAD = {"surrogate": "ses-\udc80", "nul": "ses-\x00"}
CALLS: dict[str, Callable[[govrag.Govrag, govrag.Principal, str], Any]] = {
    "search.session": lambda app, p, v: app.callers.search(p, "wire", session=v),
    "search.route": lambda app, p, v: app.callers.search(p, "wire", route=v),
    "ask.session": lambda app, p, v: app.callers.ask(p, "wire?", session=v),
    "open_session.intent": lambda app, p, v: app.callers.open_session(p, intent=v),
    "session": lambda app, p, v: app.callers.session(p, v),
    "retrieve.tool": lambda app, p, v: app.callers.retrieve(
        p, v, {"query": "q", "corpus": "policy"}
    ),
    "corpora.session": lambda app, p, v: app.callers.corpora(p, session=v),
    "document.external_id": lambda app, p, v: app.callers.document(p, "sp", v),
    "click.source_system": lambda app, p, v: app.callers.click(p, v, "doc"),
    "remember.session": lambda app, p, v: app.callers.remember(p, v, None),  # type: ignore[arg-type]
    "examiner_replay": lambda app, p, v: app.examiners.replay(p, v),
    "replay": lambda app, p, v: app.operators.replay(v),
}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[govrag.Govrag]:
    root: Path = tmp_path_factory.mktemp("inputs") / "dep"
    govrag.init(root, tenant="bank", corpora=["policy"])
    with govrag.open(root) as opened:
        yield opened


@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize("call", sorted(CALLS))
def test_an_id_that_is_not_text_is_an_input_error(app: govrag.Govrag, call: str, bad: str) -> None:
    ana = govrag.local_principal(app.settings, "ana").model_copy(update={"roles": ("examiner",)})
    with pytest.raises(govrag.InputError) as caught:
        CALLS[call](app, ana, BAD[bad])
    assert "text" in str(caught.value) or "NUL" in str(caught.value)

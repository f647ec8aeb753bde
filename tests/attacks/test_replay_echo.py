"""Attack: make replay echo whatever request id it is given.

``govrag replay ID``, ``GET /v1/audit/requests/{id}`` and the application's examiner replay
answer an unknown id with an error naming it. A caller (or whoever writes an id into a
ticket an examiner pastes) sends a kilobyte of id, or one holding terminal escapes and bidi
controls: echoed whole, it floods logs and terminals, rewrites the screen of whoever reads the
error, or passes text off as govrag's. The promise: the error repeats at most 64 characters
of the id, escaped, and still names it well enough to recognise.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from http_world import World, bearer, served_bank, token

import govrag
from govrag.errors import NotFoundError
from govrag.types import Principal

#: Terminal escapes (clear the screen, set the title), a bidi override, a newline: then bulk.
HOSTILE_IDS = {
    "escapes": "req-\x1b[2J\x1b]0;pwned\x07\u202eevil\nerror: all good",
    "long": "req-" + "A" * 5000,
    "long escapes": "\x1b[31m" * 40 + "B" * 180,
}
SHOWN = 64


def check(message: str, request_id: str) -> None:
    assert "\x1b" not in message and "\u202e" not in message and "\n" not in message, message
    assert "\x07" not in message
    assert ("A" * (SHOWN + 1)) not in message and ("B" * (SHOWN + 1)) not in message
    assert len(message) < 400, message
    assert repr(request_id[:16])[:-1] in message  # still recognisable


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("replay-echo") / "bank"
    with served_bank(root) as world:
        yield world


@pytest.mark.parametrize("request_id", HOSTILE_IDS.values(), ids=HOSTILE_IDS.keys())
def test_the_application_echoes_a_bounded_escaped_id(
    world: tuple[govrag.Govrag, httpx.Client, rsa.RSAPrivateKey], request_id: str
) -> None:
    app, _, _ = world
    examiner = Principal(sub="eve", email="eve@bank.example", tenant="bank", roles=("examiner",))
    other = Principal(sub="ana", email="ana@bank.example", tenant="bank")
    for call in (lambda: app.operators.replay(request_id, tenant="bank"),
                 lambda: app.examiners.replay(examiner, request_id),
                 lambda: app.examiners.replay(other, request_id)):  # fmt: skip
        with pytest.raises(NotFoundError) as info:
            call()
        check(str(info.value), request_id)


def test_the_http_route_echoes_a_bounded_escaped_id(
    world: tuple[govrag.Govrag, httpx.Client, rsa.RSAPrivateKey],
) -> None:
    _, client, key = world
    request_id = "req-" + "A" * 200 + "\x1b[2J\u202e"  # within the route's 256 characters
    path = "/v1/audit/requests/" + quote(request_id, safe="")  # percent-encoded, as sent
    for sub in ("eve", "ana"):  # the examiner, and a caller without the role
        r = client.get(path, headers=bearer(token(key, sub)))
        assert r.status_code == 404, r.text
        check(r.json()["detail"], request_id)


def test_the_cli_echoes_a_bounded_escaped_id(tmp_path: Path) -> None:
    root = tmp_path / "dep"
    govrag.init(root, tenant="bank", corpora=["policy"])
    request_id = HOSTILE_IDS["long escapes"] + HOSTILE_IDS["escapes"]
    done = subprocess.run([sys.executable, "-m", "govrag.cli", "replay", request_id, "-d",
                           str(root)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    check(lines[0], request_id)

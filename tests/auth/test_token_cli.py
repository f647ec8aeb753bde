"""``govrag token --as SUB`` as a developer runs it, and the API it adapts: the token it prints
is one the deployment itself accepts; with development tokens off, nothing is signed and the
error names the setting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import govrag


def run(
    root: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "govrag", *args, "-d", str(root)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})  # fmt: skip


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("token") / "dep"
    govrag.init(root, tenant="bank", corpora=["policy"])
    return root


def test_a_development_token_is_accepted_by_its_own_deployment(root: Path) -> None:
    done = run(root, "token", "--as", "ana", "--json", env={"GOVRAG_AUTH__DEV_TOKENS": "true"})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    with govrag.open(root, auth={"dev_tokens": True}) as app:
        verified = app.callers.verify_token(out["token"])
    local = govrag.local_principal(app.settings, "ana")
    assert verified.principal == local.model_copy(update={"expires_at": verified.expires_at})
    assert verified.expires_at.isoformat() == out["expires_at"]
    # Plain output is the token alone, for TOKEN=$(govrag token --as ana).
    plain = run(root, "token", "--as", "ana", env={"GOVRAG_AUTH__DEV_TOKENS": "true"})
    assert plain.stdout.count("\n") == 1 and plain.stdout.count(".") == 2


def test_with_development_tokens_off_nothing_is_signed(root: Path) -> None:
    done = run(root, "token", "--as", "ana")
    assert done.returncode == 2 and done.stdout == ""
    assert "[auth] dev_tokens = true" in done.stderr and "Traceback" not in done.stderr
    with govrag.open(root) as app, pytest.raises(govrag.ConfigError, match="dev_tokens"):
        app.operators.dev_token("ana")


def test_an_unknown_principal_is_named(root: Path) -> None:
    done = run(root, "token", "--as", "mallory", env={"GOVRAG_AUTH__DEV_TOKENS": "true"})
    assert done.returncode == 2 and "mallory" in done.stderr and "ana" in done.stderr


def test_a_token_its_deployment_would_refuse_is_not_handed_out(root: Path) -> None:
    # The deployment serves another tenant only: ana's token would be refused, so the
    # command says why instead of printing a token that cannot work.
    env = {"GOVRAG_AUTH__DEV_TOKENS": "true", "GOVRAG_AUTH__TENANTS": '["other"]'}
    done = run(root, "token", "--as", "ana", env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert "tenant_not_served" in done.stderr and "[auth] tenants" in done.stderr


def test_a_bearer_token_is_verified_by_the_api(root: Path) -> None:
    with govrag.open(root, auth={"dev_tokens": True}) as app:
        token = app.operators.dev_token("ana")
        with pytest.raises(govrag.AuthError) as info:
            app.callers.verify_token(token[:-4] + "AAAA")
        assert str(info.value) == "invalid or missing bearer token"
        with pytest.raises(govrag.AuthError):
            app.callers.verify_token(None)


def test_config_check_names_what_stops_token_verification(root: Path) -> None:
    with govrag.open(root) as app:
        assert app.operators.config_check().ok  # no [auth]: nothing to check
    broken = {"issuer": "https://idp.example", "keys": [{"alg": "RS256", "public_key": "no.pem"}]}
    with govrag.open(root, auth=broken) as app:
        check = app.operators.config_check()
    assert not check.ok
    assert any(p.field == "auth" and "cannot read the public key" in p.message
               for p in check.problems)  # fmt: skip
    (root / "jwks.json").write_text('{"keys": []}')
    with govrag.open(root, auth={"issuer": "https://idp.example", "jwks_file": "jwks.json"}) as app:
        check = app.operators.config_check()
    assert [p.field for p in check.problems if not p.warning] == ["auth.jwks_file"]
    # A command that serves nobody is not stopped by a key it never uses.
    done = run(root, "search", "wire", "--as", "ana", "--strategy", "keyword",
               env={"GOVRAG_AUTH__ISSUER": "https://idp.example",
                    "GOVRAG_AUTH__JWKS_FILE": "missing.json"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = run(root, "config", "check", env={"GOVRAG_AUTH__ISSUER": "https://idp.example",
                                             "GOVRAG_AUTH__JWKS_FILE": "missing.json"})  # fmt: skip
    assert done.returncode != 0 and "auth.jwks_file" in done.stderr + done.stdout

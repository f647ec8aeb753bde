"""Bearer tokens from a hostile caller or a careless operator, beyond the matrix of
``test_tokens.py``: header fields PyJWT refuses before any key is chosen (a non-string
``kid``, ``crit``), keys a token carries itself (``jwk``, ``jku``, ``x5u``), claims that are
signed but shaped wrong (an ``exp`` past the year 9999, a null or unnamed tenant on a
multi-tenant deployment, an unverified or compatibility-spelt e-mail, a scope split on
Unicode whitespace), JWKS files a reader must survive (``alg: none``, encryption keys, a
same-sized replacement with the old modification time, rotation under concurrent calls) and
the development secret's file (open to others, a symbolic link).

Every refusal is an :class:`AuthError` with the fixed message, never another exception.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from govrag.auth import TokenVerifier, dev_key, sign_dev_token
from govrag.errors import TOKEN_REFUSED, AuthError, ConfigError
from govrag.settings import Settings, load_settings
from govrag.types import Principal

ISSUER = "https://idp.bank.example"
AUDIENCE = "govrag-bank"
SECRET = "s3cret-for-tests-only-0123456789abcdef"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    base = {"iss": ISSUER, "aud": AUDIENCE, "sub": "ana", "email": "ana@bank.example",
            "tenant": "bank", "iat": now, "exp": now + 600}  # fmt: skip
    base.update(over)
    return {k: v for k, v in base.items() if v is not ...}


def signed(payload: dict[str, Any] | str, header: dict[str, Any] | None = None) -> str:
    """An HS256 token under kid ``hs-1`` signed with the right secret, built by hand so the
    header and payload can hold what PyJWT's encoder refuses to write."""
    head = json.dumps({"alg": "HS256", "kid": "hs-1", **(header or {})})
    body = payload if isinstance(payload, str) else json.dumps(payload)
    si = f"{b64(head.encode())}.{b64(body.encode())}"
    return f"{si}.{b64(hmac.new(SECRET.encode(), si.encode(), hashlib.sha256).digest())}"


def settings_for(root: Path, **auth: Any) -> Settings:
    base: dict[str, Any] = {"issuer": ISSUER, "audience": AUDIENCE,
                            "keys": [{"kid": "hs-1", "alg": "HS256",
                                      "secret_env": "GOVRAG_TEST_HMAC"}]}  # fmt: skip
    return load_settings(root, default_tenant="bank", auth={**base, **auth})


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GOVRAG_TEST_HMAC", SECRET)
    return tmp_path


def refused(verifier: TokenVerifier, token: str) -> AuthError:
    with pytest.raises(AuthError) as info:  # AuthError, not whatever PyJWT raised
        verifier.verify(token)
    assert str(info.value) == TOKEN_REFUSED
    return info.value


@pytest.mark.parametrize(
    ("header", "fault"),
    [({"kid": 7}, "malformed"), ({"kid": ["hs-1"]}, "malformed"),
     ({"kid": {"$ne": ""}}, "malformed"),
     ({"crit": ["x-bank-ext"], "x-bank-ext": 1}, "malformed"),
     ({"crit": "exp"}, "malformed"), ({"crit": []}, "malformed")],
)  # fmt: skip
def test_header_fields_pyjwt_refuses_unkeyed_are_refusals(
    root: Path, header: dict[str, Any], fault: str
) -> None:
    # Unsigned (no key decides anything yet): these escaped as jwt.InvalidTokenError, a
    # server error any caller could provoke.
    token = signed(claims(), header)[:-8] + "AAAAAAAA"
    assert refused(TokenVerifier(settings_for(root)), token).fault == fault


def test_keys_a_token_carries_itself_are_never_used(root: Path) -> None:
    mine = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(mine.public_key()))
    idp = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (root / "idp.json").write_text(json.dumps({"keys": [jwk_of(idp, "rsa-1")]}))
    verifier = TokenVerifier(settings_for(root, keys=[], jwks_file="idp.json"))
    for extra in ({"jwk": jwk}, {"jku": "https://evil.example/jwks.json"},
                  {"x5u": "https://evil.example/cert.pem"}, {"x5c": ["MIIB"]}):  # fmt: skip
        token = jwt.encode(claims(), mine, algorithm="RS256", headers={"kid": "rsa-1", **extra})
        assert refused(verifier, token).fault == "bad_signature", extra
    # An HMAC token keyed with the embedded key's own bytes, under the embedded kid, neither.
    assert refused(verifier, signed(claims(), {"jwk": {"kty": "oct", "k": b64(SECRET.encode())},
                                               "kid": "mine"})).fault == "unknown_key"  # fmt: skip


@pytest.mark.parametrize("exp", [10**12, 1e20, 10**30])
def test_an_exp_past_what_a_date_holds_is_refused(root: Path, exp: float) -> None:
    # Signed by the real key: an identity provider configured for "never expires" gave a
    # ValueError / OverflowError from the verifier instead of a refusal.
    verifier = TokenVerifier(settings_for(root))
    assert refused(verifier, signed(claims(exp=exp))).fault == "bad_claims"


def test_a_numeric_string_exp_still_works_within_range(root: Path) -> None:
    # PyJWT reads "exp" with int(): a numeric string is a NumericDate to it, and to us.
    verifier = TokenVerifier(settings_for(root))
    token = signed(claims(exp=str(int(time.time()) + 600)))
    assert verifier.verify(token).principal.sub == "ana"


def test_a_tenant_is_never_guessed_among_several(root: Path) -> None:
    one = TokenVerifier(settings_for(root))
    several = TokenVerifier(settings_for(root, tenants=["bank", "insurer"]))
    # One tenant served: a token without the claim is for it (as documented).
    assert one.verify(signed(claims(tenant=...))).principal.tenant == "bank"
    # Several: a token naming none (a service account, a claim map pointing at nothing)
    # used to land in default_tenant's documents.
    assert refused(several, signed(claims(tenant=...))).fault == "tenant_not_served"
    assert several.verify(signed(claims(tenant="insurer"))).principal.tenant == "insurer"
    # A JSON null is not "no claim": it was read as the default tenant.
    for verifier in (one, several):
        assert refused(verifier, signed(claims(tenant=None))).fault == "tenant_not_served"


def test_nested_claim_paths_refuse_the_wrong_shape(root: Path) -> None:
    verifier = TokenVerifier(settings_for(root, tenants=["bank", "insurer"],
                                          claims={"tenant": "org.id",
                                                  "roles": "realm_access.roles"}))  # fmt: skip
    ok = verifier.verify(signed(claims(tenant=..., org={"id": "insurer"},
                                       realm_access={"roles": ["examiner"]})))  # fmt: skip
    assert ok.principal.tenant == "insurer" and ok.principal.roles == ("examiner",)
    # "org" a string: the path is blocked, not absent (absent meant default_tenant).
    assert refused(verifier, signed(claims(tenant=..., org="insurer"))).fault == "bad_claims"
    token = signed(claims(tenant=..., org={"id": "insurer"}, realm_access=["admin"]))
    assert refused(verifier, token).fault == "bad_claims"
    # A null object on the way is nothing there.
    token = signed(claims(tenant=..., org={"id": "bank"}, realm_access=None))
    assert verifier.verify(token).principal.roles == ()


def test_a_claim_named_with_dots_is_read_as_named(root: Path) -> None:
    # Auth0 requires custom claims to be namespaced URLs, which hold dots.
    names = {"tenant": "https://bank.example/tenant", "roles": "https://bank.example/roles"}
    verifier = TokenVerifier(settings_for(root, tenants=["bank", "insurer"], claims=names))
    token = signed(claims(tenant=..., **{"https://bank.example/tenant": "insurer",
                                         "https://bank.example/roles": ["examiner"]}))  # fmt: skip
    p = verifier.verify(token).principal
    assert (p.tenant, p.roles) == ("insurer", ("examiner",))
    # The same name both as a dotted claim and as a path: refused, not one of them picked.
    both = TokenVerifier(settings_for(root, tenants=["bank", "insurer"],
                                      claims={"tenant": "org.id"}))  # fmt: skip
    token = signed(claims(tenant=..., org={"id": "bank"}, **{"org.id": "insurer"}))
    assert refused(both, token).fault == "bad_claims"


@pytest.mark.parametrize("flag", [False, "false", None, 0, "yes"])
def test_an_email_the_provider_has_not_verified_is_refused(root: Path, flag: Any) -> None:
    # Access lists are looked up by e-mail: a user who put someone else's address in their
    # profile (the provider then says email_verified: false) read that person's documents.
    verifier = TokenVerifier(settings_for(root))
    token = signed(claims(email="ceo@bank.example", email_verified=flag))
    assert refused(verifier, token).fault == "bad_claims"


@pytest.mark.parametrize("flag", [True, "true", ...])
def test_a_verified_or_unstated_email_is_accepted(root: Path, flag: Any) -> None:
    verifier = TokenVerifier(settings_for(root))
    assert verifier.verify(signed(claims(email_verified=flag))).principal.sub == "ana"


def test_the_email_verified_claim_can_be_ignored(root: Path) -> None:
    verifier = TokenVerifier(settings_for(root, claims={"email_verified": ""}))
    assert verifier.verify(signed(claims(email_verified=False))).principal.sub == "ana"


@pytest.mark.parametrize("email", ["\u212aate@bank.example", "\u017fam@bank.example",
                                   "ana@bank.ex\ufb01le.example"])  # fmt: skip
def test_an_email_that_folds_into_another_is_refused(root: Path, email: str) -> None:
    # Casefolding (what principals and identity records are compared by) turns the Kelvin
    # sign into "k", the long s into "s", the ligature into "fi": kate's accounts otherwise.
    verifier = TokenVerifier(settings_for(root))
    assert refused(verifier, signed(claims(email=email))).fault == "bad_claims"
    # Ordinary internationalised addresses are fine.
    assert verifier.verify(signed(claims(email="José@bank.example"))).principal.email == (
        "josé@bank.example")  # fmt: skip


def test_a_scope_string_splits_on_the_space_only(root: Path) -> None:
    verifier = TokenVerifier(settings_for(root, claims={"doc_entitlements": "scope"}))
    token = signed(claims(scope="group:x\u00a0policy:read  ops:read\t"))
    # RFC 6749 separates scopes by a space; a no-break space inside one did not grant the
    # "policy:read" the identity provider never issued. (Double spaces are harmless.)
    assert verifier.verify(token).principal.doc_entitlements == (
        "group:x\u00a0policy:read", "ops:read\t")  # fmt: skip


def test_the_development_issuer_cannot_be_the_providers(root: Path) -> None:
    with pytest.raises(ConfigError, match="development tokens' issuer"):
        TokenVerifier(settings_for(root, issuer="govrag-dev"))


def jwk_of(key: Any, kid: str, **extra: Any) -> dict[str, Any]:
    return {**json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key())), "kid": kid,
            **extra}  # fmt: skip


@pytest.fixture(scope="module")
def rsa_keys() -> list[Any]:
    return [rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(2)]


def test_a_jwks_file_survives_entries_it_cannot_use(root: Path, rsa_keys: list[Any]) -> None:
    good, other = rsa_keys
    (root / "jwks.json").write_text(json.dumps({"keys": [
        jwk_of(other, "none-1", alg="none"),  # raised NotImplementedError out of the reader
        jwk_of(other, "enc-1", use="enc"),  # an encryption key was loaded as RS256
        jwk_of(other, "ops-1", key_ops=["encrypt"]),
        jwk_of(good, "sig-1", use="sig"),
    ]}))  # fmt: skip
    verifier = TokenVerifier(settings_for(root, keys=[], jwks_file="jwks.json"))
    loaded = verifier.keys()
    assert [k.kid for k in loaded] == ["sig-1"]
    assert verifier.verify(jwt.encode(claims(), good, algorithm="RS256",
                                      headers={"kid": "sig-1"})).kid == "sig-1"  # fmt: skip
    for kid in ("none-1", "enc-1", "ops-1"):
        token = jwt.encode(claims(), other, algorithm="RS256", headers={"kid": kid})
        assert refused(verifier, token).fault == "unknown_key"


def test_a_same_sized_replacement_with_the_old_mtime_is_reread(
    root: Path, rsa_keys: list[Any]
) -> None:
    # A revocation copied in with `cp -p` / `rsync -a` / `tar x`: same size (same key type,
    # same kid length), same modification time. The old key stayed trusted.
    old, new = rsa_keys
    path = root / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk_of(old, "k-1")]}))
    verifier = TokenVerifier(settings_for(root, keys=[], jwks_file="jwks.json"))
    revoked = jwt.encode(claims(), old, algorithm="RS256", headers={"kid": "k-1"})
    assert verifier.verify(revoked).kid == "k-1"
    before = path.stat()
    staged = root / "jwks.json.new"
    staged.write_text(json.dumps({"keys": [jwk_of(new, "k-1")]}))
    assert staged.stat().st_size == before.st_size
    os.utime(staged, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(staged, path)
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert refused(verifier, revoked).fault == "bad_signature"
    fresh = jwt.encode(claims(), new, algorithm="RS256", headers={"kid": "k-1"})
    assert verifier.verify(fresh).kid == "k-1"


def test_verifying_during_a_rotation_never_errs_nor_trusts_a_revoked_key(
    root: Path, rsa_keys: list[Any]
) -> None:
    old, new = rsa_keys
    path = root / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk_of(old, "old")]}))
    verifier = TokenVerifier(settings_for(root, keys=[], jwks_file="jwks.json"))
    tokens = [jwt.encode(claims(), k, algorithm="RS256", headers={"kid": kid})
              for k, kid in ((old, "old"), (new, "new"))]  # fmt: skip
    errors: list[BaseException] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            for token in tokens:
                try:
                    verifier.verify(token)
                except AuthError:
                    pass
                except BaseException as exc:
                    errors.append(exc)

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for i in range(20):  # rewritten in place (not atomically) as well as replaced
            kid, key = ("new", new) if i % 2 else ("old", old)
            if i % 3:
                path.write_text(json.dumps({"keys": [jwk_of(key, kid)]}))
            else:
                tmp = root / "jwks.tmp"
                tmp.write_text(json.dumps({"keys": [jwk_of(key, kid)]}))
                os.replace(tmp, path)
            time.sleep(0.005)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    # The last set has the new key only: the old one is refused from now on.
    assert refused(verifier, tokens[0]).fault == "unknown_key"
    assert verifier.verify(tokens[1]).kid == "new"


ANA = Principal(sub="ana", email="ana@bank.example", tenant="bank")


def dev_settings(root: Path) -> Settings:
    return load_settings(root, default_tenant="bank",
                         auth={"dev_tokens": True, "audience": AUDIENCE})  # fmt: skip


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_a_dev_secret_open_to_other_users_is_refused(root: Path) -> None:
    settings = dev_settings(root)
    sign_dev_token(settings, ANA)
    secret = root / "keys" / "dev-token-secret"
    secret.chmod(0o644)  # any local user could sign a token as anyone for the loopback server
    with pytest.raises(ConfigError, match="chmod 600"):
        dev_key(settings, create=True)
    with pytest.raises(ConfigError, match="open to other users"):
        sign_dev_token(settings, ANA)
    secret.chmod(0o600)
    assert dev_key(settings, create=False).kid == "govrag-dev"


@pytest.mark.skipif(os.name != "posix", reason="symbolic links")
def test_a_dev_secret_that_is_a_link_is_refused(root: Path, tmp_path_factory: Any) -> None:
    settings = dev_settings(root)
    (root / "keys").mkdir()
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "known.txt"
    elsewhere.write_text("x" * 64)  # a file the attacker knows (or can write)
    elsewhere.chmod(0o600)
    link = root / "keys" / "dev-token-secret"
    link.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="symbolic link"):
        dev_key(settings, create=True)
    # A dangling link: creating through it failed with a bare FileExistsError.
    link.unlink()
    link.symlink_to(root / "nowhere")
    with pytest.raises(ConfigError, match="symbolic link"):
        dev_key(settings, create=True)
    assert not (root / "nowhere").exists()

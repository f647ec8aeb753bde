"""Bearer tokens, the way an attacker would try them: every forgery, replay and confusion in
the matrix is refused (0 accepted), every refusal says the same fixed thing to the caller,
and the legitimate tokens (HMAC, RSA, EC, a JWKS file, a rotation) are accepted.

Real keys (``cryptography``), real signatures (PyJWT); tokens are built by hand where a
library would refuse to build them (``alg: none``, a tampered payload).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given
from hypothesis import strategies as st

from govrag.auth import TokenVerifier, dev_key, sign_dev_token
from govrag.errors import TOKEN_REFUSED, AuthError, ConfigError
from govrag.settings import Settings, load_settings
from govrag.types import Classification, Principal

ISSUER = "https://idp.bank.example"
AUDIENCE = "govrag-bank"
SECRET = "s3cret-for-tests-only-0123456789abcdef"  # 38 bytes


def now() -> datetime:
    """The time a token is made at: read when it is made, never at import, so no test
    depends on how long the suite ran before it (a 10-minute token made at collection
    would expire in a long run)."""
    return datetime.now(UTC)


def pem_public(key: Any) -> bytes:
    info = serialization.PublicFormat.SubjectPublicKeyInfo
    return bytes(key.public_key().public_bytes(serialization.Encoding.PEM, info))


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture
def deployment(tmp_path: Path, rsa_key: Any, ec_key: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "idp-rsa.pem").write_bytes(pem_public(rsa_key))
    (tmp_path / "keys" / "idp-ec.pem").write_bytes(pem_public(ec_key))
    monkeypatch.setenv("GOVRAG_TEST_HMAC", SECRET)
    return tmp_path


def settings_for(root: Path, **auth: Any) -> Settings:
    base: dict[str, Any] = {
        "issuer": ISSUER, "audience": AUDIENCE,
        "keys": [{"kid": "rsa-1", "alg": "RS256", "public_key": "keys/idp-rsa.pem"},
                 {"kid": "ec-1", "alg": "ES256", "public_key": "keys/idp-ec.pem"},
                 {"kid": "hs-1", "alg": "HS256", "secret_env": "GOVRAG_TEST_HMAC"}],
    }  # fmt: skip
    return load_settings(root, default_tenant="bank", auth={**base, **auth})


def claims(**over: Any) -> dict[str, Any]:
    base = {"iss": ISSUER, "aud": AUDIENCE, "sub": "ana", "email": "Ana@Bank.example",
            "tenant": "bank", "roles": ["analyst"], "doc_entitlements": ["policy:read"],
            "clearance": "confidential", "iat": now(), "nbf": now(),
            "exp": now() + timedelta(minutes=10)}  # fmt: skip
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict[str, Any], payload: dict[str, Any], signature: str = "") -> str:
    enc = {k: int(v.timestamp()) if isinstance(v, datetime) else v for k, v in payload.items()}
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(enc).encode())}.{signature}"


@pytest.fixture
def verifier(deployment: Path) -> TokenVerifier:
    return TokenVerifier(settings_for(deployment))


def test_good_tokens_of_every_key_type_are_accepted(
    verifier: TokenVerifier, rsa_key: Any, ec_key: Any
) -> None:
    for key, alg, kid in [(rsa_key, "RS256", "rsa-1"), (ec_key, "ES256", "ec-1"),
                          (SECRET, "HS256", "hs-1")]:  # fmt: skip
        made = claims()
        token = jwt.encode(made, key, algorithm=alg, headers={"kid": kid})
        verified = verifier.verify(token)
        assert verified.principal == Principal(
            sub="ana", email="ana@bank.example", tenant="bank", roles=("analyst",),
            doc_entitlements=("policy:read",), clearance=Classification.CONFIDENTIAL,
            expires_at=verified.expires_at,
        )  # fmt: skip
        assert verified.kid == kid and verified.issuer == ISSUER
        assert verified.expires_at == datetime.fromtimestamp(int(made["exp"].timestamp()), UTC)


def until(principal: Principal, expires_at: datetime) -> Principal:
    """``principal`` as a token expiring at ``expires_at`` carries it (the claims end then)."""
    return principal.model_copy(update={"expires_at": expires_at})


def matrix(rsa_key: Any, ec_key: Any) -> dict[str, tuple[str, str]]:
    """Every token that must be refused, with the fault it must be refused for."""
    other_rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    good = jwt.encode(claims(), rsa_key, algorithm="RS256", headers={"kid": "rsa-1"})
    head, body, sig = good.split(".")
    forged_body = b64(json.dumps({**json.loads(base64.urlsafe_b64decode(body + "==")),
                                  "tenant": "other", "sub": "mallory"}).encode())  # fmt: skip
    rsa_pem = pem_public(rsa_key)
    # The HS/RS confusion: an HMAC "signature" keyed with the RSA public key's PEM.
    confused = unsigned({"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}, claims())
    confused_sig = b64(__import__("hmac").new(rsa_pem, confused.rstrip(".").encode(),
                                               "sha256").digest())  # fmt: skip
    rs = lambda **c: jwt.encode(claims(**c), rsa_key, algorithm="RS256", headers={"kid": "rsa-1"})  # noqa: E731
    return {
        "missing": ("", "missing"),
        "not a jwt": ("hello", "malformed"),
        "four segments": ("a.b.c.d", "malformed"),
        "garbage segments": ("!!!.???.***", "malformed"),
        "header not json": (f"{b64(b'not json')}.{body}.{sig}", "malformed"),
        "huge": ("a" * 20_000 + ".b.c", "malformed"),
        "alg none": (unsigned({"alg": "none", "kid": "rsa-1"}, claims()), "alg_not_allowed"),
        "alg none, no kid": (unsigned({"alg": "none"}, claims()), "unknown_key"),
        "alg None spelled": (
            unsigned({"alg": "None", "kid": "rsa-1"}, claims()),
            "alg_not_allowed",
        ),
        "hs/rs confusion": (f"{confused.rstrip('.')}.{confused_sig}", "alg_not_allowed"),
        "rs token under the hs kid": (
            jwt.encode(claims(), rsa_key, algorithm="RS256", headers={"kid": "hs-1"}),
            "alg_not_allowed",
        ),
        "unknown kid": (
            jwt.encode(claims(), rsa_key, algorithm="RS256", headers={"kid": "rsa-9"}),
            "unknown_key",
        ),
        "no kid with several keys": (
            jwt.encode(claims(), rsa_key, algorithm="RS256"),
            "unknown_key",
        ),
        "wrong rsa key": (
            jwt.encode(claims(), other_rsa, algorithm="RS256", headers={"kid": "rsa-1"}),
            "bad_signature",
        ),
        "wrong hmac secret": (
            jwt.encode(claims(), "x" * 40, algorithm="HS256", headers={"kid": "hs-1"}),
            "bad_signature",
        ),
        "payload swapped under a good signature": (f"{head}.{forged_body}.{sig}", "bad_signature"),
        "signature stripped": (f"{head}.{body}.", "bad_signature"),
        "expired": (rs(exp=now() - timedelta(minutes=5)), "expired"),
        "not yet valid": (rs(nbf=now() + timedelta(minutes=5)), "not_yet_valid"),
        "issued in the future": (rs(iat=now() + timedelta(minutes=5)), "not_yet_valid"),
        "no exp": (rs(exp=None), "bad_claims"),
        "no iat": (rs(iat=None), "bad_claims"),
        "a century's lifetime": (rs(exp=now() + timedelta(days=36525)), "too_long_lived"),
        "backdated iat": (rs(iat=now() - timedelta(days=2)), "too_long_lived"),
        "wrong audience": (rs(aud="someone-else"), "wrong_audience"),
        "no audience": (rs(aud=None), "bad_claims"),
        "wrong issuer": (rs(iss="https://evil.example"), "wrong_issuer"),
        "dev issuer from the idp key": (rs(iss="govrag-dev"), "wrong_issuer"),
        "another tenant": (rs(tenant="other-bank"), "tenant_not_served"),
        "tenant not a string": (rs(tenant=["bank"]), "tenant_not_served"),
        "no sub": (rs(sub=None), "bad_claims"),
        "no email": (rs(email=None), "bad_claims"),
        "email without @": (rs(email="ana"), "bad_claims"),
        "roles not strings": (rs(roles=[1, 2]), "bad_claims"),
        "clearance unknown": (rs(clearance="cosmic"), "bad_claims"),
    }


def test_the_token_matrix_accepts_none(verifier: TokenVerifier, rsa_key: Any, ec_key: Any) -> None:
    accepted = []
    for name, (token, fault) in matrix(rsa_key, ec_key).items():
        try:
            verifier.verify(token)
        except AuthError as exc:
            assert str(exc) == TOKEN_REFUSED, name  # the caller learns nothing more
            assert exc.fault == fault, (name, exc.fault, exc.detail)
        else:
            accepted.append(name)
    assert accepted == []


def test_leeway_tolerates_small_skew_only(deployment: Path, rsa_key: Any) -> None:
    # The largest leeway, and margins of minutes either side: no machine stall decides it.
    verifier = TokenVerifier(settings_for(deployment, leeway_s=300))
    sign = lambda **c: jwt.encode(claims(**c), rsa_key, algorithm="RS256",  # noqa: E731
                                  headers={"kid": "rsa-1"})  # fmt: skip
    assert verifier.verify(sign(exp=now() - timedelta(seconds=60))).principal.sub == "ana"
    with pytest.raises(AuthError) as info:
        verifier.verify(sign(exp=now() - timedelta(seconds=900)))
    assert info.value.fault == "expired"


def test_a_token_may_live_max_token_lifetime_s_and_no_longer(
    deployment: Path, rsa_key: Any
) -> None:
    verifier = TokenVerifier(settings_for(deployment, max_token_lifetime_s=600))
    iat = int(now().timestamp())  # whole seconds: the lifetime is exact
    sign = lambda **c: jwt.encode(claims(iat=iat, nbf=iat, **c), rsa_key,  # noqa: E731
                                  algorithm="RS256", headers={"kid": "rsa-1"})  # fmt: skip
    assert verifier.verify(sign(exp=iat + 600)).principal.sub == "ana"
    with pytest.raises(AuthError) as info:
        verifier.verify(sign(exp=iat + 601))
    assert info.value.fault == "too_long_lived" and str(info.value) == TOKEN_REFUSED


@pytest.mark.parametrize("value", [0, -1, -86400])
def test_a_lifetime_that_is_not_positive_is_a_config_error(deployment: Path, value: int) -> None:
    with pytest.raises(ConfigError, match=f"max_token_lifetime_s = {value} is not a positive"):
        settings_for(deployment, max_token_lifetime_s=value)


def test_a_dev_token_lives_no_longer_than_the_maximum(deployment: Path) -> None:
    settings = dev_settings(deployment, dev_token_ttl_s=3600, max_token_lifetime_s=900)
    token = sign_dev_token(settings, ANA)
    made = jwt.decode(token, options={"verify_signature": False})
    assert made["exp"] - made["iat"] == 900
    verified = TokenVerifier(settings, dev_keys=[dev_key(settings, create=False)]).verify(token)
    assert verified.principal.sub == "ana"


@given(position=st.integers(min_value=0), flip=st.integers(min_value=1, max_value=255))
def test_any_changed_byte_is_refused(position: int, flip: int) -> None:
    # One RSA key for every example: the property is about the token, not the key.
    token = _TAMPER["token"]
    i = position % len(token)
    changed = token[:i] + chr((ord(token[i]) ^ flip) % 128 or 65) + token[i + 1 :]
    if changed == token:
        return
    try:
        verified = _TAMPER["verifier"].verify(changed)
    except AuthError:
        return
    # base64url padding bits: a change that decodes to the same bytes is the same token.
    assert verified.principal.sub == "ana" and _same_bytes(token, changed)


_TAMPER: dict[str, Any] = {}


@pytest.fixture(autouse=True, scope="module")
def _tamper_setup(tmp_path_factory: pytest.TempPathFactory, rsa_key: Any) -> Iterator[None]:
    root = tmp_path_factory.mktemp("tamper")
    (root / "keys").mkdir()
    (root / "keys" / "idp-rsa.pem").write_bytes(pem_public(rsa_key))
    settings = load_settings(root, default_tenant="bank", auth={
        "issuer": ISSUER, "audience": AUDIENCE,
        "keys": [{"alg": "RS256", "public_key": "keys/idp-rsa.pem"}]})  # fmt: skip
    _TAMPER["verifier"] = TokenVerifier(settings)
    _TAMPER["token"] = jwt.encode(claims(exp=now() + timedelta(days=1)), rsa_key,
                                  algorithm="RS256")  # fmt: skip
    yield
    _TAMPER.clear()


def _same_bytes(a: str, b: str) -> bool:
    def raw(t: str) -> list[bytes]:
        return [base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)) for p in t.split(".")]

    try:
        return raw(a) == raw(b)
    except ValueError:
        return False


def jwks(*entries: dict[str, Any]) -> str:
    return json.dumps({"keys": list(entries)})


def jwk_of(key: Any, kid: str, **extra: Any) -> dict[str, Any]:
    algorithm = jwt.algorithms.RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else (
        jwt.algorithms.ECAlgorithm)  # fmt: skip
    return {**json.loads(algorithm.to_jwk(key.public_key())), "kid": kid, **extra}


def test_a_jwks_file_is_reread_on_rotation(deployment: Path, rsa_key: Any, ec_key: Any) -> None:
    path = deployment / "jwks.json"
    path.write_text(jwks(jwk_of(rsa_key, "2026-11")))
    verifier = TokenVerifier(settings_for(deployment, keys=[], jwks_file="jwks.json"))
    old = jwt.encode(claims(), rsa_key, algorithm="RS256", headers={"kid": "2026-11"})
    assert verifier.verify(old).kid == "2026-11"
    # Rotation: the new key set has the EC key only; the old kid is refused from now on.
    path.write_text(jwks(jwk_of(ec_key, "2026-12", alg="ES256")))
    os.utime(path, ns=(1, 1))  # a different stamp even within the file system's resolution
    new = jwt.encode(claims(), ec_key, algorithm="ES256", headers={"kid": "2026-12"})
    assert verifier.verify(new).kid == "2026-12"
    with pytest.raises(AuthError) as info:
        verifier.verify(old)
    assert info.value.fault == "unknown_key"


@pytest.mark.parametrize(
    ("content", "why"),
    [("{not json", "not json"), ('{"keys": {}}', "keys not a list"),
     (jwks({"kty": "oct", "k": b64(SECRET.encode()), "kid": "k"}), "shared secret"),
     ("", "empty")],
)  # fmt: skip
def test_a_broken_jwks_file_refuses_every_token(
    deployment: Path, rsa_key: Any, content: str, why: str
) -> None:
    (deployment / "jwks.json").write_text(content)
    verifier = TokenVerifier(settings_for(deployment, keys=[], jwks_file="jwks.json"))
    hs = jwt.encode(claims(), SECRET, algorithm="HS256", headers={"kid": "k"})
    rs = jwt.encode(claims(), rsa_key, algorithm="RS256", headers={"kid": "k"})
    for token in (hs, rs):
        with pytest.raises(AuthError) as info:
            verifier.verify(token)
        assert info.value.fault in {"no_keys", "unknown_key"}, why


def test_a_private_key_in_the_jwks_file_is_skipped(deployment: Path, rsa_key: Any) -> None:
    private = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key))
    (deployment / "jwks.json").write_text(jwks({**private, "kid": "leaked"}))
    verifier = TokenVerifier(settings_for(deployment, keys=[], jwks_file="jwks.json"))
    with pytest.raises(AuthError) as info:
        verifier.verify(jwt.encode(claims(), rsa_key, algorithm="RS256",
                                   headers={"kid": "leaked"}))  # fmt: skip
    assert info.value.fault == "no_keys"


@pytest.mark.parametrize(
    ("auth", "env", "message"),
    [({"keys": [], "jwks_file": None}, {}, "no key to verify bearer tokens"),
     ({"issuer": None}, {}, "[auth] issuer is not set"),
     ({}, {"GOVRAG_TEST_HMAC": ""}, "GOVRAG_TEST_HMAC is not set"),
     ({}, {"GOVRAG_TEST_HMAC": "short"}, "fewer than 32 bytes"),
     ({"keys": [{"alg": "RS256", "public_key": "keys/missing.pem"}]}, {},
      "cannot read the public key"),
     ({"keys": [{"alg": "ES256", "public_key": "keys/idp-rsa.pem"}]}, {},
      "is not a PEM public key for ES256")],
)  # fmt: skip
def test_bad_key_settings_are_config_errors_naming_the_fix(
    deployment: Path,
    auth: dict[str, Any],
    env: dict[str, str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        TokenVerifier(settings_for(deployment, **auth))


def test_a_private_key_file_is_refused(deployment: Path, rsa_key: Any) -> None:
    (deployment / "keys" / "private.pem").write_bytes(rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))  # fmt: skip
    with pytest.raises(ConfigError):
        TokenVerifier(settings_for(deployment, keys=[
            {"alg": "RS256", "public_key": "keys/private.pem"}]))  # fmt: skip


def test_a_claim_map_reads_nested_and_scope_style_claims(deployment: Path, rsa_key: Any) -> None:
    verifier = TokenVerifier(settings_for(deployment, claims={
        "roles": "realm_access.roles", "doc_entitlements": "scope", "tenant": "org"}))  # fmt: skip
    token = jwt.encode(claims(tenant=None, roles=None, doc_entitlements=None, org="bank",
                              realm_access={"roles": ["examiner"]},
                              scope="policy:read ops:read"),
                       rsa_key, algorithm="RS256", headers={"kid": "rsa-1"})  # fmt: skip
    p = verifier.verify(token).principal
    assert p.roles == ("examiner",) and p.doc_entitlements == ("policy:read", "ops:read")


def test_a_token_without_a_tenant_claim_is_for_the_default_tenant(
    verifier: TokenVerifier, rsa_key: Any
) -> None:
    token = jwt.encode(claims(tenant=None), rsa_key, algorithm="RS256", headers={"kid": "rsa-1"})
    assert verifier.verify(token).principal.tenant == "bank"


def dev_settings(root: Path, **auth: Any) -> Settings:
    return load_settings(root, default_tenant="bank",
                         auth={"dev_tokens": True, "audience": AUDIENCE, **auth})  # fmt: skip


ANA = Principal(sub="ana", email="ana@bank.example", tenant="bank", roles=("examiner",))


def test_dev_tokens_verify_only_when_on_and_only_from_the_dev_key(
    deployment: Path, rsa_key: Any
) -> None:
    settings = dev_settings(deployment)
    token = sign_dev_token(settings, ANA)
    secret = deployment / "keys" / "dev-token-secret"
    assert secret.stat().st_mode & 0o777 == 0o600
    verifier = TokenVerifier(settings, dev_keys=[dev_key(settings, create=False)])
    assert verifier.verify(token).principal == until(ANA, verifier.verify(token).expires_at)
    # Off: the same token is refused (no key for its kid), and none can be signed.
    off = TokenVerifier(settings_for(deployment))
    with pytest.raises(AuthError) as info:
        off.verify(token)
    assert info.value.fault == "unknown_key"
    with pytest.raises(ConfigError, match="dev_tokens"):
        sign_dev_token(settings_for(deployment), ANA)
    # Beside the real keys, the dev key does not accept the IdP's issuer, nor an IdP key
    # the dev issuer.
    both = TokenVerifier(settings_for(deployment, dev_tokens=True),
                         dev_keys=[dev_key(settings, create=False)])  # fmt: skip
    assert both.verify(token).principal == until(ANA, both.verify(token).expires_at)
    forged = jwt.encode(claims(iss=ISSUER), secret.read_bytes().strip(), algorithm="HS256",
                        headers={"kid": "govrag-dev"})  # fmt: skip
    with pytest.raises(AuthError) as info:
        both.verify(forged)
    assert info.value.fault == "wrong_issuer"


def test_the_error_never_echoes_the_token(verifier: TokenVerifier, rsa_key: Any) -> None:
    token = jwt.encode(claims(tenant="other"), rsa_key, algorithm="RS256",
                       headers={"kid": "rsa-1"})  # fmt: skip
    with pytest.raises(AuthError) as info:
        verifier.verify(token)
    assert token not in str(info.value) and token not in info.value.detail


def test_a_principal_written_as_json_reads_back_as_itself() -> None:
    """A typed record crosses boundaries as JSON: the clearance is written as the level's
    name (as claims and principals.json give it), not as a number nothing parses."""
    for level in Classification:
        who = Principal(sub="ana", email="ana@bank.example", tenant="bank", clearance=level,
                        expires_at=datetime(2027, 1, 1, tzinfo=UTC))  # fmt: skip
        dumped = who.model_dump(mode="json")
        assert dumped["clearance"] == level.label
        assert Principal.model_validate(dumped) == who

"""``[auth]``: how a served deployment learns who is calling (bearer tokens, seed 003 ingress).

A caller's identity comes only from a token the deployment can verify: a JWT signed by a key
configured here (a shared secret named by an environment variable, a PEM public key file, or a
JWKS file on disk), from the configured issuer, for the configured audience, inside its
validity window (``exp``, ``nbf``, with a small leeway) and no longer-lived than
``max_token_lifetime_s``. Each key pins its algorithm: a token whose header names another is
refused, whatever the key could verify. The claims become govrag's
:class:`~govrag.types.Principal` through :class:`ClaimMap`. Secrets never sit in the file: an
HMAC key is read from the environment variable the file names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from govrag.settings.sections import Section

#: The algorithms a key may pin: HMAC with a shared secret, RSA and ECDSA with a public key.
HMAC_ALGS = ("HS256", "HS384", "HS512")
PUBLIC_KEY_ALGS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                   "ES512", "EdDSA")  # fmt: skip
Alg = Literal[
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
    "ES384", "ES512", "EdDSA",
]  # fmt: skip


class AuthKey(Section):
    """One key tokens may be signed with, and the one algorithm it verifies."""

    #: Matched against a token's ``kid`` header. Needed when several keys are configured (a
    #: rotation); a token without ``kid`` is then refused rather than tried against each.
    kid: str | None = None
    alg: Alg
    #: HMAC (``HS*``) only: the environment variable holding the shared secret.
    secret_env: str | None = None
    #: ``RS*``, ``PS*``, ``ES*``, ``EdDSA``: a PEM public key file, relative to the deployment.
    public_key: str | None = None

    @model_validator(mode="after")
    def _material(self) -> AuthKey:
        if self.alg in HMAC_ALGS:
            if not self.secret_env or self.public_key:
                raise ValueError(f"alg {self.alg} verifies with a shared secret: set "
                                 "secret_env (the environment variable holding it) and not "
                                 "public_key")  # fmt: skip
        elif not self.public_key or self.secret_env:
            raise ValueError(f"alg {self.alg} verifies with a public key: set public_key (a PEM "
                             "file) and not secret_env")  # fmt: skip
        return self


class ClaimMap(Section):
    """Which token claim carries each of govrag's claims. A dotted name reaches into an object
    (``realm_access.roles``). A list claim may also be one space-separated string (the OAuth
    ``scope`` form)."""

    sub: str = "sub"
    email: str = "email"
    tenant: str = "tenant"
    roles: str = "roles"
    doc_entitlements: str = "doc_entitlements"
    clearance: str = "clearance"
    #: The claim saying ``email`` is the caller's proven address (OIDC's ``email_verified``):
    #: a token where it is present and not ``true`` is refused, because access is looked up
    #: by e-mail. Absent, the token is taken at its word; ``""`` ignores the claim.
    email_verified: str = "email_verified"


class AuthSettings(Section):
    #: The ``iss`` every token must carry (your identity provider's issuer URL).
    issuer: str | None = None
    #: The ``aud`` every token must carry (the identifier your identity provider gives govrag).
    audience: str = "govrag"
    #: Clock skew tolerated on ``exp``, ``nbf`` and ``iat``, in seconds.
    leeway_s: int = Field(default=30, ge=0, le=300)
    #: The longest a token may live, in seconds (``exp`` - ``iat``): a longer-lived one is
    #: refused like any bad token, so a token that leaks, or one an identity provider was
    #: talked into minting for a century, is not a credential for good. Default: a day.
    max_token_lifetime_s: int = 86_400
    keys: list[AuthKey] = Field(default_factory=list)
    #: A JWKS file (JSON Web Key Set) on disk, relative to the deployment; re-read when it
    #: changes, so a key rotation needs no restart. Each key names its ``alg`` (RSA keys
    #: without one are RS256, P-256 keys ES256); shared-secret keys (``oct``) are refused.
    jwks_file: str | None = None
    claims: ClaimMap = Field(default_factory=ClaimMap)
    #: Tenants a token may name; default: only the deployment's ``default_tenant``. A token
    #: without the tenant claim is for ``default_tenant`` when that is the only tenant
    #: served; with several it is refused (govrag does not guess whose documents it reads).
    tenants: list[str] = Field(default_factory=list)
    #: Development only: accept tokens that ``govrag token --as SUB`` signs for entries of
    #: ``principals.json`` (a secret generated in ``keys/``). Never on a served deployment.
    dev_tokens: bool = False
    #: How long a development token lives, in seconds (at most ``max_token_lifetime_s``).
    dev_token_ttl_s: int = Field(default=3600, ge=60, le=86_400)

    @field_validator("max_token_lifetime_s")
    @classmethod
    def _lifetime(cls, value: int) -> int:
        if value <= 0:
            raise ValueError(f"max_token_lifetime_s = {value} is not a positive number of "
                             "seconds; set the longest a token may live (exp - iat), e.g. "
                             "86400 for a day")  # fmt: skip
        return value

    @model_validator(mode="after")
    def _kids(self) -> AuthSettings:
        kids = [k.kid for k in self.keys]
        if len(self.keys) > 1 and None in kids:
            raise ValueError("with several keys each needs a kid (tokens name theirs in the "
                             "'kid' header)")  # fmt: skip
        duplicates = sorted({k for k in kids if k is not None and kids.count(k) > 1})
        if duplicates:
            raise ValueError(f"kid {duplicates[0]!r} is configured twice; kids must be unique")
        return self

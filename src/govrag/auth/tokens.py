"""Bearer tokens in, verified claims out: the only way a served caller gets a Principal.

:meth:`TokenVerifier.verify` takes the token as the caller sent it and either returns a
:class:`VerifiedToken` (the :class:`~govrag.types.Principal`, and when the token expires) or
raises :class:`~govrag.errors.AuthError`, whose text is the same fixed line for every reason
(the reason is on the exception, for the server's log). It refuses, in this order:

1. anything that is not three base64url segments with a JSON header, or whose header PyJWT
   refuses before any key is chosen (a non-string ``kid``, an unknown ``crit``) (``malformed``);
2. a header whose ``alg`` is not the one the chosen key pins (``alg_not_allowed``: this is
   where ``alg: none`` and the HS/RS confusion stop), or a ``kid`` no key has (``unknown_key``);
3. a bad signature, then ``exp`` / ``nbf`` / ``iat`` outside the leeway, a wrong ``aud``, a
   wrong ``iss`` (PyJWT checks these with the pinned algorithm only); then a lifetime
   (``exp`` - ``iat``) over ``[auth] max_token_lifetime_s`` (``too_long_lived``): a validly
   signed token good for a century is a leaked credential waiting to happen;
4. claims that do not make a Principal (no ``sub`` or ``email``, a list that is not strings,
   an ``exp`` past what a date holds, ``email_verified`` present and not true, an e-mail
   that casefolding would turn into another's (compatibility characters, ``ß``) or with
   surrounding whitespace (:func:`~govrag.types.check_email`), a claim path meeting a
   non-object) (``bad_claims``), or that name a tenant this deployment does not serve, name
   none (or null) while it serves several (``tenant_not_served``).

Keys a token carries itself (``jwk``, ``jku``, ``x5u``, ``x5c``) are never read: the key is
chosen from the configured ones by ``kid`` alone.

Keys come from :mod:`govrag.auth.keys`; the development keys of ``govrag token`` from
:mod:`govrag.auth.dev` when ``[auth] dev_tokens`` is on.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import jwt
from pydantic import ValidationError

from govrag.auth.dev import DEV_ISSUER
from govrag.auth.keys import JwksFile, VerifyingKey, configured_keys
from govrag.errors import AuthError, ConfigError
from govrag.settings import ClaimMap, Settings
from govrag.types import Principal, VerifiedToken, check_email

#: Claims every token must carry (PyJWT refuses a token without them).
REQUIRED_CLAIMS = ("exp", "iat", "sub", "aud", "iss")
#: Longer tokens are refused unread: no real JWT is near this size.
MAX_TOKEN_CHARS = 16_384


class TokenVerifier:
    """Verifies bearer tokens against the deployment's ``[auth]`` settings."""

    def __init__(self, settings: Settings, *, dev_keys: Sequence[VerifyingKey] = ()) -> None:
        auth = settings.auth
        self._static = configured_keys(settings) + list(dev_keys)
        self._jwks = JwksFile(settings.resolve_path(auth.jwks_file)) if auth.jwks_file else None
        if not self._static and self._jwks is None:
            raise ConfigError("no key to verify bearer tokens with: set [auth] keys or "
                              "[auth] jwks_file (or [auth] dev_tokens = true for local "
                              "development)")  # fmt: skip
        if auth.issuer is None and (auth.keys or auth.jwks_file):
            raise ConfigError("[auth] issuer is not set: name the identity provider whose "
                              "tokens govrag accepts (the 'iss' claim)")  # fmt: skip
        if auth.issuer == DEV_ISSUER:
            # The identity provider's keys would then accept development tokens' issuer:
            # only the development key may (govrag.auth.dev).
            raise ConfigError(f"[auth] issuer {DEV_ISSUER!r} is the development tokens' "
                              "issuer; name your identity provider's")  # fmt: skip
        self._issuer = auth.issuer
        self._audience = auth.audience
        self._leeway = auth.leeway_s
        self._max_lifetime = auth.max_token_lifetime_s
        self._claims = auth.claims
        self._tenants = frozenset(auth.tenants or [settings.default_tenant])
        self._default_tenant = settings.default_tenant

    def keys(self) -> list[VerifyingKey]:
        return self._static + (self._jwks.keys() if self._jwks else [])

    def verify(self, token: str | None) -> VerifiedToken:
        """The caller's verified claims, or :class:`AuthError` (module docstring)."""
        if not token:
            raise AuthError("missing", "no bearer token")
        if len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
            raise AuthError("malformed", "not a compact JWS")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            # Not only DecodeError: PyJWT also refuses a non-string ``kid`` and an unknown or
            # malformed ``crit`` here, before any key is involved, with InvalidTokenError.
            # Uncaught, an unsigned token would have turned into a server error.
            raise AuthError("malformed", str(exc)) from exc
        key = self._key_for(header)
        try:
            claims = jwt.decode(
                token, key.key, algorithms=[key.alg], audience=self._audience,
                issuer=key.issuer or self._issuer, leeway=self._leeway,
                options={"require": list(REQUIRED_CLAIMS), "verify_signature": True},
            )  # fmt: skip
        except jwt.InvalidTokenError as exc:
            raise AuthError(_fault(exc), f"{type(exc).__name__}: {exc}") from exc
        expires_at = _expiry(claims["exp"])
        self._check_lifetime(claims)
        principal = self._principal(claims).model_copy(update={"expires_at": expires_at})
        return VerifiedToken(
            principal=principal, issuer=str(claims["iss"]), kid=key.kid, expires_at=expires_at
        )

    def _check_lifetime(self, claims: dict[str, Any]) -> None:
        """Refuse a token that lives longer than ``max_token_lifetime_s``: from its ``iat``
        to its ``exp`` (PyJWT checked both are numbers, ``iat`` not in the future). A token
        without ``iat`` (required today) would be measured from now."""
        iat = claims.get("iat")
        start = int(iat) if iat is not None else int(time.time())
        lifetime = int(claims["exp"]) - start
        if lifetime > self._max_lifetime:
            raise AuthError("too_long_lived", f"lifetime {lifetime} s over [auth] "
                            f"max_token_lifetime_s = {self._max_lifetime}")  # fmt: skip

    def _key_for(self, header: dict[str, Any]) -> VerifyingKey:
        alg, kid = header.get("alg"), header.get("kid")
        keys = self.keys()
        if not keys:
            raise AuthError("no_keys", "no key loaded (see the log about the JWKS file)")
        if kid is not None:
            named = [k for k in keys if k.kid == kid]
            if not named:
                raise AuthError("unknown_key", f"kid {str(kid)[:80]!r}")
            candidates = named
        else:
            # Only a key configured without a kid verifies a token without one, and only
            # when it is the one such key: a token is never tried against several keys.
            candidates = [k for k in keys if k.kid is None]
            if len(candidates) != 1:
                raise AuthError("unknown_key", "no kid, and no single key without one")
        for key in candidates:
            if key.alg == alg:
                return key
        pinned = candidates[0].alg
        raise AuthError("alg_not_allowed", f"alg {str(alg)[:20]!r}; the key pins {pinned}")

    def _principal(self, claims: dict[str, Any]) -> Principal:
        m: ClaimMap = self._claims
        tenant = _claim(claims, m.tenant)
        if tenant is _ABSENT and len(self._tenants) == 1:
            # Only a deployment serving one tenant may guess: with several, a token that
            # names none (a service account, a claim map pointing at the wrong claim) would
            # otherwise land every caller in default_tenant's documents.
            tenant = self._default_tenant
        if not isinstance(tenant, str) or tenant not in self._tenants:
            shown = "none named" if tenant is _ABSENT else repr(str(tenant)[:80])
            raise AuthError("tenant_not_served", f"tenant {shown}")
        verified = _claim(claims, m.email_verified) if m.email_verified else _ABSENT
        if not (verified is _ABSENT or verified is True or verified == "true"):
            # The identity provider itself says the address is not proven (a user who typed
            # someone else's into their profile): access lists are keyed on the e-mail, so
            # such a token would read the other person's documents. ("true" as a string:
            # Cognito's spelling.)
            raise AuthError("bad_claims", f"claim {m.email_verified!r} is not true")
        email = _claim(claims, m.email)
        if isinstance(email, str):
            # Principals and identity records are compared casefolded, which maps the Kelvin
            # sign to "k", the long s to "s" and "ß" to "ss": such an address, or one with
            # surrounding whitespace, could match someone else's (check_email). The reason
            # names it for the server's log; the caller gets the fixed line.
            try:
                check_email(email)
            except ValueError as exc:
                raise AuthError("bad_claims", f"claim {m.email!r}: {exc}") from None
        values: dict[str, Any] = {"sub": _value(claims, m.sub), "email": _value(claims, m.email),
                                  "tenant": tenant}  # fmt: skip
        for field, name in (("roles", m.roles), ("doc_entitlements", m.doc_entitlements)):
            value = _value(claims, name)
            if value is not None:
                values[field] = _string_list(value, name)
        clearance = _value(claims, m.clearance)
        if clearance is not None:
            values["clearance"] = clearance
        try:
            return Principal.model_validate(values)
        except ValidationError as exc:
            fields = ", ".join(str(e["loc"][0]) for e in exc.errors() if e["loc"])
            raise AuthError("bad_claims", f"claims do not make a principal ({fields})") from exc


#: What :func:`_claim` returns for a claim the token does not carry (``None`` is a JSON null).
_ABSENT: Any = object()


def _claim(claims: dict[str, Any], name: str) -> Any:
    """``claims[name]``, following a dotted name into objects; :data:`_ABSENT` when absent.

    A claim named with dots as it stands (``https://bank.example/tenant``, as Auth0 requires
    of custom claims) is read as is; a token carrying both it and the nested path is refused
    rather than one of them picked. A path that meets a non-object (``org.id`` when ``org``
    is a string) is refused too: the token does not have the shape the claim map describes,
    and reading it as absent would hand the tenant claim's default to whoever sent it.
    """
    literal = claims.get(name, _ABSENT) if "." in name else _ABSENT
    value: Any = claims
    for part in name.split("."):
        if value is None:  # a null object on the way: nothing is there
            return literal
        if not isinstance(value, dict):
            if literal is not _ABSENT:
                return literal
            raise AuthError("bad_claims", f"claim {name!r}: {part!r} is inside a non-object")
        if part not in value:
            return literal
        value = value[part]
    if literal is not _ABSENT:
        raise AuthError("bad_claims", f"claim {name!r} is both a dotted name and a path")
    return value


def _value(claims: dict[str, Any], name: str) -> Any:
    """:func:`_claim`, with an absent claim as ``None`` (a null is no claim either)."""
    value = _claim(claims, name)
    return None if value is _ABSENT else value


def _expiry(exp: Any) -> datetime:
    """``exp`` as a datetime. PyJWT checked it is a number in the future; one past what a
    datetime holds (``1e20``, the year 33658) is refused, not a server error."""
    try:
        return datetime.fromtimestamp(int(exp), UTC)
    except (ValueError, OverflowError, OSError) as exc:
        raise AuthError("bad_claims", "exp is out of range") from exc


def _string_list(value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        # Split on the space only (RFC 6749's scope syntax), never on any Unicode whitespace:
        # str.split() would cut "group:x\u00a0policy:read" into an entitlement the identity
        # provider never granted. A non-space separator stays inside one (unmatched) entry.
        return tuple(part for part in value.split(" ") if part)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise AuthError("bad_claims", f"claim {name!r} is not a list of strings")


def _fault(exc: jwt.InvalidTokenError) -> Any:
    """The :data:`~govrag.errors.TokenFault` of a PyJWT refusal."""
    faults: list[tuple[type[Exception], str]] = [
        (jwt.ExpiredSignatureError, "expired"), (jwt.ImmatureSignatureError, "not_yet_valid"),
        (jwt.InvalidAudienceError, "wrong_audience"), (jwt.InvalidIssuerError, "wrong_issuer"),
        (jwt.InvalidSignatureError, "bad_signature"),
        (jwt.InvalidAlgorithmError, "alg_not_allowed"),
        (jwt.MissingRequiredClaimError, "bad_claims"),
        (jwt.exceptions.InvalidSubjectError, "bad_claims"),
        (jwt.exceptions.InvalidJTIError, "bad_claims"),
        (jwt.InvalidIssuedAtError, "not_yet_valid"),
        (jwt.DecodeError, "malformed"),
    ]  # fmt: skip
    for cls, fault in faults:
        if isinstance(exc, cls):
            return fault
    return "malformed"

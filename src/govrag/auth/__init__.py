"""Who is calling a served deployment: bearer tokens verified into a Principal.

:class:`TokenVerifier` (``tokens.py``) is what the HTTP and MCP edges use, through the
application API (``Govrag.verify_token``); ``keys.py`` loads the keys and the JWKS file;
``dev.py`` signs development tokens (``govrag token --as SUB``). Needs the ``server`` extra
(PyJWT); importing it without raises :class:`~govrag.errors.MissingExtraError`.
"""

from govrag.errors import MissingExtraError

try:
    import jwt  # noqa: F401  (checked first: every module below needs it)
except ImportError as exc:
    raise MissingExtraError("PyJWT", "server", "Bearer-token verification") from exc

from govrag.auth.dev import DEV_ISSUER, dev_key, sign_dev_token
from govrag.auth.keys import VerifyingKey
from govrag.auth.tokens import TokenVerifier

__all__ = ["DEV_ISSUER", "TokenVerifier", "VerifyingKey", "dev_key", "sign_dev_token"]

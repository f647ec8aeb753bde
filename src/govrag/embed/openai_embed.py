"""Embeddings from any OpenAI-compatible server (OpenAI, vLLM, llama.cpp, Ollama, TEI...).

Each batch is one ``POST {base_url}/embeddings`` (``/v1/embeddings`` for a ``base_url`` ending
in ``/v1``) with exactly ``{"model": ..., "input": [texts]}``; row ``i`` of the result is the
``embedding`` of the reply's item whose ``index`` is ``i`` (servers may answer out of order).

The argument of this module is that a vector index must never hold a vector nobody can vouch
for, so the adapter **fails closed**. A reply that is not JSON, lacks ``data``, has the wrong
number of items, a duplicate or missing ``index``, a non-numeric, NaN or infinite value, a zero
vector for a non-empty text, or a vector of another length than ``[embedder] dim`` raises; no
partial matrix and no placeholder row is ever returned. What went wrong is told with the URL,
the model and the setting to fix:

- :class:`~govrag.errors.ConfigError`: only the deployment can fix it (HTTP 401/403: the key;
  404, a redirect, other 4xx: ``base_url``, ``model``, the input limit; a vector of the wrong
  length: ``dim``). Never retried.
- :class:`~govrag.errors.StoreError`: the service failed (429, 5xx, timeouts, lost connections
  after ``max_retries`` retries; a malformed reply). The vector index cannot be written or
  searched; trying again later may work.

Retries back off exponentially (:data:`BASE_DELAY_S` doubling, at most :data:`MAX_DELAY_S`) or
wait the server's ``Retry-After`` seconds (at most :data:`MAX_RETRY_AFTER_S`); the sleep
function is injectable, so tests never wait.

**Name.** :attr:`OpenAIEmbedder.name` is ``openai:<model>``, the same form as the chat
adapter's. The store records it with a tenant's vectors and compares it, with ``dim``, before
every semantic search, so a query is never scored against vectors of another model. The URL is
left out on purpose: moving a server (or going through a proxy) does not change its vectors,
and re-embedding a corpus for a new hostname would be waste.

**Empty texts.** A text with no non-whitespace character is not sent (OpenAI refuses ``""``)
and embeds as the zero row, as :class:`~govrag.embed.base.Embedder` allows.

**The key** is held as a :class:`~pydantic.SecretStr`, sent only as ``Authorization: Bearer``
and scrubbed from every quoted server reply; no message, repr or log line shows it.

``httpx`` is the optional extra ``http``; it is imported when an embedder is constructed, so
the registry can list ``openai`` on an installation without it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import SecretStr

from govrag.embed.base import FloatArray, ProgressCallback, check_batch_args
from govrag.errors import ConfigError, InputError, MissingExtraError, StoreError
from govrag.settings.sections import http_url
from govrag.store_url import redact_endpoint

if TYPE_CHECKING:
    import httpx

    from govrag.settings import EmbedderSettings

log = logging.getLogger("govrag.embed")

#: First retry delay; doubled per retry up to :data:`MAX_DELAY_S`.
BASE_DELAY_S = 0.5
MAX_DELAY_S = 8.0
#: The longest ``Retry-After`` honoured: a server asking for minutes is a quota, not a blip.
MAX_RETRY_AFTER_S = 30.0
#: OpenAI's limit of inputs per request; a larger caller batch is split.
MAX_INPUTS = 2048
#: The largest reply read (2048 x 3072 floats as JSON is ~130 MB): a server streaming without
#: end is refused rather than held in memory.
MAX_REPLY_BYTES = 256 * 1024 * 1024
SNIPPET_CHARS = 500


def settings_options(settings: EmbedderSettings) -> dict[str, Any]:
    """Constructor options for ``[embedder]``; the key is read from the variable
    ``api_key_env`` names (the setting never holds the key itself)."""
    key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
    return {
        "base_url": settings.base_url,
        "model": settings.model,
        "dim": settings.dim,
        "api_key": SecretStr(key) if key else None,
        "api_key_env": settings.api_key_env,
        "timeout_s": settings.timeout_s,
        "max_retries": settings.max_retries,
    }


class OpenAIEmbedder:
    """Texts to unit-norm vectors through an OpenAI-compatible ``/embeddings`` endpoint.

    Args:
        base_url: The API root, up to and including ``/v1``.
        model: The embedding model the server serves.
        dim: The length the server's vectors must have (any other is refused).
        api_key: Sent as a bearer token; None or ``""`` sends none.
        api_key_env: The variable the key was read from. When named, a missing key refuses
            to embed (rather than call a hosted API without one); messages name it.
        timeout_s: Most seconds one request may take, the whole reply included.
        max_retries: Retries of a transient failure (429, 5xx, timeout, connection).
        transport: An httpx transport (tests: ``httpx.MockTransport``).
        sleep: Waits between retries (tests: a recorder).

    Raises:
        ConfigError: An argument is out of range.
        MissingExtraError: ``httpx`` (extra ``http``) is not installed.
    """

    def __init__(
        self,
        base_url: str = "https://api.openai.com/v1",
        model: str = "text-embedding-3-small",
        dim: int = 1536,
        *,
        api_key: str | SecretStr | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        try:
            import httpx
        except ImportError as exc:
            raise MissingExtraError("httpx", "http", "The 'openai' embedder") from exc
        try:
            self.base_url = http_url(base_url)
        except ValueError as exc:
            raise ConfigError(f"openai embedder: {exc}; set [embedder] base_url") from exc
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"openai embedder: dim must be a positive integer, got {dim!r}")
        if not (isinstance(timeout_s, int | float) and 0 < timeout_s < math.inf):
            raise ConfigError(f"openai embedder: timeout_s must be positive, got {timeout_s!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(f"openai embedder: max_retries must be 0 or more, got "
                              f"{max_retries!r}")  # fmt: skip
        if not model or not model.strip():
            raise ConfigError("openai embedder: model is empty; set [embedder] model")
        self.model = model.strip()
        self.name = f"openai:{self.model}"
        self.dim = dim
        self.url = f"{self.base_url}/embeddings"
        #: The URL as messages show it: no password, no query (it may carry a key).
        self.shown_url = redact_endpoint(self.url)
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.api_key_env = api_key_env
        if isinstance(api_key, SecretStr):
            api_key = api_key.get_secret_value()
        key = (api_key or "").strip()  # a CRLF env file leaves "\r" on the key
        self._api_key = SecretStr(key) if key else None
        # A key that cannot be a header value is never sent, and never echoed.
        self._bad_key = bool(key) and not all(" " < c < "\x7f" for c in key)
        self._sleep = sleep
        self._httpx = httpx
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if self._api_key and not self._bad_key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(headers=headers, timeout=httpx.Timeout(self.timeout_s),
                                    transport=transport)  # fmt: skip

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIEmbedder(url={self.shown_url!r}, model={self.model!r}, dim={self.dim})"

    # -- the protocol ---------------------------------------------------------------------

    def embed_documents(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 64,
        progress: ProgressCallback | None = None,
    ) -> FloatArray:
        """Embed ``texts`` as unit-norm ``float32`` rows; a blank text is a zero row.

        Raises:
            InputError: ``texts`` is a bare string, holds a non-string, or ``batch_size`` < 1.
            ConfigError, StoreError: The server could not be used; see the module docstring.
        """
        check_batch_args(texts, batch_size)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputError(f"texts[{i}] is a {type(text).__name__}, not a string")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            stop = min(start + batch_size, len(texts))
            wanted = [i for i in range(start, stop) if texts[i].strip()]
            for sub in range(0, len(wanted), MAX_INPUTS):
                rows = wanted[sub : sub + MAX_INPUTS]
                out[rows] = self._embed([texts[i] for i in rows])
            if progress is not None:
                progress(stop - start)
        return out

    def embed_query(self, text: str) -> FloatArray:
        """Embed one query as a unit-norm ``float32`` vector; a blank query is zeros."""
        if not text.strip():
            return np.zeros(self.dim, dtype=np.float32)
        vector: FloatArray = self._embed([text])[0]
        return vector

    # -- one request ----------------------------------------------------------------------

    def _embed(self, texts: list[str]) -> FloatArray:
        if self._bad_key or (self.api_key_env and not self._api_key):
            what = "holds a control or non-ASCII character" if self._bad_key else "is empty"
            where = (f"the environment variable {self.api_key_env} ([embedder] api_key_env)"
                     if self.api_key_env else "api_key")  # fmt: skip
            raise ConfigError(f"the API key for the embeddings server {self.shown_url} {what}, "
                              f"so nothing was sent; put the key alone in {where}")  # fmt: skip
        try:
            body = json.dumps({"model": self.model, "input": texts}, ensure_ascii=False)
            content = body.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate has no UTF-8
            raise InputError("a text to embed holds a lone surrogate; pass valid text") from exc
        return self._parse(self._post_with_retries(content), len(texts))

    def _post_with_retries(self, content: bytes) -> Any:
        httpx = self._httpx
        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            try:
                status, headers, raw = self._post(content)
            except httpx.TimeoutException:
                fault = f"no complete reply within timeout_s ({self.timeout_s:g}s)"
            except httpx.TransportError as exc:
                fault = f"could not connect ({type(exc).__name__}: {self._scrub(str(exc))})"
            else:
                if status == 200:
                    return self._json(raw)
                fault = f"HTTP {status}: {self._snippet(raw)}"
                if status != 429 and not (500 <= status <= 599 and status != 501):
                    raise self._refused(status, fault, headers.get("location"))
                retry_after = _seconds(headers.get("retry-after"))
            if attempt == self.max_retries:
                raise StoreError(
                    f"the embeddings server {self.shown_url} (model {self.model!r}) failed "
                    f"{attempt + 1} time(s), the last with {fault}; check that it is up and "
                    "within its rate limits, then try again (raise [embedder] max_retries or "
                    "timeout_s to wait longer)"
                )
            delay = min(BASE_DELAY_S * 2**attempt, MAX_DELAY_S)
            if retry_after is not None:
                delay = min(retry_after, MAX_RETRY_AFTER_S)
            log.warning("embeddings at %s: %s; retry %d of %d in %.1fs", self.shown_url,
                        fault, attempt + 1, self.max_retries, delay)  # fmt: skip
            self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _post(self, content: bytes) -> tuple[int, Any, bytes]:
        """Status, headers and body, the whole reply read within ``timeout_s`` (httpx's own
        read timeout restarts with every byte, so a dripping server could hold it longer)."""
        deadline = time.monotonic() + self.timeout_s
        with self._client.stream("POST", self.url, content=content) as streamed:
            chunks, size = [], 0
            for chunk in streamed.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if time.monotonic() > deadline:
                    raise self._httpx.ReadTimeout("the reply did not complete in time")
                if size > MAX_REPLY_BYTES:
                    raise self._malformed(f"a reply larger than {MAX_REPLY_BYTES} bytes")
            return streamed.status_code, streamed.headers, b"".join(chunks)

    # -- faults ---------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        if self._api_key:
            key = self._api_key.get_secret_value()
            for form in {key, repr(key)[1:-1], key.encode("unicode_escape").decode("ascii")}:
                text = text.replace(form, "[redacted]")
        return text.replace(self.url, self.shown_url)

    def _snippet(self, raw: bytes) -> str:
        text = " ".join(self._scrub(raw.decode("utf-8", "replace")).split())
        if len(text) > SNIPPET_CHARS:
            text = text[: SNIPPET_CHARS - 3] + "..."
        return text or "(empty body)"

    def _refused(self, status: int, fault: str, location: str | None) -> ConfigError:
        where = f"the embeddings server {self.shown_url} (model {self.model!r}) answered {fault}"
        if status in (401, 403):
            sent = (f"the key in {self.api_key_env} was sent" if self._api_key
                    else "no key was sent")  # fmt: skip
            fix = (f"{sent}; check the key and its access to the model, and that "
                   "[embedder] api_key_env names the variable holding it")  # fmt: skip
        elif 300 <= status < 400:
            shown = redact_endpoint(self._scrub(location)) if location else "elsewhere"
            fix = (f"redirects are not followed (to {shown}); set [embedder] base_url to the "
                   "API root itself, ending in /v1")  # fmt: skip
        else:
            fix = ("check [embedder] base_url (the API root, ending in /v1) and model (one the "
                   "server serves); a text over the model's input limit is refused too: lower "
                   "[ingest] chunk_tokens")  # fmt: skip
        return ConfigError(f"{where}; {fix}")

    def _malformed(self, what: str) -> StoreError:
        return StoreError(
            f"the embeddings server {self.shown_url} (model {self.model!r}) answered outside "
            f"the embeddings protocol: {what}; nothing was embedded. Check that [embedder] "
            "base_url points at an OpenAI-compatible /v1 API serving that model"
        )

    # -- the reply ------------------------------------------------------------------------

    def _json(self, raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise self._malformed(f"HTTP 200 with a body that is not JSON: "
                                  f"{self._snippet(raw)}") from exc  # fmt: skip

    def _parse(self, reply: Any, n: int) -> FloatArray:
        items = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(items, list):
            error = reply.get("error") if isinstance(reply, dict) else None
            detail = f" (error: {self._scrub(json.dumps(error))[:SNIPPET_CHARS]})" if error else ""
            raise self._malformed(f"no 'data' list in the reply{detail}")
        if len(items) != n:
            raise self._malformed(f"{len(items)} embeddings for {n} inputs")
        out = np.empty((n, self.dim), dtype=np.float64)
        seen: set[int] = set()
        for pos, item in enumerate(items):
            index = item.get("index") if isinstance(item, dict) else None
            if type(index) is not int or not 0 <= index < n:
                raise self._malformed(f"data[{pos}].index is {index!r}, not an input position "
                                      f"0..{n - 1}")  # fmt: skip
            if index in seen:
                raise self._malformed(f"index {index} appears twice in data")
            seen.add(index)
            vector = item.get("embedding")
            # type() rather than isinstance(): bool is an int, and JSON true is not a number.
            if not isinstance(vector, list) or not all(type(x) in (int, float) for x in vector):
                raise self._malformed(f"data[{pos}].embedding is not a list of numbers")
            if len(vector) != self.dim:
                raise ConfigError(
                    f"the embeddings server {self.shown_url} returned vectors of {len(vector)} "
                    f"dimensions for model {self.model!r}, but [embedder] dim is {self.dim}; "
                    f"set [embedder] dim = {len(vector)} (a new dim means re-ingesting)"
                )
            row = np.asarray(vector, dtype=np.float64)
            if not np.isfinite(row).all():
                raise self._malformed(f"data[{pos}].embedding holds NaN or infinite values")
            # Scaled by the largest component first, so a norm of huge values cannot overflow.
            scale = float(np.abs(row).max(initial=0.0))
            if scale == 0.0:
                raise self._malformed(f"data[{pos}].embedding is a zero vector for a non-empty "
                                      "text")  # fmt: skip
            row /= scale
            out[index] = row / np.linalg.norm(row)
        return out.astype(np.float32)


def _seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds; None for an HTTP date or nonsense (backoff applies)."""
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return seconds if 0.0 <= seconds < math.inf else None

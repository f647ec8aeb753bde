"""An :class:`~govrag.agent.llm.LlmClient` for any OpenAI-compatible chat-completions server.

OpenAI, vLLM, the llama.cpp server and Ollama all answer ``POST {base_url}/chat/completions``.
The request carries exactly ``model``, ``messages``, ``temperature``, ``max_tokens`` (always:
a local server's default is often unlimited, and it keeps generating after govrag gave up),
``stop`` when a call asks for it and, when tools are offered, ``tools`` (each schema wrapped
as ``{"type": "function", "function": ...}``) and ``tool_choice: "auto"``. Messages pass
through unchanged (the orchestrator builds them in the shape strict servers accept: string
``content`` everywhere, ``""`` on an assistant turn that only calls tools) and nothing else is
added: no token, role, entitlement or policy text reaches the model through this adapter
(seed 003, step 2). The API key is sent only when ``[llm] api_key_env`` names its variable.

The reply's ``choices[0].message`` becomes an :class:`~govrag.agent.llm.LlmReply`: its text
(``""`` when ``content`` is null), ``finish_reason``, token ``usage`` and its tool calls,
parsed with :meth:`~govrag.agent.llm.ToolCall.parse` so malformed argument JSON is kept raw. Servers
differ in small ways and all of these are accepted: ``arguments`` sent as a JSON object
instead of a string, tool calls without an ``id`` (one is generated: ``call-<n>``, unique per
client), the legacy single ``function_call`` shape, and ``content`` as a list of text parts.

Every fault raises :class:`~govrag.errors.LlmError` with its ``fault`` class (connection,
auth, not_found, context_overflow, rejected, protocol, quota; transient: timeout, overloaded,
rate_limited; an HTTP answer is classified by :func:`~govrag.agent.llm_faults.classify`),
naming the URL, what went wrong and the setting to fix. A server's own
explanation is quoted up to :data:`SNIPPET_CHARS` characters (the line naming the bad field is
usually past the first 200). The API key never appears in an error message (it is scrubbed
from quoted response bodies too), and the request body is never quoted.

``httpx`` is the optional extra ``http``; importing this module without it raises
:class:`~govrag.errors.MissingExtraError`.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from govrag.agent.llm import LlmReply, Message, ToolCall
from govrag.agent.llm_faults import QUOTA, classify
from govrag.errors import LlmError, MissingExtraError
from govrag.store_url import redact_endpoint

try:
    import httpx
except ImportError as exc:  # pragma: no cover - exercised in a test by hiding httpx
    raise MissingExtraError("httpx", "http", "The 'openai' LLM provider") from exc

if TYPE_CHECKING:
    from govrag.settings import LlmSettings

#: The most characters of a response body quoted in an error message.
SNIPPET_CHARS = 1000
_REDACTED = "[redacted]"
#: The keys of a tool schema that reach the model (what ``tool_schemas`` produces).
_TOOL_KEYS = ("name", "description", "parameters")


class OpenAIChatClient:
    """Chat completions over HTTP: messages + tool schemas in, text or tool calls out."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | SecretStr | None = None,
        timeout_s: float = 60.0,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        transport: httpx.BaseTransport | None = None,
        api_key_env: str | None = None,
    ) -> None:
        """``api_key_env`` only names the key's variable in error messages; the key itself
        is ``api_key`` (``None`` or ``""``: no ``Authorization`` header is sent)."""
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{model}"
        self.url = f"{self.base_url}/chat/completions"
        #: The URL as messages show it: a password or a key in the query is never shown.
        self.shown_url = redact_endpoint(self.url)
        self.timeout_s = timeout_s
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.api_key_env = api_key_env
        # A key read from a CRLF env file ends in "\r": whitespace around it is never part
        # of it. One that still holds a control or non-ASCII character cannot be a header
        # value; it is refused (fault ``auth``) before anything is sent, never echoed.
        if isinstance(api_key, SecretStr):
            api_key = api_key.get_secret_value()
        key = (api_key or "").strip()
        # Held as a SecretStr: repr(), vars() and debuggers show it masked.
        self._api_key = SecretStr(key) if key else None
        self._bad_key = bool(key) and not all(" " < c < "\x7f" for c in key)
        self._ids = itertools.count(1)
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if self._api_key and not self._bad_key:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        self._client = httpx.Client(
            headers=headers, timeout=httpx.Timeout(timeout_s), transport=transport
        )

    @classmethod
    def from_settings(
        cls, settings: LlmSettings, *, transport: httpx.BaseTransport | None = None
    ) -> OpenAIChatClient:
        """A client for ``[llm]``; the key is read from the variable ``api_key_env`` names."""
        key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
        return cls(
            settings.base_url,
            settings.model,
            api_key=SecretStr(key) if key else None,
            timeout_s=settings.timeout_s,
            temperature=settings.temperature,
            max_tokens=settings.max_tokens,
            transport=transport,
            api_key_env=settings.api_key_env,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIChatClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChatClient(url={self.shown_url!r}, model={self.model!r})"

    # -- the protocol ---------------------------------------------------------------------

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        stop: Sequence[str] = (),
    ) -> LlmReply:
        if self._bad_key:
            where = f"the environment variable {self.api_key_env}" if self.api_key_env else "it"
            raise LlmError(
                f"the API key for the LLM at {self.shown_url} holds a control or non-ASCII "
                f"character and was not sent; put the key alone in {where}", fault="auth",
            )  # fmt: skip
        body = self.request_body(messages, tools, max_tokens=max_tokens, stop=stop)
        try:
            content = json.dumps(body, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise LlmError(
                f"the request to {self.shown_url} could not be encoded as JSON: {exc}; messages "
                "and tool schemas must hold only JSON values", fault="rejected",
            ) from exc  # fmt: skip
        try:
            response = self._post(content)
        except httpx.TimeoutException as exc:
            raise LlmError(
                f"the LLM at {self.shown_url} timed out after {self.timeout_s:g}s "
                f"({type(exc).__name__}); raise llm.timeout_s (GOVRAG_LLM__TIMEOUT_S) or check "
                "that the server is not overloaded. A local server may go on generating after "
                f"govrag gave up: llm.max_tokens ({self.max_tokens}) is what bounds a reply",
                fault="timeout",
            ) from exc  # fmt: skip
        except httpx.TransportError as exc:
            raise LlmError(
                f"could not connect to the LLM at {self.shown_url} ({type(exc).__name__}: "
                f"{self._scrub(str(exc))}); check llm.base_url (GOVRAG_LLM__BASE_URL) and that "
                "the server is running", fault="connection",
            ) from exc  # fmt: skip
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise LlmError(
                f"the request to the LLM at {self.shown_url!r} failed ({type(exc).__name__}: "
                f"{self._scrub(str(exc))}); check llm.base_url (GOVRAG_LLM__BASE_URL)",
                fault="connection",
            ) from exc  # fmt: skip
        if response.status_code != 200:
            raise self._status_error(response)
        return self._parse(response)

    def _post(self, content: bytes) -> httpx.Response:
        """POST the body and read the whole reply within ``timeout_s`` in all: httpx's own
        timeout restarts with every byte, so a server dripping bytes would hold the call
        past any read timeout."""
        deadline = time.monotonic() + self.timeout_s
        with self._client.stream("POST", self.url, content=content) as streamed:
            chunks = []
            for chunk in streamed.iter_bytes():  # decoded (gzip...) as it arrives
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout("the reply did not complete in time")
            # The body is decoded already: the rebuilt response must not decode it again.
            headers = [(k, v) for k, v in streamed.headers.multi_items()
                       if k.lower() not in ("content-encoding", "content-length")]  # fmt: skip
            return httpx.Response(streamed.status_code, headers=headers,
                                  content=b"".join(chunks), request=streamed.request)  # fmt: skip

    def request_body(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        *,
        max_tokens: int | None = None,
        stop: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The JSON body of one call: exactly model, messages, temperature, max_tokens
        (``max_tokens`` below the client's limit, never above), stop when given, and the
        tools when offered."""
        limit = self.max_tokens if max_tokens is None else min(max_tokens, self.max_tokens)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "temperature": self.temperature,
            "max_tokens": limit,
        }
        if stop:
            body["stop"] = list(stop)
        if tools:
            body["tools"] = [
                {"type": "function", "function": {k: t[k] for k in _TOOL_KEYS if k in t}}
                for t in tools
            ]
            body["tool_choice"] = "auto"
        return body

    # -- faults ---------------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        """``text`` without the API key, as written or escaped (servers echo it in some error
        bodies, and header errors quote it escaped), and with the URL as :attr:`shown_url`."""
        text = text.replace(self.url, self.shown_url)
        if not self._api_key:
            return text
        key = self._api_key.get_secret_value()
        for form in {key, repr(key)[1:-1], key.encode("unicode_escape").decode("ascii")}:
            text = text.replace(form, _REDACTED)
        return text

    def _snippet(self, response: httpx.Response) -> str:
        try:
            text = response.text
        except Exception:  # an undecodable body is still an answer worth reporting
            text = repr(response.content[:SNIPPET_CHARS])
        text = " ".join(self._scrub(text).split())
        if len(text) > SNIPPET_CHARS:
            text = text[: SNIPPET_CHARS - 3] + "..."
        return text or "(empty body)"

    def _status_error(self, response: httpx.Response) -> LlmError:
        """The fault a non-200 answer means (:func:`~govrag.agent.llm_faults.classify`)."""
        where = response.headers.get("location")
        return self._classify(response.status_code, self._snippet(response), where)

    def _classify(self, status: int, snippet: str, location: str | None = None) -> LlmError:
        return classify(
            status, snippet, url=self.shown_url, model=self.model, max_tokens=self.max_tokens,
            api_key_env=self.api_key_env, key_sent=self._api_key is not None,
            location=self._scrub(location) if location else None,
        )  # fmt: skip

    def _protocol_error(self, what: str) -> LlmError:
        return LlmError(
            f"the LLM at {self.shown_url} answered outside the chat-completions protocol: {what}; "
            "check that llm.base_url points at an OpenAI-compatible /v1 API", fault="protocol",
        )  # fmt: skip

    # -- the reply ------------------------------------------------------------------------

    def _parse(self, response: httpx.Response) -> LlmReply:
        try:
            data = response.json()
        except (ValueError, RecursionError) as exc:  # not JSON, or nested past the parser
            raise self._protocol_error(
                f"HTTP 200 with a body that is not JSON: {self._snippet(response)}"
            ) from exc
        if not isinstance(data, dict):
            raise self._protocol_error(f"the body is a JSON {type(data).__name__}, not an object")
        choices = data.get("choices")
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict):
            error = data.get("error")
            shown = self._scrub(json.dumps(error, ensure_ascii=False))[:SNIPPET_CHARS]
            code = error.get("code") if isinstance(error, dict) else None
            if isinstance(code, str) and code.isdigit():
                code = int(code)
            if isinstance(code, int) and not isinstance(code, bool) and 300 <= code < 600:
                # A router (OpenRouter, LiteLLM) reports an upstream failure in a 200 body.
                raise self._classify(code, shown)
            if error and any(p in shown.lower() for p in QUOTA):
                raise self._classify(429, shown)
            detail = f" (error: {shown})" if error else ""
            raise self._protocol_error(f"no choices[0].message in the reply{detail}")
        model = data.get("model")
        finish = first.get("finish_reason") if isinstance(first, dict) else None
        usage = data.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        return LlmReply(
            text=self._text(message.get("content")),
            tool_calls=self._tool_calls(message),
            model=model if isinstance(model, str) and model else self.model,
            finish_reason=finish if isinstance(finish, str) else None,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
        )

    def _text(self, content: Any) -> str:
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        if isinstance(content, list) and all(  # content parts: [{"type": "text", ...}]
            isinstance(p, dict) and isinstance(p.get("text"), str) for p in content
        ):
            return "".join(p["text"] for p in content)
        raise self._protocol_error(
            f"choices[0].message.content is a {type(content).__name__}, not a string"
        )

    def _tool_calls(self, message: dict[str, Any]) -> tuple[ToolCall, ...]:
        raw_calls = message.get("tool_calls")
        if raw_calls is None:
            legacy = message.get("function_call")
            if legacy is None:
                return ()
            return (self._call(None, legacy, "choices[0].message.function_call"),)
        if not isinstance(raw_calls, list):
            raise self._protocol_error("choices[0].message.tool_calls is not a list")
        calls = []
        for i, entry in enumerate(raw_calls):
            where = f"choices[0].message.tool_calls[{i}]"
            if not isinstance(entry, dict):
                raise self._protocol_error(f"{where} is not an object")
            calls.append(self._call(entry.get("id"), entry.get("function"), f"{where}.function"))
        return tuple(calls)

    def _call(self, id: Any, function: Any, where: str) -> ToolCall:
        if not isinstance(function, dict):
            raise self._protocol_error(f"{where} is not an object")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise self._protocol_error(f"{where}.name is missing")
        arguments = function.get("arguments")
        if arguments is None:
            raw = ""
        elif isinstance(arguments, str):
            raw = arguments
        else:  # some servers send the object itself
            raw = json.dumps(arguments, ensure_ascii=False)
        call_id = id if isinstance(id, str) and id else f"call-{next(self._ids)}"
        return ToolCall.parse(call_id, name, raw)

"""Why a chat-completions server refused a call: the fault class and the advice that fits it.

A status code alone misleads: servers report a refused request as 400, 422 or even 500 (a
FastAPI server's request-validation error), a context overflow as 400 or 413, an exhausted
quota as 429. :func:`classify` reads the status with the server's own words and returns the
:class:`~govrag.errors.LlmError` whose ``fault`` says whether a retry can help
(:data:`~govrag.errors.TRANSIENT_LLM_FAULTS`) and whose message names the setting to fix.
"""

from __future__ import annotations

from govrag.errors import LlmError

#: What servers say when the prompt does not fit the model's context (llama.cpp, vLLM,
#: Ollama, OpenAI), lower-cased.
CONTEXT_OVERFLOW = ("context length", "context size", "context window", "maximum context",
                    "context_length_exceeded", "exceeds the available context", "n_ctx",
                    "too many tokens", "prompt is too long", "requested tokens",
                    "max_new_tokens", "input token count", "maximum number of tokens")  # fmt: skip
#: What a quota (not a rate) limit says: no retry helps until the account is fixed.
QUOTA = ("insufficient_quota", "exceeded your current quota", "quota exceeded", "billing")
#: What a request-validation error looks like in a body (FastAPI/pydantic servers answer some
#: with HTTP 500): the request govrag built was refused, and a retry cannot help.
VALIDATION = ("validation error", "field required", "input should be", "unprocessable",
              "invalid request", "invalid_request_error",
              "extra inputs are not permitted")  # fmt: skip


def classify(
    status: int,
    snippet: str,
    *,
    url: str,
    model: str,
    max_tokens: int,
    api_key_env: str | None,
    key_sent: bool,
    location: str | None = None,
) -> LlmError:
    """The fault an HTTP status means, read with the body: servers report a refused
    request as 400, 422 or even 500, a context overflow as 400 or 413, an exhausted quota
    as 429; what a retry cannot fix is never called transient."""
    head = f"the LLM at {url} answered HTTP {status}"
    said = snippet.lower()
    if 300 <= status < 400:
        to = f" to {location[:200]}" if location else ""
        return LlmError(
            f"{head} (a redirect{to}, not followed): llm.base_url (GOVRAG_LLM__BASE_URL) "
            "must be the API root itself, e.g. https (not http) and up to and including "
            "/v1", fault="not_found",
        )  # fmt: skip
    if status in (401, 403):
        if api_key_env:
            fix = (
                f"put a valid API key in the environment variable {api_key_env} "
                "(llm.api_key_env names it)"
            )
        else:
            fix = (
                "set llm.api_key_env (GOVRAG_LLM__API_KEY_ENV) to the environment variable "
                "holding a valid API key"
            )
        sent = "a key was sent" if key_sent else "no key was sent"
        return LlmError(
            f"{head} ({'unauthorized' if status == 401 else 'forbidden'}; {sent}): "
            f"{snippet}; {fix}, and check that the key may use model {model!r}",
            fault="auth",
        )
    if status == 404:
        return LlmError(
            f"{head} (not found): {snippet}; llm.base_url (GOVRAG_LLM__BASE_URL) must be "
            "the server's API root up to and including /v1 (e.g. "
            f"http://localhost:8000/v1), and llm.model ({model!r}) must be a model the "
            "server serves", fault="not_found",
        )  # fmt: skip
    if status == 408:
        return LlmError(
            f"{head} (the server timed out reading the request): {snippet}; retry later",
            fault="timeout",
        )  # fmt: skip
    if any(p in said for p in QUOTA):
        return LlmError(
            f"{head} (the account is out of quota): {snippet}; no retry helps until the "
            "account's quota or billing is fixed", fault="quota",
        )  # fmt: skip
    if status == 429:
        return LlmError(
            f"{head} (rate limited): {snippet}; retry later or raise the account's limits",
            fault="rate_limited",
        )  # fmt: skip
    if status in (400, 413, 422, 500) and any(p in said for p in CONTEXT_OVERFLOW):
        return LlmError(
            f"{head} (the prompt does not fit the model's context): {snippet}; lower "
            "[gateway] token_budget or the route's top_k, or start the server with a "
            f"larger context; llm.max_tokens ({max_tokens}) counts against it too",
            fault="context_overflow",
        )  # fmt: skip
    refused = status == 500 and any(p in said for p in VALIDATION)
    if 400 <= status < 500 or status == 501 or refused:
        return LlmError(
            f"{head} (the server refused the request): {snippet}; retrying will not "
            f"help: check llm.model ({model!r}) and the server's message above, and "
            "report it if it names a field govrag sent", fault="rejected",
        )  # fmt: skip
    return LlmError(
        f"{head} (server error or overloaded): {snippet}; the LLM server failed, retry "
        "later", fault="overloaded",
    )  # fmt: skip

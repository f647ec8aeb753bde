"""The embedder contract shared by every vector backend.

An embedder turns text into fixed-size, L2-normalised ``float32`` vectors, so the dot product of
two vectors is their cosine similarity. Indexes rely on that: they store and compare raw dot
products and never renormalise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from govrag.errors import InputError

#: A 2-D ``float32`` matrix (documents) or 1-D ``float32`` vector (a query).
FloatArray = npt.NDArray[np.float32]

#: Called after each batch with the number of texts embedded in that batch.
ProgressCallback = Callable[[int], None]


@runtime_checkable
class Embedder(Protocol):
    """Text-to-vector model.

    Attributes:
        name: Registry name of the embedder (``"hash"``, ``"minilm"``); stored with an index
            so a query is never compared against vectors from a different model.
        dim: Length of every vector the embedder returns.
    """

    name: str
    dim: int

    def embed_documents(
        self,
        texts: Sequence[str],
        *,
        batch_size: int = 64,
        progress: ProgressCallback | None = None,
    ) -> FloatArray:
        """Embed many texts.

        Args:
            texts: The texts, in order. A bare ``str`` is rejected (it is a sequence of
                characters, never what the caller meant).
            batch_size: Texts processed per batch; also the granularity of ``progress``.
            progress: Called after each batch with the number of texts in that batch.

        Returns:
            ``float32`` array of shape ``(len(texts), dim)``; row ``i`` embeds ``texts[i]``
            and has unit L2 norm. A row may be all zeros only when its text is empty
            (has nothing the embedder can represent).
        """
        ...

    def embed_query(self, text: str) -> FloatArray:
        """Embed one search query as a unit-norm ``float32`` vector of shape ``(dim,)``."""
        ...


def check_batch_args(texts: Sequence[str], batch_size: int) -> None:
    """Reject the two argument mistakes every embedder would otherwise mishandle silently.

    Raises:
        InputError: ``texts`` is a bare string, or ``batch_size`` is below 1.
    """
    if isinstance(texts, str):
        # A str is a Sequence[str] of characters, so the type checker cannot catch this.
        raise InputError(
            f"embed_documents() needs a sequence of texts, got a single string ({texts[:40]!r}); "
            "wrap it in a list or call embed_query()"
        )
    if batch_size < 1:
        raise InputError(f"batch_size must be at least 1, got {batch_size}")


def embedder_setting(name: str, dim: int) -> str:
    """The ``[embedder]`` keys that select the embedder stored as ``name`` with ``dim``:
    a remote model's name (``openai:<model>``) is two keys, not one."""
    kind, _, model = name.partition(":")
    keys = f"name = {kind!r}" + (f", model = {model!r}" if model else "")
    return f"[embedder] {keys}, dim = {dim}"

"""MiniLM query embeddings through ONNX Runtime, with neither torch nor transformers loaded.

A hybrid search embeds one short query. Loading torch and sentence-transformers for that costs
seconds and ~400 MB; ONNX Runtime plus the ``tokenizers`` package cost a fraction of both. The
pipeline reproduces what sentence-transformers runs for all-MiniLM-L6-v2 (the bundled
``modules.json``: Transformer -> Pooling -> Normalize):

1. Tokenise with the packaged ``tokenizer.json`` (BERT word pieces, lower-cased, ``[CLS]`` ...
   ``[SEP]``), truncated at the model's ``max_seq_length`` (``sentence_bert_config.json``: 256;
   the tokenizer file itself says 128, which sentence-transformers overrides, so we do too).
2. Run the exported encoder: token ids, attention mask, token types -> last hidden state.
3. Mean-pool the hidden states over the attended tokens (``1_Pooling/config.json``:
   ``pooling_mode_mean_tokens``), then L2-normalise (the ``Normalize`` module).

Whether the result matches torch is not assumed: :mod:`govrag.embed.onnx_cache` checks a probe
vector computed by torch at export time every time a cached model is opened, and the test suite
compares both pipelines on a few hundred varied texts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from govrag.embed.base import FloatArray
from govrag.errors import MissingExtraError

#: The exported graph's inputs and output, shared with the exporter.
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"
#: Texts per ONNX run (see :meth:`OnnxQueryEncoder.encode`).
BATCH = 8

_PURPOSE = "The 'minilm' embedder's fast query path"


def max_seq_length(model_dir: Path) -> int:
    """The window sentence-transformers uses for the bundled model (256 word pieces)."""
    config = json.loads((model_dir / "sentence_bert_config.json").read_text(encoding="utf-8"))
    return int(config["max_seq_length"])


def check_mean_pooling(model_dir: Path) -> None:
    """Refuse a model whose pooling is not plain mean pooling: this pipeline would be wrong.

    Raises:
        ValueError: the model's pooling config asks for something else.
    """
    config = json.loads((model_dir / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    modes = {key: value for key, value in config.items() if key.startswith("pooling_mode_")}
    if {key for key, on in modes.items() if on} != {"pooling_mode_mean_tokens"}:
        raise ValueError(f"{model_dir}: pooling {modes} is not mean pooling alone")


def mean_pool_normalise(hidden: Any, mask: Any) -> FloatArray:
    """Mean of ``hidden`` over the tokens ``mask`` attends to, L2-normalised per row."""
    weights = mask[..., None].astype(np.float32)
    summed = (np.asarray(hidden, dtype=np.float32) * weights).sum(axis=1)
    # As sentence-transformers: clamp the token count and the norm, never divide by zero.
    pooled = summed / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    normalised: FloatArray = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
    return normalised


class OnnxQueryEncoder:
    """The bundled MiniLM as an ONNX Runtime session plus its word-piece tokenizer.

    Args:
        onnx_path: An exported encoder (see :mod:`govrag.embed.onnx_export`).
        model_dir: The bundled model directory (tokenizer and configs).
        threads: ONNX Runtime intra-op threads; one query is a few milliseconds of work, and
            a thread pool sized to the machine costs more to start than it saves.

    Raises:
        MissingExtraError: onnxruntime or tokenizers is not installed.
        ValueError: the model's pooling is not mean pooling.
        Exception: whatever ONNX Runtime raises for a file it cannot load (callers treat the
            cache entry as corrupt).
    """

    def __init__(self, onnx_path: Path, model_dir: Path, *, threads: int = 1) -> None:
        try:
            import onnxruntime
        except ImportError as exc:
            raise MissingExtraError("onnxruntime", "semantic", _PURPOSE) from exc
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise MissingExtraError("tokenizers", "semantic", _PURPOSE) from exc
        check_mean_pooling(model_dir)
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_seq_length(model_dir))
        # Pad a batch to its longest text only; the packaged file pads every text to 128.
        self._tokenizer.no_padding()
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only: the graph's warnings are not the user's
        self._session = onnxruntime.InferenceSession(
            str(onnx_path), options, providers=["CPUExecutionProvider"]
        )

    def encode(self, texts: Sequence[str]) -> FloatArray:
        """Unit-norm ``float32`` rows of shape ``(len(texts), 384)``, one per text."""
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        out = np.zeros((len(texts), 384), dtype=np.float32)
        # Small batches of similar length: a batch is padded to its longest text, so 80 texts
        # in one batch cost as much as 80 of the longest (measured: 6.8 s against 1.8 s in
        # batches of 8 for a pack's sentences and chunks on two cores).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), BATCH):
            rows = order[start : start + BATCH]
            encodings = self._tokenizer.encode_batch([texts[i] for i in rows])
            feeds = {
                "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
            }
            (hidden,) = self._session.run([OUTPUT_NAME], feeds)
            out[rows] = mean_pool_normalise(hidden, feeds["attention_mask"])
        return out

"""Export the bundled MiniLM encoder to ONNX, once, with torch.

The exported graph is the transformer alone (token ids, attention mask, token types -> last
hidden state); pooling and normalisation stay in numpy (:mod:`govrag.embed.onnx_query`), where
they are a few lines that can be read against sentence-transformers' own.

Choices that make the graph correct for every query, not only for the example it was traced
with:

* the legacy TorchScript exporter (``dynamo=False``): it needs only torch and the ``onnx``
  package, while the dynamo exporter pulls in ``onnxscript`` as well;
* eager attention: transformers' SDPA path may drop an all-ones attention mask while tracing,
  which would bake "no padding" into the graph and break padded batches;
* an example batch with padding, and dynamic batch and sequence axes.

Everything here is imported lazily: it runs at ingest time (torch is loaded anyway) or on the
first query of a deployment whose cache is missing, never on the hot path.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from govrag.embed.base import FloatArray
from govrag.embed.onnx_query import INPUT_NAMES, OUTPUT_NAME, max_seq_length
from govrag.errors import MissingExtraError

#: Bump when anything below changes the exported graph: every cached export is then stale.
EXPORT_VERSION = 1
OPSET = 17
_PURPOSE = "Exporting the 'minilm' query encoder to ONNX"

#: Embedded by torch at export time and by ONNX Runtime whenever the export is opened; the two
#: must agree, so a damaged file or a runtime that computes differently is caught before use.
PROBE_TEXTS = (
    "What's our wire limit for corporate clients in the EU?",
    "ÜBER straße café: unicode, digits 12345 and punctuation?!",
    "",
)

#: The example batch the graph is traced with: two texts of different lengths, so the
#: shorter one is padded and the mask path is the general one.
_EXAMPLE = ("a short query", "a longer example sentence that forces padding of the other")


def _import_exporter() -> tuple[Any, Any]:
    """``(torch, transformers.AutoModel)``, or :class:`MissingExtraError` naming the extra."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise MissingExtraError("torch", "semantic", _PURPOSE) from exc
    try:
        # torch's TorchScript exporter imports it to serialise the model.
        import onnx  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError("onnx", "semantic", _PURPOSE) from exc
    return torch, AutoModel


def quiet_weight_loading() -> None:
    """Silence transformers' weight-loading progress bar (process-wide): govrag reports its
    own progress, and a bar on stderr would garble a command's output."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - a transformers without this module
        return
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def _example_inputs(torch: Any, model_dir: Path) -> tuple[Any, ...]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=max_seq_length(model_dir))
    tokenizer.no_padding()
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(list(_EXAMPLE))
    return tuple(
        torch.tensor([getattr(e, field) for e in encodings], dtype=torch.long)
        for field in ("ids", "attention_mask", "type_ids")
    )


def export_onnx(model_dir: Path, target: Path) -> str:
    """Write the bundled encoder's graph and weights to ``target``; returns torch's version.

    Raises:
        MissingExtraError: torch, transformers or onnx is not installed.
    """
    torch, auto_model = _import_exporter()
    quiet_weight_loading()
    model = auto_model.from_pretrained(
        str(model_dir), local_files_only=True, attn_implementation="eager"
    )
    model.eval()

    def last_hidden_state(input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
        out = model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        )
        return out.last_hidden_state

    # The exporter traces a Module; this one only forwards to the model (owned, not inherited).
    module = torch.nn.Module()
    module.model = model
    module.forward = last_hidden_state
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUT_NAMES, OUTPUT_NAME)}
    with warnings.catch_warnings(), torch.no_grad():
        # Tracer and deprecation warnings describe the tracing, not a problem of the user's.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            _example_inputs(torch, model_dir),
            str(target),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
            opset_version=OPSET,
            dynamo=False,
        )
    return str(torch.__version__)


def probe_vectors(reference: Callable[[Sequence[str]], FloatArray]) -> list[list[float]]:
    """:data:`PROBE_TEXTS` embedded by ``reference`` (the torch pipeline), as plain floats."""
    vectors = np.asarray(reference(PROBE_TEXTS), dtype=np.float32)
    return [[float(x) for x in row] for row in vectors]

"""Where a setting comes from: init arguments > environment > the deployment's ``govrag.toml``.

pydantic-settings calls the sources in that order and merges what they return with
``deep_update``: a nested table merges key by key, so ``GOVRAG_SEARCH__RRF_K=20`` changes
one key of the file's ``[search]`` and keeps the others. This module adds what the library's
own sources do not give a deployment:

- :class:`DeploymentFileSource` reads ``govrag.toml`` through :mod:`govrag.deployfile`
  (strict UTF-8, bounded nesting, one line naming the file per problem), never a bare
  TOML parser. pydantic-settings' ``TomlConfigSettingsSource`` would parse it with
  ``tomllib`` alone and fix the file's path when the class is defined, while the file
  belongs to whichever deployment the higher sources name.
- :class:`MaskedSource` wraps every secret (a store URL) as it leaves a source, so even the
  library's own debug log of each source's data (``PYDANTIC_SETTINGS_DEBUG``) shows it masked.
- :func:`origin` says which source supplied a refused value, so an error names the file or
  the environment it has to be fixed in.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from govrag import deployfile

CONFIG_FILE = "govrag.toml"
#: How an error names the environment as the source of a value.
ENVIRONMENT = "environment (GOVRAG_* variables)"


def _secret_type(annotation: Any) -> type[SecretStr] | None:
    """The secret class of a field typed ``S`` or ``S | None`` (``S`` a ``SecretStr``)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, SecretStr):
            return candidate
    return None


def _model_type(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def mask_secrets(data: Mapping[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """``data`` (raw values for ``model``) with each text value of a secret field wrapped in
    its secret class. Validation still checks it: a secret class validates instances too."""
    out = dict(data)
    for name, field in model.model_fields.items():
        value = out.get(name)
        if value is None:
            continue
        secret = _secret_type(field.annotation)
        if secret is not None and isinstance(value, str):
            out[name] = secret(value)
            continue
        nested = _model_type(field.annotation)
        if nested is not None and isinstance(value, Mapping):
            out[name] = mask_secrets(value, nested)
    return out


class MaskedSource(PydanticBaseSettingsSource):
    """Another source (init arguments, the environment) with its secrets wrapped."""

    def __init__(self, inner: PydanticBaseSettingsSource) -> None:
        super().__init__(inner.settings_cls)
        self.inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.inner.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        return mask_secrets(self.inner(), self.settings_cls)

    def __repr__(self) -> str:
        return f"MaskedSource({self.inner!r})"


def read_config(root: Path) -> dict[str, Any]:
    """The values of ``<root>/govrag.toml`` (none when there is no file), read strictly.
    A ``deployment`` key is dropped: the directory is where the file is, not what it says."""
    path = root / CONFIG_FILE
    if not path.exists():
        return {}
    values = deployfile.read_toml(path)
    values.pop("deployment", None)
    return values


class DeploymentFileSource(PydanticBaseSettingsSource):
    """``<deployment>/govrag.toml``, the lowest-priority source.

    The deployment is what the sources above set (``load_settings`` passes it as an init
    argument; ``GOVRAG_DEPLOYMENT`` sets it too), so ``Settings(deployment=d)`` is the
    settings of ``d``. Settings built with no deployment named read no file.
    """

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # The whole file is one value (see __call__); no field is looked up on its own.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        root = self.current_state.get("deployment")
        if root is None:
            return {}
        return mask_secrets(read_config(Path(root)), self.settings_cls)

    def __repr__(self) -> str:
        return f"DeploymentFileSource({CONFIG_FILE})"


def _holds(data: Any, loc: Sequence[str | int]) -> int:
    """How many leading parts of ``loc`` lead to a value in ``data``."""
    depth = 0
    for part in loc:
        listed = isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        if not listed and not (isinstance(data, Mapping) and part in data):
            break
        data = data[part]
        depth += 1
    return depth


def origin(loc: Sequence[str | int], layers: Sequence[tuple[str, Any]], fallback: str) -> str:
    """The name of the layer (highest priority first) that supplied the value at ``loc``: the
    one holding the most of its path, ties to the higher. ``fallback`` when none holds any
    (a required field nobody set)."""
    best, found = fallback, 0
    for name, data in layers:
        depth = _holds(data, loc)
        if depth > found:
            best, found = name, depth
    return best

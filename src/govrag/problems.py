"""Collecting every problem of a deployment directory before reporting any.

``govrag config check`` lists all that is wrong at once, each with its file, field and a fix,
so an operator fixes a deployment in one pass instead of one error per run. The route table
(:mod:`govrag.routes.config`) and the policy bundles (:mod:`govrag.policy.bundle`) are both
read through one :class:`Collector`; it lives in a module of its own so the policy layer
can report into it without importing the route table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from govrag import deployfile
from govrag.errors import ConfigFileError, validation_problems

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a deployment file."""

    path: str
    field: str
    message: str
    warning: bool = False

    def __str__(self) -> str:
        where = f"{self.path}: {self.field}" if self.field else self.path
        return f"{'warning' if self.warning else 'error'}: {where}: {self.message}"


class Collector:
    """The problems found so far under ``root``; files are read through it so none raises."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.problems: list[Problem] = []
        #: Folders (``manifests``, ...) with a file that did not load: a reference into
        #: them that finds nothing is that file's problem, already reported, not another.
        self.incomplete: set[str] = set()

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def add(self, path: Path, fld: str, message: str, *, warning: bool = False) -> None:
        self.problems.append(Problem(self.rel(path), fld, message, warning))

    def failed(self, path: Path) -> None:
        """``path`` (a file or a bundle directory) did not load."""
        self.incomplete.add(self.rel(path).split("/", 1)[0])

    def read_json(self, path: Path, *, max_bytes: int = deployfile.MAX_FILE_BYTES) -> Any:
        """Strict JSON (see :mod:`govrag.deployfile`); ``None`` and a problem otherwise."""
        try:
            return deployfile.read_json(path, max_bytes=max_bytes)
        except ConfigFileError as exc:
            self.add(path, "", exc.detail)
            self.failed(path)
        return None

    def read_text(self, path: Path, *, max_bytes: int = deployfile.MAX_FILE_BYTES) -> str | None:
        """UTF-8 text; ``None`` and a problem otherwise."""
        try:
            return deployfile.read_text(path, max_bytes=max_bytes)
        except ConfigFileError as exc:
            self.add(path, "", exc.detail)
            self.failed(path)
        return None

    def read_cedar(self, path: Path) -> str | None:
        try:
            return deployfile.read_cedar(path)
        except ConfigFileError as exc:
            self.add(path, "", exc.detail)
        return None

    def model(self, model: type[M], data: Any, path: Path, prefix: str = "") -> M | None:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            for loc, message in validation_problems(exc):
                self.add(path, ".".join(p for p in (prefix, loc) if p), message)
            self.failed(path)
        return None

"""Load and check a deployment's routes, manifests, workflows and policy bundles.

Layout (beside ``govrag.toml``)::

    routes/*.json             one route row, or an array of route rows, per file
    manifests/*.json          one tool manifest per file
    workflows/*.json          one workflow per file
    policies/<bundle>/        bundle.json (name, version), *.cedar, optional *.cedarschema

Every problem is collected before anything is reported, so ``govrag config check`` lists
them all at once, each with its file, field and a fix. Warnings (a configuration that is
legal but probably not meant) do not stop loading.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from govrag import deployfile
from govrag.errors import ConfigError, ConfigFileError, validation_problems
from govrag.routes.models import (
    NO_MANIFEST,
    BundleInfo,
    Manifest,
    Route,
    Workflow,
)

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


@dataclass(frozen=True)
class PolicyBundle:
    name: str
    version: str
    path: Path
    #: Every ``*.cedar`` file of the bundle, concatenated in name order.
    policies: str
    schema: str | None = None
    #: Route ``policy_profile`` names this bundle serves besides its own name.
    profiles: tuple[str, ...] = ()

    @property
    def policy_version(self) -> str:
        """What decisions record, e.g. ``pgar.retrieval.corpus/v3``."""
        return f"{self.name}/{self.version}"


@dataclass(frozen=True)
class DeploymentConfig:
    routes: dict[str, Route]
    manifests: dict[str, Manifest]
    workflows: dict[str, Workflow]
    bundles: dict[str, PolicyBundle]
    warnings: tuple[Problem, ...] = ()
    #: Content hash of the route table: a session records the version it pinned.
    route_table_version: str = field(default="")

    def bundle_for(self, profile: str) -> PolicyBundle | None:
        """The bundle a route's ``policy_profile`` (a bundle name or a declared profile) names."""
        return _bundle_for(self.bundles, profile)


def _bundle_for(bundles: dict[str, PolicyBundle], profile: str) -> PolicyBundle | None:
    if profile in bundles:
        return bundles[profile]
    return next((b for b in bundles.values() if profile in b.profiles), None)


class _Collector:
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

    def read_json(self, path: Path) -> Any:
        """Strict JSON (see :mod:`govrag.deployfile`); ``None`` and a problem otherwise."""
        try:
            return deployfile.read_json(path)
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


def _json_files(root: Path, folder: str) -> list[Path]:
    directory = root / folder
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


def _load_routes(c: _Collector) -> dict[str, tuple[Route, Path]]:
    routes: dict[str, tuple[Route, Path]] = {}
    for path in _json_files(c.root, "routes"):
        data = c.read_json(path)
        if data is None:
            continue
        rows = data if isinstance(data, list) else [data]
        for i, row in enumerate(rows):
            prefix = f"[{i}]" if isinstance(data, list) else ""
            route = c.model(Route, row, path, prefix)
            if route is None:
                continue
            if route.route_id in routes:
                other = c.rel(routes[route.route_id][1])
                c.add(
                    path,
                    f"{prefix}.route_id".lstrip("."),
                    f"duplicate route id {route.route_id!r} (also in {other}); route ids are "
                    "unique across routes/",
                )
                continue
            routes[route.route_id] = (route, path)
    return routes


def _load_keyed(c: _Collector, folder: str, model: type[M], key: str) -> dict[str, tuple[M, Path]]:
    out: dict[str, tuple[M, Path]] = {}
    for path in _json_files(c.root, folder):
        data = c.read_json(path)
        if data is None:
            continue
        item = c.model(model, data, path)
        if item is None:
            continue
        ident = str(getattr(item, key))
        if ident in out:
            c.add(path, key, f"duplicate {key} {ident!r} (also in {c.rel(out[ident][1])})")
            continue
        out[ident] = (item, path)
    return out


def _check_tools(c: _Collector, manifests: dict[str, tuple[Manifest, Path]]) -> None:
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    for manifest, path in manifests.values():
        names = [t.name for t in manifest.tools]
        for i, tool in enumerate(manifest.tools):
            if names.count(tool.name) > 1 and names.index(tool.name) != i:
                c.add(path, f"tools.{i}.name", f"tool {tool.name!r} is listed twice")
            try:
                validator_for(tool.parameters).check_schema(tool.parameters)
            except SchemaError as exc:
                c.add(path, f"tools.{i}.parameters", f"is not a valid JSON Schema: {exc.message}")
            if tool.parameters.get("type", "object") != "object":
                c.add(
                    path,
                    f"tools.{i}.parameters.type",
                    'tool arguments are an object; set "type": "object"',
                )


#: The bundle shipped with govrag; a ``policies/`` bundle of the same name replaces it.
DEFAULT_BUNDLE = "pgar.retrieval.corpus"


def _builtin_bundle_dir() -> Path:
    from importlib import resources

    return Path(str(resources.files("govrag.policy") / "bundles" / DEFAULT_BUNDLE))


def default_bundle() -> PolicyBundle:
    """The bundle shipped with govrag (``pgar.retrieval.corpus`` v2)."""
    c = _Collector(_builtin_bundle_dir())
    bundle = _read_bundle(c, c.root)
    if bundle is None:  # a broken installation, not a user error
        raise ConfigError(f"the built-in policy bundle is damaged: {c.problems}")
    return bundle


def _read_bundle(c: _Collector, directory: Path) -> PolicyBundle | None:
    import cedarpy

    meta = directory / "bundle.json"
    if not meta.is_file():
        c.add(directory, "", 'has no bundle.json; add {"name": ..., "version": ...}')
        c.failed(directory)
        return None
    data = c.read_json(meta)
    info = c.model(BundleInfo, data, meta) if data is not None else None
    # Every file of the folder is read or refused, never skipped: a forbid saved under a
    # name the loader passed over would silently permit what it was written to refuse.
    files: list[Path] = []
    schemas: list[Path] = []
    for entry in sorted(directory.iterdir()):
        suffix = entry.suffix.casefold()
        if entry.name.startswith(".") or entry == meta:
            continue
        if entry.is_file() and suffix == ".cedar":
            files.append(entry)
        elif entry.is_file() and suffix == ".cedarschema":
            schemas.append(entry)
        else:
            c.add(entry, "", "is neither a policy (*.cedar), a schema (*.cedarschema) nor "
                  "bundle.json, and would not be read; rename or remove it")  # fmt: skip
            c.failed(directory)
    if len(schemas) > 1:
        c.add(directory, "", f"holds {len(schemas)} *.cedarschema files; keep one")
        c.failed(directory)
    if not files:
        c.add(directory, "", "holds no *.cedar policy file")
    texts = []
    for file in files:
        text = c.read_cedar(file)  # checked first: deep nesting crashes Cedar's parser
        if text is None:
            continue
        try:
            cedarpy.policies_to_json_str(text)
        except ValueError as exc:
            c.add(file, "", f"is not valid Cedar: {exc}")
        texts.append(text)
    schema = c.read_cedar(schemas[0]) if len(schemas) == 1 else None
    if info is None or not files or len(texts) < len(files) or (schemas and schema is None):
        c.failed(directory)
        return None
    return PolicyBundle(
        info.name, info.version, directory, "\n".join(texts), schema, tuple(info.profiles)
    )


def _load_bundles(c: _Collector) -> dict[str, PolicyBundle]:
    bundles: dict[str, PolicyBundle] = {}
    base = c.root / "policies"
    for directory in sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []:
        bundle = _read_bundle(c, directory)
        if bundle is None:
            continue
        if bundle.name in bundles:
            c.add(directory / "bundle.json", "name", f"duplicate bundle name {bundle.name!r}")
            continue
        for profile in bundle.profiles:
            other = _bundle_for(bundles, profile)
            if other is not None:
                c.add(
                    directory / "bundle.json",
                    "profiles",
                    f"profile {profile!r} is already served by bundle {other.name!r}; "
                    "a profile names one bundle",
                )
        bundles[bundle.name] = bundle
    if DEFAULT_BUNDLE not in bundles:
        bundles[DEFAULT_BUNDLE] = default_bundle()
    return bundles


def _cross_check(
    c: _Collector,
    routes: dict[str, tuple[Route, Path]],
    manifests: dict[str, tuple[Manifest, Path]],
    workflows: dict[str, tuple[Workflow, Path]],
    bundles: dict[str, PolicyBundle],
) -> None:
    for route, path in routes.values():
        profile = route.policy_profile
        if (
            profile is not None
            and _bundle_for(bundles, profile) is None
            and "policies" not in c.incomplete
        ):
            c.add(
                path,
                "policy_profile",
                _missing("policy bundle", profile, bundles, "policies/")
                + '; name a bundle (or a profile its bundle.json lists under "profiles"), '
                "or omit policy_profile to use the deployment's [policy] bundle",
            )
        retrieval = route.retrieval
        scope = set(retrieval.scope)
        manifest = None
        if route.tool_manifest != NO_MANIFEST:
            found = manifests.get(route.tool_manifest)
            if found is None and "manifests" not in c.incomplete:
                c.add(
                    path,
                    "tool_manifest",
                    _missing("manifest", route.tool_manifest, manifests, "manifests/"),
                )
            elif found is not None:
                manifest = found[0]
        if retrieval.mode == "tool" and not scope:
            c.add(
                path,
                "retrieval.scope",
                f"route {route.route_id!r} is in tool mode with an empty scope: every "
                "retrieve will be denied",
                warning=True,
            )
        if retrieval.mode == "none" and scope:
            c.add(
                path,
                "retrieval.scope",
                f"route {route.route_id!r} has mode none: its scope is never used",
                warning=True,
            )
        for tool in manifest.tools if manifest else ():
            if tool.corpus is not None and tool.corpus not in scope and retrieval.mode != "none":
                c.add(
                    path,
                    "retrieval.scope",
                    f"tool {tool.name!r} of manifest {route.tool_manifest!r} is bound to "
                    f"corpus {tool.corpus!r}, which is not in the scope of route "
                    f"{route.route_id!r}; add the corpus to the scope or unbind the tool",
                )
        if route.workflow_id is None:
            continue
        found_wf = workflows.get(route.workflow_id)
        if found_wf is None:
            if "workflows" not in c.incomplete:
                c.add(
                    path,
                    "workflow_id",
                    _missing("workflow", route.workflow_id, workflows, "workflows/"),
                )
            continue
        workflow, wf_path = found_wf
        for i, stage in enumerate(workflow.stages):
            if stage.corpus is not None and stage.corpus not in scope:
                c.add(
                    wf_path,
                    f"stages.{i}.corpus",
                    f"corpus {stage.corpus!r} of stage {stage.id!r} is not in the scope of "
                    f"route {route.route_id!r} ({c.rel(path)}: retrieval.scope = "
                    f"{sorted(scope)}); a workflow cannot widen scope",
                )
            for j, name in enumerate(_stage_tools(stage)):
                if manifest is not None and manifest.tool(name) is None:
                    fld = f"stages.{i}.tool" if j == 0 and stage.tool else f"stages.{i}.allowlist"
                    c.add(
                        wf_path,
                        fld,
                        f"tool {name!r} of stage {stage.id!r} is not in manifest "
                        f"{manifest.manifest_id!r} of route {route.route_id!r}",
                    )


def _stage_tools(stage: Any) -> Iterator[str]:
    if stage.tool:
        yield stage.tool
    yield from stage.allowlist or ()


def _missing(kind: str, name: str, known: dict[str, Any], folder: str) -> str:
    listing = ", ".join(repr(k) for k in sorted(known)) or "none"
    return f"no {kind} {name!r} in {folder} (known: {listing})"


def check_config(root: Path) -> tuple[DeploymentConfig | None, list[Problem]]:
    """Every problem of the deployment at ``root``; the config when there is no error."""
    c = _Collector(root)
    routes = _load_routes(c)
    manifests = _load_keyed(c, "manifests", Manifest, "manifest_id")
    workflows = _load_keyed(c, "workflows", Workflow, "workflow_id")
    _check_tools(c, manifests)
    bundles = _load_bundles(c)
    _cross_check(c, routes, manifests, workflows, bundles)
    if any(not p.warning for p in c.problems):
        return None, c.problems
    table = json.dumps(
        [
            r.model_dump(mode="json")
            for r, _ in sorted(routes.values(), key=lambda x: x[0].route_id)
        ],
        sort_keys=True,
        separators=(",", ":"),
    )
    config = DeploymentConfig(
        routes={k: r for k, (r, _) in routes.items()},
        manifests={k: m for k, (m, _) in manifests.items()},
        workflows={k: w for k, (w, _) in workflows.items()},
        bundles=bundles,
        warnings=tuple(c.problems),
        route_table_version="sha256:" + hashlib.sha256(table.encode()).hexdigest()[:16],
    )
    return config, c.problems


def load_config(root: Path) -> DeploymentConfig:
    """The deployment's config; :class:`ConfigError` listing every error otherwise."""
    config, problems = check_config(root)
    if config is None:
        raise ConfigError(describe_problems(root, problems))
    return config


def describe_problems(root: Path, problems: list[Problem]) -> str:
    """One message listing every error (not the warnings) of the deployment at ``root``:
    one line when there is one error (the file relative to the deployment directory)."""
    errors = [p for p in problems if not p.warning]
    if len(errors) == 1:
        p = errors[0]
        where = f"{root / p.path}: {p.field}" if p.field else str(root / p.path)
        return f"{where}: {p.message}"
    lines = "\n".join(str(p) for p in errors)
    return f"{len(errors)} problems in the deployment at {root}:\n{lines}"

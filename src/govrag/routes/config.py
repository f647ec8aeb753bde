"""Load and check a deployment's routes, manifests, workflows and policy bundles.

Layout (beside ``govrag.toml``)::

    routes/*.json             one route row, or an array of route rows, per file
    manifests/*.json          one tool manifest per file
    workflows/*.json          one workflow per file
    policies/<bundle>/        bundle.json (name, version), *.cedar, optional *.cedarschema
    prompts/<prompt_id>.txt   a route's own instructions to the model
    schemas/<schema_id>.json  a route's output schema (the shape of its answers)

Every problem is collected before anything is reported, so ``govrag config check`` lists
them all at once, each with its file, field and a fix. Warnings (a configuration that is
legal but probably not meant) do not stop loading.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from govrag.errors import ConfigError
from govrag.eval.suite import SUITES_DIR
from govrag.policy.bundle import PolicyBundle, bundle_for, load_bundles
from govrag.problems import Collector, Problem
from govrag.routes.models import NO_MANIFEST, Manifest, Route, Workflow
from govrag.routes.prompts import RoutePrompt, load_prompts, missing_prompt
from govrag.routes.schemas import load_schemas, missing_schema
from govrag.validation.structured import OutputSchema

__all__ = ["DeploymentConfig", "check_config", "describe_problems", "load_config"]

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class DeploymentConfig:
    routes: dict[str, Route]
    manifests: dict[str, Manifest]
    workflows: dict[str, Workflow]
    bundles: dict[str, PolicyBundle]
    warnings: tuple[Problem, ...] = ()
    #: ``prompts/<prompt_id>.txt``: the routes' own instructions to the model.
    prompts: dict[str, RoutePrompt] = field(default_factory=dict)
    #: ``schemas/<output_schema_id>.json``: the shapes of the routes' structured answers.
    schemas: dict[str, OutputSchema] = field(default_factory=dict)
    #: Content hash of the route table: a session records the version it pinned.
    route_table_version: str = field(default="")

    def bundle_for(self, profile: str) -> PolicyBundle | None:
        """The bundle a route's ``policy_profile`` (a bundle name or a declared profile) names."""
        return bundle_for(self.bundles, profile)

    def scoped_corpora(self) -> set[str]:
        """Every corpus id some route's scope names."""
        return {c for r in self.routes.values() for c in r.retrieval.scope}


def _json_files(root: Path, folder: str) -> list[Path]:
    directory = root / folder
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


def _load_routes(c: Collector) -> dict[str, tuple[Route, Path]]:
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


def _load_keyed(c: Collector, folder: str, model: type[M], key: str) -> dict[str, tuple[M, Path]]:
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


def _check_tools(c: Collector, manifests: dict[str, tuple[Manifest, Path]]) -> None:
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


def _cross_check(
    c: Collector,
    routes: dict[str, tuple[Route, Path]],
    manifests: dict[str, tuple[Manifest, Path]],
    workflows: dict[str, tuple[Workflow, Path]],
    bundles: dict[str, PolicyBundle],
) -> None:
    for route, path in routes.values():
        profile = route.policy_profile
        if (
            profile is not None
            and bundle_for(bundles, profile) is None
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
        suite = route.eval_suite_id
        # Only a missing file is this warning; one that cannot be read is an error of its
        # own (eval.suite.suite_problems), not "there is none".
        if suite is not None and not os.path.lexists(c.root / SUITES_DIR / f"{suite}.jsonl"):
            c.add(path, "eval_suite_id",
                  f"route {route.route_id!r} binds eval suite {suite!r}, but there is no "
                  f"{SUITES_DIR}/{suite}.jsonl; write it (docs/eval.md) or drop eval_suite_id",
                  warning=True)  # fmt: skip
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
    c = Collector(root)
    routes = _load_routes(c)
    manifests = _load_keyed(c, "manifests", Manifest, "manifest_id")
    workflows = _load_keyed(c, "workflows", Workflow, "workflow_id")
    _check_tools(c, manifests)
    bundles = load_bundles(c)
    prompts = load_prompts(c)
    schemas = load_schemas(c)
    _cross_check(c, routes, manifests, workflows, bundles)
    for route, path in routes.values():
        missing_prompt(c, path, route.route_id, route.prompt_id, prompts)
        missing_schema(c, path, route.route_id, route.output_schema_id, schemas)
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
        prompts=prompts,
        schemas=schemas,
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

"""Policy bundles: the Cedar policies a deployment's PDP evaluates, with a name and version.

A bundle is a folder ``policies/<bundle>/`` holding ``bundle.json`` (name, version, the route
``policy_profile`` names it serves), one or more ``*.cedar`` files and at most one
``*.cedarschema``. Decisions record ``<name>/<version>``, so an examiner knows which rules
decided. The policy layer owns its bundles: routes name a bundle by profile and import this
module, never the reverse. Problems are reported into a :class:`~govrag.problems.Collector`,
so ``govrag config check`` lists a bundle's problems beside the route table's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from govrag.errors import ConfigError
from govrag.problems import Collector
from govrag.types import Ident


class BundleInfo(BaseModel):
    """``policies/<bundle>/bundle.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Ident
    version: Ident
    #: Route ``policy_profile`` names this bundle serves (besides its name).
    profiles: tuple[Ident, ...] = ()


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


def bundle_for(bundles: dict[str, PolicyBundle], profile: str) -> PolicyBundle | None:
    """The bundle a route's ``policy_profile`` (a bundle name or a declared profile) names."""
    if profile in bundles:
        return bundles[profile]
    return next((b for b in bundles.values() if profile in b.profiles), None)


#: The bundle shipped with govrag; a ``policies/`` bundle of the same name replaces it.
DEFAULT_BUNDLE = "pgar.retrieval.corpus"


def _builtin_bundle_dir() -> Path:
    from importlib import resources

    return Path(str(resources.files("govrag.policy") / "bundles" / DEFAULT_BUNDLE))


def default_bundle() -> PolicyBundle:
    """The bundle shipped with govrag (``pgar.retrieval.corpus`` v2)."""
    c = Collector(_builtin_bundle_dir())
    bundle = read_bundle(c, c.root)
    if bundle is None:  # a broken installation, not a user error
        raise ConfigError(f"the built-in policy bundle is damaged: {c.problems}")
    return bundle


def read_bundle(c: Collector, directory: Path) -> PolicyBundle | None:
    """The bundle in ``directory``; ``None`` and its problems in ``c`` otherwise."""
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


def load_bundles(c: Collector) -> dict[str, PolicyBundle]:
    """Every bundle under ``c.root / "policies"``, plus the built-in one unless replaced."""
    bundles: dict[str, PolicyBundle] = {}
    base = c.root / "policies"
    for directory in sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []:
        bundle = read_bundle(c, directory)
        if bundle is None:
            continue
        if bundle.name in bundles:
            c.add(directory / "bundle.json", "name", f"duplicate bundle name {bundle.name!r}")
            continue
        for profile in bundle.profiles:
            other = bundle_for(bundles, profile)
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

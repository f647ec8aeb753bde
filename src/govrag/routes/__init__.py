"""Routes, tool manifests, workflows and policy bundles of a deployment (seed 003)."""

from __future__ import annotations

from govrag.routes.config import DeploymentConfig, check_config, load_config
from govrag.routes.models import Manifest, Route, Stage, Tool, Workflow

__all__ = [
    "DeploymentConfig", "Manifest", "Route", "Stage", "Tool", "Workflow", "check_config",
    "load_config",
]  # fmt: skip

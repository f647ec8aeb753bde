"""Routes, tool manifests, workflows and policy bundles of a deployment (seed 003)."""

from __future__ import annotations

from govrag.policy.bundle import PolicyBundle
from govrag.problems import Problem
from govrag.routes.config import DeploymentConfig, check_config, load_config
from govrag.routes.models import Manifest, Route, Stage, Tool, Workflow
from govrag.types import Retrieval

__all__ = [
    "DeploymentConfig", "Manifest", "PolicyBundle", "Problem", "Retrieval", "Route", "Stage",
    "Tool", "Workflow", "check_config", "load_config",
]  # fmt: skip

"""The deployment's route table, tool manifests and workflows, as validated models.

Shapes follow seed ``003_*.txt`` (route contract) and DESIGN.md 2.4. Every model forbids
unknown fields, so a misspelt key is an error naming the file and field, never a silently
ignored setting. The policy bundle's ``bundle.json`` model is the policy layer's
(:mod:`govrag.policy.bundle`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from govrag.types import ACTION_GROUP_PREFIX, Ident, Retrieval, RiskTier, ToolKind

# ``Retrieval`` (a route's permit) and ``Ident`` are shared value types the PEP names too; they
# are re-exported here because a route row is where an operator writes them.
__all__ = [
    "NO_MANIFEST", "Ident", "LlmRole", "Manifest", "Retrieval", "Route", "Stage", "Tool",
    "ToolKind", "Workflow",
]  # fmt: skip

#: A route whose manifest is this has no tools.
NO_MANIFEST = "none"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Route(_Model):
    """A route row: the one control for retrieval on requests routed to it."""

    route_id: Ident
    intent: str | None = None
    model_profile: str | None = None
    tool_manifest: Ident = NO_MANIFEST
    policy_profile: str | None = None
    #: Omitted: no retrieval (mode none).
    retrieval: Retrieval = Retrieval()
    workflow_id: Ident | None = None
    prompt_id: str | None = None
    output_schema_id: str | None = None
    eval_suite_id: str | None = None
    #: What a failed validation does: ``abstain`` (the caller gets the reason), or
    #: ``escalate`` (an ``escalation`` audit event names the failure and ``escalation_queue``,
    #: the caller gets a fixed message, ``govrag escalations`` lists it for people).
    on_validation_failure: Literal["abstain", "escalate"] = "abstain"
    escalation_queue: Ident = "review"

    @field_validator("retrieval", mode="before")
    @classmethod
    def _one_object(cls, value: object) -> object:
        if isinstance(value, list):
            raise ValueError(
                "retrieval must be one object, not an array: a route has one mode; put every "
                'corpus it may touch in one "scope" list (see the route contract)'
            )
        return {"mode": "none"} if value is None else value


class Tool(_Model):
    """A tool the LLM may propose. Only name, description and parameters reach the model."""

    name: Ident
    description: str = ""
    #: JSON Schema of the arguments (an object schema).
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    #: The action the PDP decides on (e.g. ``retrieve_documents``, ``policy_search``).
    pdp_action: Ident
    risk_tier: RiskTier = "low"
    kind: ToolKind = "other"
    #: A corpus the tool is bound to; its calls target it whatever the arguments say.
    corpus: Ident | None = None

    @field_validator("pdp_action")
    @classmethod
    def _not_a_group(cls, value: str) -> str:
        if value.startswith(ACTION_GROUP_PREFIX):
            raise ValueError(
                f"{value!r} starts with {ACTION_GROUP_PREFIX!r}, which names govrag's action "
                "groups in Cedar (kind:retrieve, ...); name the tool's own action"
            )
        return value


class Manifest(_Model):
    manifest_id: Ident
    version: str = Field(min_length=1, max_length=64)
    tools: tuple[Tool, ...] = ()

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)


LlmRole = Literal["none", "query_formulation", "synthesis"]


class Stage(_Model):
    id: Ident
    tool: Ident | None = None
    corpus: Ident | None = None
    llm_role: LlmRole = "none"
    #: Pattern 3: the tools the LLM may propose in this stage.
    allowlist: tuple[Ident, ...] | None = None


class Workflow(_Model):
    workflow_id: Ident
    stages: tuple[Stage, ...] = Field(min_length=1)

    @field_validator("stages")
    @classmethod
    def _unique_ids(cls, value: tuple[Stage, ...]) -> tuple[Stage, ...]:
        ids = [s.id for s in value]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"stage id {duplicates[0]!r} is used twice; stage ids are unique")
        return value

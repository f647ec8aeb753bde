"""The agentic app: governed retrieves now; the route-pattern orchestrator and LLM adapters next.

Nothing here imports the store or the gateway: the app reaches search only through the PEP.
"""

from __future__ import annotations

from govrag.agent.retrieve import CorpusDecision, GovernedResult, GovernedSearch

__all__ = ["CorpusDecision", "GovernedResult", "GovernedSearch"]

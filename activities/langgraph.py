"""Ledgered graph nodes for LangGraph graphs run by Temporal's ``temporalio-langgraph``.

``temporalio.langgraph.LangGraphPlugin`` runs each graph node whose metadata says
``execute_in="activity"`` as one activity, named ``{graph}.{node}`` after the name the
graph is registered under and the node's name. This module gives the rules that put
those activities through the ledger; users add one plugin and change no node::

    from temporalio.langgraph import LangGraphPlugin
    from temporal_ledger.activities import LedgerPlugin
    from temporal_ledger.activities.langgraph import activity_rules

    client = await Client.connect(
        "localhost:7233",
        plugins=[
            LangGraphPlugin(graphs={"support": builder}),
            LedgerPlugin(
                "sqlite:///ledger.db",
                ledger_activities=activity_rules(
                    "support", model_nodes=["agent"], tool_nodes=["tools"]
                ),
            ),
        ],
    )

Each listed node's activity is then keyed by workflow, first execution run and call
number (see ``activities._generic``): a worker crash, an activity retry or ``temporal
workflow reset`` replays the node's recorded return value instead of running it again.

* Model nodes are retry-safe: they ask a model and change nothing in the world, so an
  attempt whose outcome is unknown may ask again. Their recorded output, tool call ids
  included, is what a reset run gets back, so the tool node after it sees the same
  calls.
* Tool nodes are not (``tools_retry_safe=False``): a node that started and never
  reported, or failed after it may have acted, is not run a second time. The graph's
  workflow waits instead, parked like a ``run_tool`` step (search attribute
  ``LedgerOpenEffects``, query ``open_effects``, update ``reconcile``), until an
  operator answers with the node's own return value (its state update).

The unit is the node, because the node is Temporal's activity: two tool calls in one
tool node are one ledgered call under one key, and an unknown effect parks the whole
node. A graph that wants one key per tool call gives each effectful tool its own node.

The policy's performer is the workflow type and the capability is
``activity.<graph>.<node>``, e.g. ``"SupportWorkflow" = ["activity.support.*"]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ..workflows._seam import PLACEHOLDER
from ._generic import LedgeredActivity

__all__ = ["activity_rules"]


def activity_rules(
    graph: str,
    *,
    model_nodes: Iterable[str] = (),
    tool_nodes: Iterable[str] = (),
    tools_retry_safe: bool = False,
) -> list[LedgeredActivity]:
    """The ledgered node activities of the graph registered as ``graph``, for
    ``LedgerPlugin(ledger_activities=...)``.

    Put the plugin on ``Client.connect(plugins=[...])`` (workers inherit it) next to
    ``LangGraphPlugin``; a worker that runs only workflows needs it too, because it stamps
    each scheduled activity with the run identity the key is built from. Only nodes whose
    metadata has ``execute_in="activity"`` are activities; nodes run in the workflow are
    replayed by Temporal itself.

    Args:
        graph: The name the graph is registered under in ``LangGraphPlugin(graphs=...)``.
        model_nodes: Nodes that ask a model (or otherwise change nothing): retry-safe.
        tool_nodes: Nodes that act on the world (call tools): an unknown effect parks.
        tools_retry_safe: The tool nodes' far sides deduplicate by the key: an unknown
            effect is tried again instead of parking.

    Returns:
        The rules, for ``LedgerPlugin(ledger_activities=...)``.

    Raises:
        ValueError: No graph name, no node, or a node listed as both kinds.
    """
    if not isinstance(graph, str) or not graph:
        raise ValueError("activity_rules needs the graph's registered name")
    models, tools = list(model_nodes), list(tool_nodes)
    if not models and not tools:
        raise ValueError("activity_rules needs at least one model node or tool node")
    both = sorted(set(models) & set(tools))
    if both:
        raise ValueError(f"nodes listed as both model and tool nodes: {both}")
    return [
        *(
            LedgeredActivity(f"{graph}.{node}", retry_safe=True, normalize=_normalize)
            for node in models
        ),
        *(
            LedgeredActivity(
                f"{graph}.{node}",
                retry_safe=tools_retry_safe,
                normalize=_normalize,
                output=NodeReturn(),
            )
            for node in tools
        ),
    ]


@dataclasses.dataclass(frozen=True)
class NodeReturn:
    """The plugin's activity returns ``{"result": ..., "langgraph_command": ...,
    "langgraph_interrupts": ...}``; an operator answers with the node's return value."""

    def template(self, result_type: Any) -> Any:
        return PLACEHOLDER

    def result(self, output: Any) -> Any:
        return {"result": output, "langgraph_command": None, "langgraph_interrupts": None}


def _normalize(activity_type: str, args: list[Any]) -> dict[str, Any]:
    """The fingerprinted identity of a node call: its input and the graph's context.

    The plugin sends ``{"args", "kwargs", "langgraph_config"}``. The config's run id,
    checkpoint ids, task id and scratchpad are LangGraph's per-run bookkeeping and
    change on a reset, so they are not identity; the runnable config a node asked for
    (``kwargs["config"]``) carries the same. Arguments of another shape (another
    version) are fingerprinted whole: a spurious conflict refuses loudly, a too-lenient
    fingerprint would replay silently.
    """
    if len(args) == 1 and isinstance(args[0], dict) and {"args", "kwargs"} <= set(args[0]):
        call = args[0]
        kwargs = call["kwargs"] if isinstance(call["kwargs"], dict) else {}
        config = call.get("langgraph_config")
        return {
            "input": call["args"],
            "kwargs": {k: v for k, v in kwargs.items() if k not in ("config", "runtime")},
            "context": config.get("context") if isinstance(config, dict) else None,
        }
    return {"args": args}

"""A LangGraph Functional API entrypoint whose one ``@task`` runs as an activity and
appends a line to a file, for tests (``tests/test_langgraph.py``).

Its own module so the workflow sandbox imports little. ``temporalio-langgraph`` names the
task's activity after the function's module and qualified name, which no graph name
gives: the ledger covers it by default, told by the plugin's activity argument.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from langgraph.func import entrypoint, task
from temporalio import workflow

from tests.langgraph_graph import append

ENTRYPOINT = "ledger_test_tasks"

#: Task activity runs, by line (each test writes its own line).
TASK_RUNS: dict[str, int] = {}


@task
def append_task(path: str, line: str) -> int:
    """Append ``line`` to the file at ``path``: the effect the ledger protects."""
    TASK_RUNS[line] = TASK_RUNS.get(line, 0) + 1
    return append(path, line)


@entrypoint()
async def append_once(inputs: dict[str, str]) -> str:
    number = await append_task(inputs["path"], inputs["line"])
    return f"appended as line {number}"


#: ``LangGraphPlugin(activity_options=...)`` for the task, by its function's name.
TASK_OPTIONS: dict[str, dict[str, Any]] = {
    "append_task": {"execute_in": "activity", "start_to_close_timeout": timedelta(seconds=30)}
}


@workflow.defn
class TaskWorkflow:
    @workflow.run
    async def run(self, path: str, line: str) -> str:
        from temporalio.langgraph import entrypoint as registered

        return str(await registered(ENTRYPOINT).ainvoke({"path": path, "line": line}))

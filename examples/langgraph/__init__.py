"""A support agent as a LangGraph graph on temporalio-langgraph, with the ledger."""

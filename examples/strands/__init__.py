"""A support agent on Strands' Temporal integration (temporalio-strands-agents), with the
ledger. Needs the `strands` extra, in an environment of its own (it needs mcp<2)."""

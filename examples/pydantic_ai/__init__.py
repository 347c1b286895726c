"""A support agent on pydantic-ai's Temporal integration, with the ledger."""

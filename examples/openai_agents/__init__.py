"""A support agent on the OpenAI Agents SDK's Temporal integration, with the ledger."""

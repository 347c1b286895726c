"""A support agent on Google ADK's Temporal integration, with the ledger."""

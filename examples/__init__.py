"""Example apps in the Temporal samples layout; not part of the installed package."""

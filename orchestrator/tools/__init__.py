"""Checks the project runs on itself (`python -m orchestrator.tools.layers`)."""

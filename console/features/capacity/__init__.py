"""Capacity planning: stepped load tests against the gateway (issue 22)."""

"""Helpers shared by the tests: SSE parsing, ASGI and server harnesses, waiting."""

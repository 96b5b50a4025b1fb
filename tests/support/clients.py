"""Test clients with the app's lifespan started, opened on demand and all closed at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from fastapi import FastAPI
from fastapi.testclient import TestClient


@contextmanager
def started_clients() -> Iterator[Callable[[FastAPI], TestClient]]:
    """A function that starts an app (its lifespan: the engines) and returns its client."""
    clients: list[TestClient] = []

    def start(app: FastAPI) -> TestClient:
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    try:
        yield start
    finally:
        for client in clients:
            client.__exit__(None, None, None)

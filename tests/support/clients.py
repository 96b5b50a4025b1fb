"""Test clients with the app's lifespan started, opened on demand and all closed at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from anyio.from_thread import BlockingPortal
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.runtime import Runtime


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


def runtime_of(client: TestClient) -> Runtime:
    """The runtime of the app a client drives (an app of create_app)."""
    app = client.app
    assert isinstance(app, FastAPI), app
    runtime: Runtime = app.state.runtime
    return runtime


def portal_of(client: TestClient) -> BlockingPortal:
    """The portal into the event loop of a started client's app."""
    assert client.portal is not None, "the client is not started"
    return client.portal

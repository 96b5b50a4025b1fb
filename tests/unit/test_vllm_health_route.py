"""GET /health, as vLLM's OpenAI server answers it: 200 while the engines can serve, else 503."""

from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from tests.doubles import FakeEngine


def test_health_is_200_with_an_empty_body_while_the_engine_serves(
    make_client: Callable[..., TestClient],
) -> None:
    response = make_client(FakeEngine()).get("/health")
    assert (response.status_code, response.content) == (200, b"")


def test_health_is_503_once_the_engine_failed(make_client: Callable[..., TestClient]) -> None:
    engine = FakeEngine()
    client = make_client(engine, engine_restart=False)
    engine.healthy = False
    assert client.get("/health").status_code == 503


def test_health_is_in_the_openapi_document(make_client: Callable[..., TestClient]) -> None:
    paths = make_client(FakeEngine()).get("/openapi.json").json()["paths"]
    assert set(paths["/health"]["get"]["responses"]) == {"200", "503"}

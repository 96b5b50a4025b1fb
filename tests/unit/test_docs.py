"""OpenAPI completeness, the offline /docs and /redoc pages, and the playground page."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

TAGS = {"generate", "health", "models", "metrics", "openai"}
GENERATE_PATHS = re.compile(r"/v2/models/\{model_name\}(/versions/\{model_version\})?/generate(_stream)?")
ASSET_URLS = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\s*:\s*['"]([^'"]+)['"]""")


@pytest.fixture
def openapi(client: TestClient) -> dict:
    return client.get("/openapi.json").json()


def operations(openapi: dict):
    for path, methods in openapi["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def has_example(media: dict, openapi: dict) -> bool:
    if "example" in media or "examples" in media:
        return True
    schema = media.get("schema", {})
    if schema.get("type") == "array":
        schema = schema.get("items", {})
    ref = schema.get("$ref", "")
    return bool(ref) and "examples" in openapi["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def test_every_operation_has_a_summary_a_known_tag_and_described_responses(openapi: dict) -> None:
    seen = list(operations(openapi))
    assert len(seen) >= 19
    for path, method, operation in seen:
        assert operation.get("summary"), (method, path)
        assert operation.get("tags") and set(operation["tags"]) <= TAGS, (method, path)
        for status, response in operation["responses"].items():
            assert response.get("description"), (method, path, status)
            assert status != "422", "validation errors are 400 {'error': ...}"
            for media_type, media in response.get("content", {}).items():
                assert has_example(media, openapi), (method, path, status, media_type)
                if status.startswith(("4", "5")):
                    assert set(media["example"]) == {"error"}, (method, path, status)


def test_generate_routes_have_request_response_and_error_examples(openapi: dict) -> None:
    generate = [(p, m, o) for p, m, o in operations(openapi) if GENERATE_PATHS.fullmatch(p)]
    assert len(generate) == 6
    for path, method, operation in generate:
        assert {"200", "400", "404", "503"} <= set(operation["responses"]), (method, path)
        if method == "post":
            examples = operation["requestBody"]["content"]["application/json"]["examples"]
            assert all("text_input" in e["value"] for e in examples.values())
        else:
            parameters = {p["name"]: p for p in operation["parameters"]}
            assert parameters["text_input"]["required"] and parameters["text_input"]["example"]
            assert parameters["max_tokens"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}
            assert parameters["stop"]["explode"] and "api_key" in parameters
        if path.endswith("_stream"):
            media = operation["responses"]["200"]["content"]["text/event-stream"]
            text = media.get("example") or "".join(e["value"] for e in media["examples"].values())
            assert text.startswith('data: {"model_name":"smollm2"')
            if method == "get":
                assert "event: end\ndata: {}\n\n" in text and "event: error\ndata: {" in text


def test_docs_pages_load_only_local_assets(client: TestClient) -> None:
    for page in ("/docs", "/redoc", "/"):
        response = client.get(page)
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
        html = response.text
        assert not re.search(r"https?://", html), (page, re.findall(r"https?://[^\s\"']+", html))
        urls = [a or b for a, b in ASSET_URLS.findall(html)]
        assets = [u for u in urls if u.startswith("/static/") or u == "/openapi.json"]
        assert assets, page
        for url in assets:
            asset = client.get(url)
            assert asset.status_code == 200 and asset.content, (page, url)


def test_redoc_may_load_images_from_the_server_only(client: TestClient) -> None:
    """ReDoc's sidebar shows Redocly's logo from their CDN; the browser must not even try."""
    assert client.get("/redoc").headers["content-security-policy"] == "img-src 'self' data: blob:"


def test_swagger_ui_is_version_5_and_needs_no_validator(client: TestClient) -> None:
    """Swagger UI 4 cannot render OpenAPI 3.1; the validator badge would call out."""
    html = client.get("/docs").text
    assert '"validatorUrl": null' in html
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")
    bundle = client.get("/static/swagger-ui/swagger-ui-bundle.js").text
    assert re.search(r'"5\.\d+\.\d+"', bundle)


def test_playground_page_and_its_assets(client: TestClient) -> None:
    html = client.get("/").text
    for element in ('id="model"', 'id="prompt"', 'id="max-tokens"', 'id="temperature"', 'id="stop"', 'id="ttft"', 'id="rate"'):
        assert element in html
    script = client.get("/static/playground/playground.js").text
    assert "new EventSource(" in script and 'addEventListener("end"' in script
    assert client.get("/static/playground/playground.css").status_code == 200
    assert client.get("/static/nothing.js").status_code == 404

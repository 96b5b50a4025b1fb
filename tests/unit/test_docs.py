"""OpenAPI completeness, the offline /docs and /redoc pages, the playground page, and the
documentation site."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.paths import PROJECT_ROOT
from app.settings import Settings

TAGS = {"generate", "health", "models", "metrics", "openai", "logging", "trace"}
GENERATE_PATHS = re.compile(
    r"/v2/models/\{model_name\}(/versions/\{model_version\})?/generate(_stream)?"
)
ASSET_URLS = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\s*:\s*['"]([^'"]+)['"]""")


@pytest.fixture
def openapi(client: TestClient) -> dict[str, Any]:
    document: dict[str, Any] = client.get("/openapi.json").json()
    return document


def operations(openapi: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in openapi["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


def has_example(media: dict[str, Any], openapi: dict[str, Any]) -> bool:
    if "example" in media or "examples" in media:
        return True
    schema = media.get("schema", {})
    if schema.get("type") == "array":
        schema = schema.get("items", {})
    ref = schema.get("$ref", "")
    return bool(ref) and "examples" in openapi["components"]["schemas"][ref.rsplit("/", 1)[-1]]


def test_every_operation_has_a_summary_a_known_tag_and_described_responses(
    openapi: dict[str, Any],
) -> None:
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


def test_generate_routes_have_request_response_and_error_examples(openapi: dict[str, Any]) -> None:
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
            assert parameters["max_tokens"]["schema"] == {
                "type": "integer",
                "minimum": 1,
                "maximum": 2**31 - 1,
            }
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
        assert response.status_code == 200 and response.headers["content-type"].startswith(
            "text/html"
        )
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
    for element in (
        'id="model"',
        'id="prompt"',
        'id="max-tokens"',
        'id="temperature"',
        'id="stop"',
        'id="ttft"',
        'id="rate"',
    ):
        assert element in html
    script = client.get("/static/playground/playground.js").text
    assert "new EventSource(" in script and 'addEventListener("end"' in script
    assert client.get("/static/playground/playground.css").status_code == 200
    assert client.get("/static/nothing.js").status_code == 404


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documentation site, built offline with mkdocs --strict: every link and anchor
    resolves, every page is in the navigation."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail(
            "mkdocs is missing: `make test` installs it (the project's docs extra)", pytrace=False
        )
    folder = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    return folder


def test_the_documentation_site_builds_strictly_offline(site: Path) -> None:
    assert (site / "architecture" / "index.html").exists()


LOADED = re.compile(r"<(script|img|link|iframe|source)\b[^>]*?\b(?:src|href)=[\"']([^\"']+)[\"']")
"""What a page makes the browser fetch: scripts, images, stylesheets and icons, frames."""


def test_no_page_loads_anything_from_elsewhere(site: Path) -> None:
    """No script, stylesheet, font or image from a CDN: the site renders offline."""
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20
    for page in pages:
        for tag, url in LOADED.findall(page.read_text()):
            assert not re.match(r"(https?:)?//", url), (page.relative_to(site), tag, url)


def test_the_diagrams_render_with_the_sites_own_mermaid(site: Path) -> None:
    """The theme fetches Mermaid from a CDN unless the page already has it: every page loads
    the copy in docs/assets, and the architecture page's diagram is there for it to draw."""
    html = (site / "architecture" / "index.html").read_text()
    assert '<pre class="mermaid"><code>flowchart LR' in html
    scripts = re.findall(r'<script src="([^"]+)"', html)
    local = [url for url in scripts if url.endswith("assets/vendor/mermaid/mermaid.min.js")]
    assert local, scripts
    bundle = (site / "architecture" / local[0]).resolve()
    assert bundle.stat().st_size > 1_000_000
    assert (
        bundle.read_bytes()
        .rstrip()
        .endswith(
            b'globalThis["mermaid"] = globalThis.__esbuild_esm_mermaid_nm["mermaid"].default;'
        )
    )


def test_the_architecture_picture_names_only_code_that_exists() -> None:
    """The picture is kept beside the code: every package or module it names is there."""
    picture = re.search(
        r"```mermaid\n(.*?)```", (PROJECT_ROOT / "docs" / "architecture.md").read_text(), re.DOTALL
    )
    assert picture, "docs/architecture.md has its Mermaid picture"
    named = set(re.findall(r"\bapp/[a-z_/]+(?:\.py)?", picture.group(1)))
    assert {"app/core", "app/engine", "app/multiprocess/supervisor.py"} <= named
    missing = sorted(path for path in named if not (PROJECT_ROOT / path).exists())
    assert not missing, f"docs/architecture.md's picture names {missing}: update it"


def test_the_readme_keeps_the_two_set_up_commands() -> None:
    readme = (PROJECT_ROOT / "README.md").read_text().splitlines()
    assert any(line.startswith("make serve   # ") for line in readme)
    assert any(line.startswith("make test    # ") for line in readme)


def test_the_readme_stays_short() -> None:
    """The README introduces; the docs site holds the rest."""
    assert len((PROJECT_ROOT / "README.md").read_text().splitlines()) <= 250


SETTING_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \| ([^|]*) \|", re.MULTILINE)
"""A settings table's row in a docs page: | `VARIABLE` | its default | what it does |"""


def documented_defaults() -> list[tuple[str, str, str]]:
    """(page, variable, default cell) of every settings row outside the generated reference."""
    pages = sorted(p for p in (PROJECT_ROOT / "docs").rglob("*.md") if p.parent.name != "reference")
    return [
        (page.name, variable, cell.strip())
        for page in pages
        for variable, cell in SETTING_ROW.findall(page.read_text())
    ]


def test_the_defaults_the_pages_give_are_the_settings_defaults() -> None:
    """The topic pages' tables repeat settings' defaults: each literal one (`16`, `true`) and
    each "none" or "empty" is what app/settings.py defines."""
    fields = {
        (f.validation_alias if isinstance(f.validation_alias, str) else name).upper(): f
        for name, f in Settings.model_fields.items()
    }
    checked = 0
    for page, variable, cell in documented_defaults():
        if variable not in fields:
            continue
        default = fields[variable].get_default(call_default_factory=True)
        literal = re.match(r"`(-?\d[\d.]*|true|false)`", cell)
        if literal:
            shown = str(default).lower() if isinstance(default, bool) else str(default)
            assert literal.group(1) == shown, (page, variable, cell, default)
        elif cell.startswith(("none", "empty")):
            assert default in (None, [], (), ""), (page, variable, cell, default)
        else:
            continue
        checked += 1
    assert checked >= 30


CLIENT_COMMAND = re.compile(
    r"^\s*(\.cache/clients/launch/|(\.venv/bin/)?vllm bench |genai-perf |aiperf |guidellm "
    r"|perf_analyzer )"
)


def test_the_benchmark_clients_commands_are_the_tested_ones_only() -> None:
    """The clients' command lines live in one marked part of docs/benchmarks/index.md, which
    tests/integration/test_third_party_clients.py runs: no page keeps a copy of its own."""
    start = (
        "<!-- client commands: tests/integration/test_third_party_clients.py runs each block -->"
    )
    end = "<!-- end of client commands -->"
    pages = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").rglob("*.md"))]
    for page in pages:
        text = page.read_text()
        if page.name == "index.md" and page.parent.name == "benchmarks":
            assert text.count(start) == text.count(end) == 1
            head, rest = text.split(start)
            text = head + rest.split(end)[1]
        code = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```$", text, re.MULTILINE | re.DOTALL))
        stray = [line for line in code.splitlines() if CLIENT_COMMAND.match(line)]
        assert not stray, f"{page.relative_to(PROJECT_ROOT)}: {stray}"


SERVER_MESSAGES = (
    "is in use: ",
    "is not in the local Hugging Face cache and downloads",
    "accepted for compatibility with tritonserver; it has no effect here",
    "this CPU has no native bfloat16 (neither AVX512-BF16 nor AMX)",
    "the engine died",
    "the engine failed its health probe",
    "restarting its engine in",
    "engine restarted, ready",
    "engine restarts exhausted",
    "Model is unavailable due to unhealthy vLLM engine",
    "is loading",
    "Server is shutting down: no new requests are admitted",
    "request body is larger than",
    "request headers are larger than",
    "did not arrive within",
    "Started HTTPService at",
    "unrecognized option",
    "is not a directory",
    "failed to load all models",
)
"""Parts of the server's messages that docs/troubleshooting.md quotes, as the code writes them."""


def test_the_troubleshooting_page_quotes_the_servers_own_messages() -> None:
    page = " ".join((PROJECT_ROOT / "docs" / "troubleshooting.md").read_text().split())
    code = "\n".join(path.read_text() for path in sorted((PROJECT_ROOT / "app").rglob("*.py")))
    for message in SERVER_MESSAGES:
        assert message in page, f"docs/troubleshooting.md no longer quotes {message!r}"
        assert message in code, f"the server no longer writes {message!r}: update the page"

"""The playground and /docs in headless Chromium (Debian's `chromium`, driven by Playwright)
against the session's real server: a real answer streams in, Stop aborts the engine request,
and "Try it out" on generate answers 200; plus the API-key field and the error display against
the app with the engine double. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import os
import re
import resource
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from app.main import create_app
from app.settings import Settings
from tests.doubles import FakeEngine
from tests.integration.test_metrics_and_health import scrape
from tests.support.asgi import serve_in_thread
from tests.support.repository import write_model
from tests.support.servers import ARTIFACTS, RunningServer

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]
ADDRESS_SPACE_NEEDED = 128 * 2**30
"""Chromium reserves about 100 GiB of address space at start (V8's sandbox, PartitionAlloc's
pools; measured: it starts under `ulimit -v` of 115 GiB, not 76 GiB). It is not memory used."""
STREAM_TIMEOUT_MS = 180_000  # a slow, shared 2-core CPU
PAGE_TIMEOUT_MS = 60_000
"""How long a page's element may take to appear (Swagger UI renders the whole API first:
more than Playwright's 5 s on a busy 2-core host)."""
expect.set_options(timeout=PAGE_TIMEOUT_MS)
GENERATE = "/v2/models/smollm2/generate"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """One headless Chromium for the module; none of its processes outlive it."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium package")
    executable = chromium_within_address_space_limit(tmp_path_factory.mktemp("chromium"))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()
    for process in chromium_descendants():
        process.kill()


def hard_address_space_limit() -> int | None:
    """The hard `ulimit -v` in bytes when it is too low for Chromium to start, else None."""
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    return hard if hard != resource.RLIM_INFINITY and hard < ADDRESS_SPACE_NEEDED else None


pytestmark = pytest.mark.skipif(
    hard_address_space_limit() is not None,
    reason=f"Chromium cannot start under a hard address-space limit (ulimit -v) of "
    f"{(hard_address_space_limit() or 0) / 2**30:.0f} GiB: it reserves about 100 GiB; "
    "use a soft limit (ulimit -Sv) or none",
)


def chromium_within_address_space_limit(folder: Path) -> str:
    """Chromium itself, or under `ulimit -Sv` a launcher that lifts the soft limit for the
    browser alone (up to the hard limit, which `pytestmark` checked)."""
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft == resource.RLIM_INFINITY or soft >= ADDRESS_SPACE_NEEDED:
        return CHROMIUM
    launcher = folder / "chromium"
    launcher.write_text(f'#!/bin/sh\nulimit -S -v "$(ulimit -H -v)"\nexec "{CHROMIUM}" "$@"\n')
    launcher.chmod(0o755)
    return str(launcher)


def chromium_descendants() -> list[psutil.Process]:
    """Chromium processes started by this test process (through Playwright's driver)."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "chrom" in process.name().lower():
                found.append(process)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.fixture
def page(browser: Browser, server: RunningServer) -> Iterator[Page]:
    yield from open_page(browser, server.base_url)


def open_page(browser: Browser, base_url: str) -> Iterator[Page]:
    """A fresh page that may only reach the server: a request elsewhere (a CDN) fails the test."""
    context: BrowserContext = browser.new_context(
        base_url=base_url, viewport={"width": 1100, "height": 900}
    )
    outside: list[str] = []

    def only_the_server(route) -> None:
        if route.request.url.startswith(base_url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_server)
    page = context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()
    assert not outside, f"the page tried to reach outside the server: {outside}"
    assert not errors, f"JavaScript errors: {errors}"


def start_generation(
    page: Page, prompt: str, max_tokens: int, temperature: float, extra: str = ""
) -> None:
    page.goto("/")
    expect(page.locator("#model option")).to_have_count(1)
    expect(page.locator("#model")).to_have_value('["smollm2","1"]')
    page.fill("#prompt", prompt)
    page.fill("#max-tokens", str(max_tokens))
    page.fill("#temperature", str(temperature))
    page.fill("#extra", extra)
    page.click("#generate")
    expect(page.locator("#status")).to_have_attribute("data-state", "streaming")


def text_of(page: Page, selector: str) -> str:
    text = page.locator(selector).text_content()
    assert text is not None, selector
    return text


def test_playground_streams_a_real_answer(page: Page, http: httpx.Client) -> None:
    prompt = "Name three colours of the rainbow."
    start_generation(page, prompt, max_tokens=32, temperature=0)
    expect(page.locator("#status")).to_have_attribute(
        "data-state", "done", timeout=STREAM_TIMEOUT_MS
    )
    expect(page.locator("#error")).to_be_hidden()

    streamed = page.locator("#output").text_content()
    expected = http.post(
        GENERATE,
        json={
            "text_input": prompt,
            "exclude_input_in_output": True,
            "return_num_output_tokens": True,
            "parameters": {"max_tokens": 32, "temperature": 0},
        },
    ).json()
    assert streamed and streamed == expected["text_output"]
    assert int(text_of(page, "#tokens")) == expected["num_output_tokens"]
    assert re.fullmatch(r"\d+ ms", text_of(page, "#ttft"))
    assert float(text_of(page, "#rate")) > 0
    page.screenshot(path=ARTIFACTS / "playground.png")


def test_stop_closes_the_stream_and_aborts_the_engine_request(
    page: Page, http: httpx.Client
) -> None:
    before = scrape(http).get("vllm:generation_tokens_total", 0.0)
    start_generation(
        page,
        "Tell me a very long story about the sea.",
        max_tokens=1000,
        temperature=0.7,
        extra="ignore_eos=true",
    )
    page.wait_for_function(
        "Number(document.getElementById('tokens').textContent) >= 3", timeout=STREAM_TIMEOUT_MS
    )
    page.click("#stop")
    expect(page.locator("#status")).to_have_attribute("data-state", "stopped")
    expect(page.locator("#stop")).to_be_disabled()
    expect(page.locator("#generate")).to_be_enabled()
    shown = page.locator("#output").text_content()

    # The server's own view: nothing runs any more and no token is generated after that.
    deadline = time.monotonic() + 10
    while scrape(http).get("vllm:num_requests_running") != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    settled = scrape(http)
    assert settled.get("vllm:num_requests_running") == 0
    time.sleep(2)
    after = scrape(http)["vllm:generation_tokens_total"]
    assert after == settled["vllm:generation_tokens_total"], "tokens still being generated"
    assert 3 <= after - before < 1000, "the request ran to max_tokens: it was not aborted"
    assert page.locator("#output").text_content() == shown
    page.screenshot(path=ARTIFACTS / "playground-stopped.png")


def test_docs_try_it_out_on_generate_answers_200(page: Page) -> None:
    page.goto("/docs")
    operation = page.locator("#operations-generate-generate_v2_models__model_name__generate_post")
    expect(operation).to_be_visible()
    operation.locator(".opblock-summary").click()
    operation.get_by_role("button", name="Try it out").click()
    operation.locator('input[placeholder="model_name"]').fill("smollm2")
    operation.get_by_role("button", name="Execute").click()
    status = operation.locator(".live-responses-table .response .response-col_status").first
    expect(status).to_have_text("200", timeout=STREAM_TIMEOUT_MS)
    expect(operation.locator(".live-responses-table .microlight").first).to_contain_text(
        "text_output"
    )
    status.scroll_into_view_if_needed()
    page.screenshot(path=ARTIFACTS / "docs-try-it-out.png")


def test_redoc_renders_offline(page: Page) -> None:
    page.goto("/redoc")
    heading = page.get_by_role(
        "heading", name=re.compile("as Server-Sent Events, for a browser EventSource")
    )
    expect(heading.first).to_be_visible()
    page.screenshot(path=ARTIFACTS / "redoc.png")


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app with API keys and the engine double, under uvicorn in a thread."""
    root: Path = tmp_path_factory.mktemp("keyed")
    write_model(root, "fake")
    app = create_app(
        Settings(model_repository=[root], api_keys=["browser-key"]),
        engine_factory=lambda spec: FakeEngine(step_delay=0.02),
    )
    with serve_in_thread(app) as base_url:
        yield base_url


@pytest.fixture
def keyed_page(browser: Browser, keyed_server: str) -> Iterator[Page]:
    yield from open_page(browser, keyed_server)


def test_playground_asks_for_the_api_key_and_shows_error_events(keyed_page: Page) -> None:
    page = keyed_page
    page.goto("/")
    expect(page.locator("#api-key-label")).to_be_visible()
    expect(page.locator("#error")).to_have_text("This server requires an API key.")
    page.fill("#api-key", "wrong")
    page.locator("#api-key").dispatch_event("change")
    expect(page.locator("#error")).to_have_text("The API key was refused.")
    page.fill("#api-key", "browser-key")
    page.locator("#api-key").dispatch_event("change")
    expect(page.locator("#model")).to_have_value('["fake","1"]')
    expect(page.locator("#error")).to_be_hidden()

    page.fill("#max-tokens", "4")
    page.click("#generate")
    expect(page.locator("#status")).to_have_attribute("data-state", "done")
    expect(page.locator("#output")).to_have_text("Hello from the fake")
    expect(page.locator("#tokens")).to_have_text("4")

    page.fill("#extra", "top_p=5")  # a bad parameter: the server's `event: error`
    page.click("#generate")
    expect(page.locator("#status")).to_have_attribute("data-state", "error")
    expect(page.locator("#error")).to_have_text("top_p: Input should be less than or equal to 1")
    page.screenshot(path=ARTIFACTS / "playground-error.png")

"""The API docs pages, `/docs` (Swagger UI) and `/redoc`, from local assets: no CDN.

Swagger UI comes from the `swagger-ui-bundle-v2` package (Swagger UI 5, which renders
OpenAPI 3.1), ReDoc from `app/static/vendor/redoc` (vendored, MIT; see its README).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.routing import Route
from swagger_ui_bundle import swagger_ui_path

from app.security.restrictions import api_group

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
STATIC_URL = "/static"
SWAGGER_UI_URL = f"{STATIC_URL}/swagger-ui"
REDOC_JS_URL = f"{STATIC_URL}/vendor/redoc/redoc.standalone.js"
FAVICON_URL = f"{SWAGGER_UI_URL}/favicon-32x32.png"
DOCS_URL, REDOC_URL, OAUTH2_REDIRECT_URL = "/docs", "/redoc", "/docs/oauth2-redirect"
SWAGGER_UI_PARAMETERS = {"validatorUrl": None, "displayRequestDuration": True}
"""No validator badge: Swagger UI would fetch it from an outside service."""
REDOC_POLICY = "img-src 'self' data: blob:"
"""ReDoc's sidebar always shows Redocly's logo from their CDN (and hides it when it fails to
load): images from the server only, so the browser does not even try."""

router = APIRouter(include_in_schema=False)


@router.get(DOCS_URL)
@api_group(None)
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{SWAGGER_UI_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{SWAGGER_UI_URL}/swagger-ui.css",
        swagger_favicon_url=f"{root}{FAVICON_URL}",
        oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT_URL}",
        swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
    )


@router.get(OAUTH2_REDIRECT_URL)
@api_group(None)
async def swagger_ui_oauth2_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get(REDOC_URL)
@api_group(None)
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    page = get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{REDOC_JS_URL}",
        redoc_favicon_url=f"{root}{FAVICON_URL}",
        with_google_fonts=False,
    )
    page.headers["Content-Security-Policy"] = REDOC_POLICY
    return page


def install_docs_and_static(app: FastAPI) -> None:
    """The docs routes and the static files (Swagger UI's first: a mount matches by prefix),
    all in no API group, as FastAPI's OpenAPI document."""
    swagger_ui_files = api_group(None)(StaticFiles(directory=str(swagger_ui_path)))
    app.mount(SWAGGER_UI_URL, swagger_ui_files, name="swagger-ui")
    app.mount(STATIC_URL, api_group(None)(StaticFiles(directory=STATIC_DIR)), name="static")
    app.include_router(router)
    for route in app.routes:
        if isinstance(route, Route) and route.path == app.openapi_url:
            api_group(None)(route.endpoint)

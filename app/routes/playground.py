"""The playground page at `/`: a prompt box streaming through `EventSource`
(app/static/playground)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import FileResponse

from app.routes.docs import STATIC_DIR
from app.security.restrictions import api_group

PLAYGROUND_PAGE = STATIC_DIR / "playground" / "index.html"

router = APIRouter(include_in_schema=False)


@router.get("/")
@api_group(None)
async def playground() -> FileResponse:
    return FileResponse(PLAYGROUND_PAGE, media_type="text/html")

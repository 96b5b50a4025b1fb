"""Typed FastAPI dependencies every HTTP frontend uses: the runtime's parts, the settings and
the request's access-log record.

All are `async def`: FastAPI runs a plain `def` dependency in a worker thread, which costs
tens of microseconds per request for what is an attribute read.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.core.service import GenerationService
from app.http.access_log import current_request
from app.observability.access_log import RequestLog
from app.repository.registry import ModelRegistry
from app.runtime import Runtime
from app.settings import Settings


async def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime  # type: ignore[no-any-return]


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


async def get_registry(runtime: Annotated[Runtime, Depends(get_runtime)]) -> ModelRegistry:
    return runtime.registry


async def get_generation(runtime: Annotated[Runtime, Depends(get_runtime)]) -> GenerationService:
    return runtime.generation


async def get_request_log() -> RequestLog | None:
    """The access-log record of this request (None outside the access-log middleware)."""
    return current_request.get()


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
RegistryDep = Annotated[ModelRegistry, Depends(get_registry)]
GenerationDep = Annotated[GenerationService, Depends(get_generation)]
RequestLogDep = Annotated[RequestLog | None, Depends(get_request_log)]

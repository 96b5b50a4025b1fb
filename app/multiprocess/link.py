"""A frontend process's side of the group: its slots of the shared engine cores, the
repository changes it shares with the other frontend processes, and the metrics of all of
them."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import signal
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import PurePosixPath
from typing import Any

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from app.engine.client_slot import ClientSlot
from app.errors import ServerError
from app.multiprocess.channel import STREAM_LIMIT, Channel, RemoteError
from app.multiprocess.link_calls import LinkCall
from app.multiprocess.metrics import merge_expositions
from app.observability.log_control import LOG_CONTROL, LogSettings
from app.observability.trace_settings import (
    SettingsChange,
    TraceSettings,
    change_from_json,
    change_to_json,
)
from app.repository.layout import ModelSpec
from app.repository.overrides import ModelOverride
from app.repository.registry import ModelRegistry

logger = logging.getLogger(__name__)

FIRST_LOAD = "start"
"""The load token of the models the frontend processes start with."""


class FrontendProcessLink:
    """Frontend process `index`'s channel to the supervisor listening at `path`; a
    `CoreBroker` for its engines."""

    def __init__(self, index: int, path: str) -> None:
        self.index = index
        self._path = path
        self._channel: Channel | None = None
        self._serving: asyncio.Task[None] | None = None
        self._closing = False
        self._loads: dict[str, str] = {}
        self._held: dict[ClientSlot, tuple[dict[str, str], int]] = {}
        self.registry: SharedModelRegistry | None = None
        self.local_metrics: Callable[[], bytes] = lambda: b""
        self.trace_settings: TraceSettings | None = None

    async def connect(self) -> None:
        reader, writer = await asyncio.open_unix_connection(self._path, limit=STREAM_LIMIT)
        self._channel = Channel(reader, writer, self._answer)
        self._serving = asyncio.create_task(self._serve())
        self._loads.update(await self._call(LinkCall.HELLO))

    async def ready(self) -> None:
        """Tell the supervisor this process serves (a later exit is restarted, not fatal)."""
        await self._call(LinkCall.READY)

    async def _serve(self) -> None:
        assert self._channel is not None
        await self._channel.serve()
        if not self._closing:
            logger.error("the supervisor went away: stopping this frontend process")
            os.kill(os.getpid(), signal.SIGTERM)

    async def close(self) -> None:
        self._closing = True
        if self._channel is not None:
            await self._channel.close()
        if self._serving is not None:
            await asyncio.gather(self._serving, return_exceptions=True)

    async def acquire(self, spec: ModelSpec) -> ClientSlot:
        key = {
            "model": spec.name,
            "version": spec.version,
            "load": self._loads.get(spec.name, FIRST_LOAD),
            "instance": str(spec.instance.index),
        }
        engine_args = json.loads(json.dumps(spec.engine_args, default=str))
        instance = spec.instance.to_json()
        reply = await self._call(
            LinkCall.ACQUIRE, key=key, engine_args=engine_args, instance=instance
        )
        epoch = reply.pop("epoch")
        slot = ClientSlot(**reply)
        self._held[slot] = (key, epoch)
        return slot

    async def release(self, slot: ClientSlot) -> None:
        key, epoch = self._held.pop(slot, (None, 0))
        if key is not None:
            await self._call(LinkCall.RELEASE, key=key, epoch=epoch)

    async def metrics(self) -> bytes:
        """Every frontend process's metrics, merged; a `ServerError` when one could not give
        its own."""
        try:
            texts = await self._call(LinkCall.GATHER, what=LinkCall.METRICS)
        except RemoteError as exc:
            raise ServerError(
                f"a frontend process failed to report its metrics: {exc.message}"
            ) from exc
        return merge_expositions(texts)

    async def share(self, op: LinkCall, name: str, **args: Any) -> None:
        """Have every other frontend process apply a repository change this one made."""
        try:
            await self._call(LinkCall.SHARE, what=op, args={"name": name, **args})
        except RemoteError as exc:
            raise ServerError(
                f"another frontend process failed to {op} model '{name}': {exc.message}"
            ) from exc

    async def share_log_settings(self) -> None:
        """Have every other frontend process take this one's log settings."""
        settings = asdict(LOG_CONTROL.settings)
        try:
            await self._call(LinkCall.SHARE, what=LinkCall.LOG_SETTINGS, args=settings)
        except RemoteError as exc:
            message = f"another frontend process failed to change its log settings: {exc.message}"
            raise ServerError(message) from exc

    async def share_trace_setting(self, model: str, change: SettingsChange) -> None:
        """Have every other frontend process make the same change of a trace setting."""
        try:
            args = {"model": model, "change": change_to_json(change)}
            await self._call(LinkCall.SHARE, what=LinkCall.TRACE_SETTING, args=args)
        except RemoteError as exc:
            message = f"another frontend process failed to change its trace setting: {exc.message}"
            raise ServerError(message) from exc

    def set_load(self, name: str, load: str) -> str:
        previous, self._loads[name] = self._loads.get(name, FIRST_LOAD), load
        return previous

    async def _call(self, op: LinkCall, **args: Any) -> Any:
        assert self._channel is not None, "connect first"
        return await self._channel.call(op, frontend_process=self.index, **args)

    async def _answer(self, name: str, args: dict[str, Any]) -> Any:
        op = LinkCall(name)
        if op is LinkCall.METRICS:
            return self.local_metrics().decode()
        if op is LinkCall.TRACE_SETTING and self.trace_settings is not None:
            self.trace_settings.update(args["model"], change_from_json(args["change"]))
            return None
        if op is LinkCall.LOG_SETTINGS:
            LOG_CONTROL.apply(LogSettings(**args))
            return None
        assert self.registry is not None
        if op is LinkCall.LOAD:
            self.set_load(args["name"], args["load"])
            await self.registry.load_here(args["name"], decode_override(args.get("override")))
            return None
        if op is LinkCall.UNLOAD:
            await self.registry.unload_here(args["name"])
            return None
        raise ValueError(f"unknown call {op!r}")


class SharedModelRegistry(ModelRegistry):
    """A frontend process's registry: a load or unload asked of it is made in every frontend
    process (each starting its client of the same new engine core) before it returns."""

    def __init__(self, *args: Any, link: FrontendProcessLink, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._link = link
        link.registry = self

    async def load(self, name: str, override: ModelOverride | None = None) -> None:
        load = f"{self._link.index}-{uuid.uuid4().hex[:12]}"
        previous = self._link.set_load(name, load)
        try:
            await super().load(name, override)
        except BaseException:
            self._link.set_load(name, previous)
            raise
        await self._link.share(LinkCall.LOAD, name, load=load, override=encode_override(override))

    async def unload(self, name: str) -> None:
        await super().unload(name)
        await self._link.share(LinkCall.UNLOAD, name)

    async def load_here(self, name: str, override: ModelOverride | None) -> None:
        await super().load(name, override)

    async def unload_here(self, name: str) -> None:
        await super().unload(name)


def encode_override(override: ModelOverride | None) -> dict[str, Any] | None:
    if override is None:
        return None
    files = {
        str(path): base64.b64encode(content).decode() for path, content in override.files.items()
    }
    return {"config": text_format.MessageToString(override.config), "files": files}


def decode_override(encoded: dict[str, Any] | None) -> ModelOverride | None:
    if encoded is None:
        return None
    config = text_format.Parse(encoded["config"], model_config_pb2.ModelConfig())
    files = {
        PurePosixPath(path): base64.b64decode(content) for path, content in encoded["files"].items()
    }
    return ModelOverride(config, files)

"""`FRONTEND_PROCESSES` > 1: the supervisor (app/multiprocess/supervisor.py) with what it is
given to run: vLLM's engine cores, and in each frontend process the whole app on clients of
those cores."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from app.engine.shared_core import EngineCoreHost
from app.launch.quiet_exit import quiet_after_serving
from app.multiprocess.cores import CoreHost, CoreKey
from app.multiprocess.supervisor import Supervisor, bind_shared_port
from app.repository.instances import ModelInstance
from app.repository.layout import ModelSpec
from app.settings import Settings


def run(settings: Settings, count: int) -> None:
    """Serve with `count` frontend processes until stopped; exit with the group's status."""
    code = asyncio.run(Supervisor(settings, count, core_host, run_frontend_process).run())
    if code:
        raise SystemExit(code)


def core_host(
    key: CoreKey,
    engine_args: dict[str, Any],
    instance: dict[str, Any],
    clients: int,
    run_dir: Path,
) -> CoreHost:
    """The core of one instance of a model version (placed as `instance` says)."""
    placement = (ModelInstance.from_json(instance),) if instance else ()
    spec = ModelSpec(key[0], key[1], Path("."), engine_args, instances=placement)
    return EngineCoreHost(spec, clients, run_dir)


def run_frontend_process(index: int, settings: Settings, path: str, log_file: str = "") -> None:
    """A frontend process: the whole app (HTTP, gRPC, OpenAI) on clients of the shared cores;
    it listens once its engines are ready, so no connection waits on a starting process. It
    logs where the supervisor does (`log_file`: its --log-file)."""
    from app.launch.server import serve
    from app.main import configure_logs, create_app, create_grpc_server
    from app.multiprocess.link import FrontendProcessLink

    configure_logs(settings, log_file)
    settings = settings.model_copy(update={"grpc_reuse_port": True})
    link = FrontendProcessLink(index, path)
    app = create_app(settings, link=link)
    grpc_server = create_grpc_server(settings, app.state.runtime)
    http = bind_shared_port(settings.host, settings.port)
    try:
        serve(
            app,
            settings.host,
            settings.port,
            settings.log_level,
            grpc_server,
            sockets=[http],
            supervised=True,
        )
    finally:
        quiet_after_serving()

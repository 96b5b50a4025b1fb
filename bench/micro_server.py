"""`python -m bench.micro_server`: our app with `FastEngine`, run by uvicorn like `make serve`
(with the gRPC frontend in the same loop when `--grpc-port` is given)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import uvicorn

from app.launch.server import DrainingServer
from app.main import create_app, create_grpc_server
from app.settings import Settings
from bench.fast_engine import FastEngine


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.micro_server", description=__doc__)
    parser.add_argument("--model-repository", type=Path, required=True)
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--grpc-port", type=int, default=0)
    args = parser.parse_args(argv)
    settings = Settings(
        model_repository=args.model_repository,
        models=args.models,
        host=args.host,
        port=args.port,
        grpc_port=args.grpc_port,
    )
    # The same logging and uvicorn options as app/__main__.py (uvloop and httptools when present).
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(settings, engine_factory=lambda spec: FastEngine())
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=30,
    )
    grpc_server = create_grpc_server(settings, app.state.runtime)
    server = (
        uvicorn.Server(config) if grpc_server is None else DrainingServer(config, app, grpc_server)
    )
    server.run()


if __name__ == "__main__":
    main()

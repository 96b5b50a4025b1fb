"""Command line: `python -m app --model-repository DIR --host HOST --port PORT`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from app.observability.access_log import configure_logging
from app.settings import Settings


def parse_args(argv: list[str] | None = None) -> dict[str, object]:
    """Only the options given on the command line; the rest come from Settings."""
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__)
    parser.add_argument("--model-repository", type=Path, help="Triton model repository folder")
    parser.add_argument("--models", nargs="+", help="load only these models of the repository")
    parser.add_argument("--host", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8000)")
    parser.add_argument("--grpc-port", type=int, help="Triton's gRPC protocol on this port (default 8001; 0: off)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    return {key: value for key, value in vars(args).items() if value is not None}


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    settings = Settings(**parse_args(argv))  # type: ignore[arg-type]
    configure_logging(settings.log_level, settings.log_format)
    processes = settings.frontend_process_count()
    if processes > 1:
        if settings.metrics_port:
            raise SystemExit("METRICS_PORT: with several frontend processes, /metrics on the main port serves them all")
        from app.supervisor import run

        run(settings, processes)
        return
    from app.main import create_app, create_grpc_server
    from app.server import serve

    app = create_app(settings)
    grpc_server = create_grpc_server(settings, app.state.runtime)
    serve(app, settings.host, settings.port, settings.log_level, grpc_server)


if __name__ == "__main__":
    main()

"""The gRPC frontend on the engine double, shared by the stream tests of this folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as triton_grpc

from tests.doubles import FakeEngine
from tests.support.triton_grpc import GrpcApp, serve_grpc_app


@pytest.fixture
def served(repository: Path, engine: FakeEngine) -> Iterator[GrpcApp]:
    with serve_grpc_app(repository, lambda spec: engine) as app:
        yield app


@pytest.fixture
def client(served: GrpcApp) -> Iterator[triton_grpc.InferenceServerClient]:
    with triton_grpc.InferenceServerClient(served.grpc_url) as grpc_client:
        yield grpc_client

"""The three targets of the comparison, each an async context manager with a `stream` method.

`stream(prompt, n)` sends one request for exactly `n` new tokens (temperature 0, ignore_eos,
no chat template) and yields how many new tokens each event brought.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil

from app.repository.layout import ModelSpec
from bench.servers import ServerProcess, free_port, free_ports, reap, server_env

REQUEST_TIMEOUT_S = 600


class TargetError(RuntimeError):
    """A request failed: an HTTP error status or an error event."""


class EngineTarget:
    """`AsyncLLM.generate` in this process: no HTTP, the limit for any server."""

    name = "engine"

    def __init__(self, spec: ModelSpec, kvcache_gib: int, log_path: Path) -> None:
        self.spec = spec
        self.kvcache_gib = kvcache_gib
        self.log_path = log_path
        self.llm: Any = None
        self._children: list[psutil.Process] = []
        self._params: Any = None

    async def __aenter__(self) -> EngineTarget:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(self.kvcache_gib)
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        before = {p.pid for p in psutil.Process().children(recursive=True)}
        try:
            args = AsyncEngineArgs(**self.spec.engine_args)
            with output_to(self.log_path):  # the engine core inherits it: its noise goes there
                self.llm = await asyncio.to_thread(AsyncLLM.from_engine_args, args)
        finally:
            self._children = [
                p for p in psutil.Process().children(recursive=True) if p.pid not in before
            ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.shutdown()
        reap(self._children)

    async def stream(self, prompt: str, max_tokens: int) -> AsyncIterator[int]:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(
            max_tokens=max_tokens,
            ignore_eos=True,
            temperature=0,
            output_kind=RequestOutputKind.DELTA,
        )
        async for output in self.llm.generate({"prompt": prompt}, params, uuid.uuid4().hex):
            yield sum(len(completion.token_ids) for completion in output.outputs)


@contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Point this process's stdout and stderr (fds 1 and 2) at `path` for a while."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with path.open("ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


class HttpTarget:
    """A server over HTTP: started by the bench (`server`) or already running (`base_url`)."""

    name = "http"

    def __init__(
        self, base_url: str | None, server: ServerProcess | None, max_connections: int
    ) -> None:
        self.base_url = base_url or (server.base_url if server else "")
        self.server = server
        self.max_connections = max_connections
        self.client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> HttpTarget:
        try:
            if self.server is not None:
                self.server.start()
                await self.server.wait_ready()
            self.client = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=30),
                limits=httpx.Limits(
                    max_connections=self.max_connections,
                    max_keepalive_connections=self.max_connections,
                ),
                trust_env=False,
            )
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None
        if self.server is not None:
            self.server.stop()

    async def events(self, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The JSON of each `data:` line of an SSE response, until `[DONE]` or the end."""
        assert self.client is not None, "target not started"
        async with self.client.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                detail = (await response.aread())[:200].decode(errors="replace")
                raise TargetError(f"HTTP {response.status_code}: {detail}")
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                event = json.loads(data)
                if "error" in event:
                    raise TargetError(str(event["error"])[:200])
                yield event


class OursTarget(HttpTarget):
    """Our `generate_stream`, one SSE event per engine step."""

    name = "ours"

    def __init__(
        self, model: str, base_url: str | None, server: ServerProcess | None, max_connections: int
    ) -> None:
        super().__init__(base_url, server, max_connections)
        self.path = f"/v2/models/{model}/generate_stream"

    async def stream(self, prompt: str, max_tokens: int) -> AsyncIterator[int]:
        body = {
            "text_input": prompt,
            "parameters": {
                "max_tokens": max_tokens,
                "ignore_eos": True,
                "temperature": 0,
                "apply_chat_template": False,
            },
            "return_num_output_tokens": True,
        }
        async for event in self.events(self.path, body):
            yield int(event["num_output_tokens"])


class VllmOpenAITarget(HttpTarget):
    """vLLM's OpenAI server, streaming `/v1/completions`; tokens counted from its usage."""

    name = "vllm-openai"

    def __init__(
        self, model: str, base_url: str | None, server: ServerProcess | None, max_connections: int
    ) -> None:
        super().__init__(base_url, server, max_connections)
        self.model = model

    async def stream(self, prompt: str, max_tokens: int) -> AsyncIterator[int]:
        body = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        seen = 0
        async for chunk in self.events("/v1/completions", body):
            usage = chunk.get("usage")
            if usage and chunk.get("choices"):
                total = int(usage["completion_tokens"])
                yield total - seen
                seen = total


class OursOpenAITarget(VllmOpenAITarget):
    """Our `/v1/completions`, streaming: the same requests as vLLM's server gets."""

    name = "ours-openai"


def ours_server(
    spec: ModelSpec,
    repository: Path,
    root: Path,
    log_dir: Path,
    kvcache_gib: int,
    name: str = "ours",
) -> ServerProcess:
    """`python -m app`, as `make serve` runs it (HTTP and gRPC), on free local ports."""
    port, grpc_port = free_ports(2)
    argv = [
        sys.executable,
        "-m",
        "app",
        "--model-repository",
        str(repository),
        "--models",
        spec.name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--grpc-port",
        str(grpc_port),
    ]
    return ServerProcess(
        name,
        argv,
        f"http://127.0.0.1:{port}",
        "/v2/health/ready",
        log_dir / f"{name}.log",
        server_env(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE=str(kvcache_gib)),
        root,
        grpc_url=f"127.0.0.1:{grpc_port}",
    )


def vllm_openai_server(
    spec: ModelSpec, root: Path, log_dir: Path, kvcache_gib: int
) -> ServerProcess:
    """vLLM's OpenAI server with the engine arguments of the model's model.json."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *vllm_cli_flags(spec.engine_args),
    ]
    return ServerProcess(
        "vllm-openai",
        argv,
        f"http://127.0.0.1:{port}",
        "/health",
        log_dir / "vllm-openai.log",
        server_env(HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE=str(kvcache_gib)),
        root,
    )


def vllm_cli_flags(engine_args: dict[str, Any]) -> list[str]:
    """model.json's `AsyncEngineArgs` as the flags of vLLM's server (`--max-model-len 2048`).

    A false boolean becomes `--no-FLAG` where vLLM has that form and is left out where the
    flag only switches something on (its default is then false).
    """
    actions = vllm_parser_actions()
    flags: list[str] = []
    for key, value in engine_args.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            negative = "--no-" + key.replace("_", "-")
            if value:
                flags.append(flag)
            elif negative in actions:
                flags.append(negative)
            elif flag not in actions or actions[flag].default not in (False, None):
                raise ValueError(f"cannot pass {key}=false to vLLM's server")
        elif isinstance(value, list):
            flags += [flag, *map(str, value)]
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value)]
        else:
            flags += [flag, str(value)]
    return flags


def vllm_parser_actions() -> dict[str, argparse.Action]:
    """vLLM's server options by flag (the parser moved between vLLM releases)."""
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # vLLM before the launchers package
        from vllm.entrypoints.openai.cli_args import make_arg_parser  # type: ignore[no-redef]
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser  # type: ignore[no-redef,attr-defined]
    parser = make_arg_parser(FlexibleArgumentParser())
    return {option: action for action in parser._actions for option in action.option_strings}

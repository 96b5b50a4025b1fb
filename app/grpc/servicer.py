"""Triton's `GRPCInferenceService` (KServe v2 gRPC) on the service definitions tritonclient
ships: health, metadata, config, repository, statistics, and `ModelStreamInfer`."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import grpc
import grpc.aio
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from app.core.routing import PIN_HEADER
from app.errors import ModelNotFoundError, NotSupportedError, ServerError
from app.grpc.log_settings import log_settings
from app.grpc.observe import INFERENCE_SERVICE, GrpcMetrics
from app.grpc.status import DECOUPLED_INFER_MESSAGE, status_code
from app.grpc.stream import StreamSession, metadata_value
from app.repository.overrides import check_override_files, parse_override
from app.runtime import Runtime
from app.security.restrictions import ApiGroup, api_group, declared_access
from app.triton.model_config import completed_config, metadata_json
from app.triton.repository import check_control_requests, load_model, unload_model
from app.triton.server_metadata import server_metadata
from app.triton.statistics import statistics_json
from app.triton.trace_extension import check_model, grpc_answer, grpc_change, settings_of

Request = TypeVar("Request")
Response = TypeVar("Response")
Context: TypeAlias = grpc.aio.ServicerContext
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED


def answers_errors(
    method: Callable[[Any, Request, Context], Awaitable[Response]],
) -> Callable[[Any, Request, Context], Awaitable[Response]]:
    """A unary RPC whose `ServerError`s end the call with their gRPC status and message."""

    @functools.wraps(method)
    async def handler(self: Any, request: Request, context: Context) -> Response:
        try:
            return await method(self, request, context)
        except ServerError as exc:
            await context.abort(status_code(exc), exc.message)
            raise  # not reached: abort raises

    return handler


def load_parameters(parameters: Any) -> dict[str, object]:
    """A load request's parameters as their values (`config` a string, `file:` bytes)."""
    values: dict[str, object] = {}
    for key, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        values[key] = getattr(parameter, choice) if choice else None
    return values


def parameter_sizes(parameters: Any) -> dict[str, int]:
    """Each load parameter's size in bytes (that of its `bytes_param`: a file's content)."""
    return {key: len(parameter.bytes_param) for key, parameter in parameters.items()}


def check_no_repository_name(request: Any) -> None:
    """Triton's refusal (UNIMPLEMENTED) of a repository call that names a repository."""
    if request.repository_name:
        raise NotSupportedError("'repository_name' specification is not supported")


def not_supported(feature: str, group: ApiGroup) -> Callable[[Any, Any, Context], Awaitable[Any]]:
    """An RPC of `group` answering UNIMPLEMENTED."""

    @api_group(group)
    async def handler(self: Any, request: Any, context: Context) -> Any:
        await context.abort(UNIMPLEMENTED, f"{feature} is not supported by this server")

    return handler


class InferenceServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Every RPC of the service, served from the process's runtime."""

    def __init__(self, runtime: Runtime, metrics: GrpcMetrics, log_prompts: bool = False) -> None:
        self._runtime = runtime
        self._metrics = metrics
        self._log_prompts = log_prompts

    def server_ready(self) -> bool:
        return self._runtime.registry.is_ready

    @api_group(ApiGroup.HEALTH)
    async def ServerLive(self, request: Any, context: Context) -> service_pb2.ServerLiveResponse:
        return service_pb2.ServerLiveResponse(live=True)

    @api_group(ApiGroup.HEALTH)
    async def ServerReady(self, request: Any, context: Context) -> service_pb2.ServerReadyResponse:
        return service_pb2.ServerReadyResponse(ready=self.server_ready())

    @api_group(ApiGroup.HEALTH)
    async def ModelReady(self, request: Any, context: Context) -> service_pb2.ModelReadyResponse:
        """False (not an error) for a model that is unknown or not loaded, as Triton answers."""
        try:
            served = self._runtime.registry.get(request.name, request.version)
        except ModelNotFoundError:
            return service_pb2.ModelReadyResponse(ready=False)
        return service_pb2.ModelReadyResponse(ready=served.is_ready)

    @api_group(ApiGroup.METADATA)
    async def ServerMetadata(
        self, request: Any, context: Context
    ) -> service_pb2.ServerMetadataResponse:
        return service_pb2.ServerMetadataResponse(**server_metadata())

    @api_group(ApiGroup.METADATA)
    @answers_errors
    async def ModelMetadata(
        self, request: Any, context: Context
    ) -> service_pb2.ModelMetadataResponse:
        registry = self._runtime.registry
        served = registry.get(request.name, request.version)
        versions = (
            [served.version]
            if request.version
            else [v.version for v in registry.versions(request.name)]
        )
        return json_format.ParseDict(
            metadata_json(request.name, versions, served.spec), service_pb2.ModelMetadataResponse()
        )

    @api_group(ApiGroup.MODEL_CONFIG)
    @answers_errors
    async def ModelConfig(self, request: Any, context: Context) -> service_pb2.ModelConfigResponse:
        served = self._runtime.registry.get(request.name, request.version)
        return service_pb2.ModelConfigResponse(config=completed_config(served.spec))

    @api_group(ApiGroup.STATISTICS)
    @answers_errors
    async def ModelStatistics(
        self, request: Any, context: Context
    ) -> service_pb2.ModelStatisticsResponse:
        data = statistics_json(
            self._runtime.registry, self._runtime.statistics, request.name, request.version
        )
        return json_format.ParseDict(data, service_pb2.ModelStatisticsResponse())

    @api_group(ApiGroup.MODEL_REPOSITORY)
    @answers_errors
    async def RepositoryIndex(
        self, request: Any, context: Context
    ) -> service_pb2.RepositoryIndexResponse:
        check_no_repository_name(request)
        response = service_pb2.RepositoryIndexResponse()
        for entry in self._runtime.registry.index():
            if not request.ready or entry.state == "READY":
                response.models.add(
                    name=entry.name,
                    version=entry.version or "",
                    state=entry.state,
                    reason=entry.reason,
                )
        return response

    @api_group(ApiGroup.MODEL_REPOSITORY)
    @answers_errors
    async def RepositoryModelLoad(
        self, request: Any, context: Context
    ) -> service_pb2.RepositoryModelLoadResponse:
        check_no_repository_name(request)
        registry = self._runtime.registry
        check_control_requests(registry)
        check_override_files(parameter_sizes(request.parameters), registry.override_limits)
        override = parse_override(load_parameters(request.parameters))
        await load_model(registry, self._runtime.statistics, request.model_name, override)
        return service_pb2.RepositoryModelLoadResponse()

    @api_group(ApiGroup.MODEL_REPOSITORY)
    @answers_errors
    async def RepositoryModelUnload(
        self, request: Any, context: Context
    ) -> service_pb2.RepositoryModelUnloadResponse:
        check_no_repository_name(request)
        dependents = request.parameters.get("unload_dependents")
        if dependents is not None and dependents.WhichOneof("parameter_choice") != "bool_param":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "invalid value type for 'unload_dependents' parameter, expected bool_param.",
            )
        await unload_model(self._runtime.registry, request.model_name)
        return service_pb2.RepositoryModelUnloadResponse()

    @api_group(ApiGroup.INFERENCE)
    @answers_errors
    async def ModelInfer(self, request: Any, context: Context) -> service_pb2.ModelInferResponse:
        """The backend's models are decoupled: Triton refuses unary inference on them."""
        self._runtime.registry.get(request.model_name, request.model_version)
        await context.abort(UNIMPLEMENTED, DECOUPLED_INFER_MESSAGE)
        return service_pb2.ModelInferResponse()  # not reached: abort raises

    @api_group(ApiGroup.INFERENCE)
    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[service_pb2.ModelInferRequest], context: Context
    ) -> None:
        pin = metadata_value(context, PIN_HEADER)
        session = StreamSession(self._runtime, self._metrics, context, self._log_prompts, pin)
        await session.run(request_iterator)

    SystemSharedMemoryStatus = not_supported("system shared memory", ApiGroup.SHARED_MEMORY)
    SystemSharedMemoryRegister = not_supported("system shared memory", ApiGroup.SHARED_MEMORY)
    SystemSharedMemoryUnregister = not_supported("system shared memory", ApiGroup.SHARED_MEMORY)
    CudaSharedMemoryStatus = not_supported("CUDA shared memory", ApiGroup.SHARED_MEMORY)
    CudaSharedMemoryRegister = not_supported("CUDA shared memory", ApiGroup.SHARED_MEMORY)
    CudaSharedMemoryUnregister = not_supported("CUDA shared memory", ApiGroup.SHARED_MEMORY)

    @api_group(ApiGroup.TRACE)
    @answers_errors
    async def TraceSetting(
        self, request: Any, context: Context
    ) -> service_pb2.TraceSettingResponse:
        """Triton's trace extension: change the global (or a model's) trace setting, answer it."""
        settings = settings_of(self._runtime.trace_settings)
        check_model(self._runtime.registry, request.model_name)
        if request.settings:
            change = grpc_change(
                {name: list(value.value) for name, value in request.settings.items()}
            )
            settings.update(request.model_name, change)
            if self._runtime.group is not None:
                await self._runtime.group.share_trace_setting(request.model_name, change)
        response = service_pb2.TraceSettingResponse()
        for name, values in grpc_answer(settings, request.model_name).items():
            response.settings[name].value.extend(values)
        return response

    @api_group(ApiGroup.LOGGING)
    @answers_errors
    async def LogSettings(self, request: Any, context: Context) -> service_pb2.LogSettingsResponse:
        """Triton's logging extension: change log settings at once, answer them all."""
        return await log_settings(request, self._runtime.group)


class HealthServicer(health_pb2_grpc.HealthServicer):
    """`grpc.health.v1.Health/Check` from the server's readiness, as Triton registers it."""

    def __init__(self, inference: InferenceServicer) -> None:
        self._inference = inference

    @api_group(ApiGroup.HEALTH)
    async def Check(self, request: Any, context: Context) -> health_pb2.HealthCheckResponse:
        if request.service not in ("", INFERENCE_SERVICE):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service '{request.service}'")
        status = health_pb2.HealthCheckResponse
        return status(
            status=status.SERVING if self._inference.server_ready() else status.NOT_SERVING
        )

    Watch = not_supported("watching the health status", ApiGroup.HEALTH)


SERVICES = (
    (service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"], InferenceServicer),
    (health_pb2.DESCRIPTOR.services_by_name["Health"], HealthServicer),
)
"""Each service the server registers (its descriptor, as tritonclient and grpcio-health ship
it) and the servicer implementing it."""


def method_groups() -> dict[str, ApiGroup]:
    """`/service/Method` -> the restricted group its servicer method declares (`api_group`)."""
    groups: dict[str, ApiGroup] = {}
    for service, servicer in SERVICES:
        for method in service.methods:
            access = declared_access(getattr(servicer, method.name, None))
            if access is not None and access.group is not None:
                groups[f"/{service.full_name}/{method.name}"] = access.group
    return groups

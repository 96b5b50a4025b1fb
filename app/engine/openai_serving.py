"""vLLM's own OpenAI serving classes (completions, chat) over one model version's `AsyncLLM`,
every engine request of theirs admitted, bounded and observed by the generation core."""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel
from vllm.lora.request import LoRARequest
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.exceptions import EngineDeadError

from app.core.guard import RequestGuard
from app.engine.grammars import ENGINE_ERROR, failure_of, grammar_check
from app.engine.openai_acceptance import Acceptances, begun
from app.engine.openai_bodies import parse
from app.engine.openai_compat import (
    BaseModelPath,
    ChatCompletionRequest,
    CompletionRequest,
    ErrorResponse,
    OnlineRenderer,
    OpenAIServingChat,
    OpenAIServingCompletion,
    OpenAIServingModels,
    ToolParserManager,
    accepted,
    create_error_response,
    load_chat_template,
)
from app.engine.openai_limits import check_limits, check_logprobs, values_of
from app.engine.openai_options import OpenAIOptions
from app.engine.openai_utility import VllmOpenAIUtility
from app.engine.timeline import engine_timeline
from app.errors import (
    EngineUnhealthyError,
    InvalidRequestError,
    ModelConfigError,
    ModelNotFoundError,
    NotSupportedError,
    OverloadedError,
    PayloadTooLargeError,
    RequestTimeoutError,
    ServerError,
    UnprocessableContentError,
)
from app.repository.layout import ModelSpec

logger = logging.getLogger(__name__)

ERROR_BY_STATUS: dict[int, type[ServerError]] = {
    400: InvalidRequestError,
    404: ModelNotFoundError,
    413: PayloadTooLargeError,
    422: UnprocessableContentError,
    501: NotSupportedError,
    503: OverloadedError,
    504: RequestTimeoutError,
}
"""vLLM's error statuses as the server's own exceptions (each frontend answers them)."""

EngineRequests = dict[str, set[str]]
"""Admitted request id -> the ids of the engine requests it runs, for aborting them."""
EngineOutputs = Callable[..., AsyncIterator[Any]]
"""`(admitted_id, prompt, sampling_params, request_id, **kwargs)`: `AsyncLLM.generate` for a
request admitted as `admitted_id` (`VllmEngine.outputs`: resumed on a replacement engine)."""


class VllmOpenAIServing:
    """The OpenAI API of one model version (the frontend's `OpenAIServing`): request bodies
    read and answered by vLLM's serving classes, which run on the engine through the
    request's guard."""

    def __init__(
        self,
        llm: Any,
        spec: ModelSpec,
        options: OpenAIOptions,
        requests: EngineRequests,
        generate: EngineOutputs | None = None,
    ) -> None:
        self._llm = llm
        self._name = spec.name
        self._requests = requests
        self._generate = generate
        models = OpenAIServingModels(
            engine_client=llm,
            base_model_paths=[
                BaseModelPath(name=spec.name, model_path=str(spec.engine_args.get("model")))
            ],
            lora_modules=None,
        )
        for index, (name, path) in enumerate((spec.loras or {}).items()):
            # the Triton path's ids (index + 1): one id per adapter for the engine
            models.lora_requests[name] = LoRARequest(name, index + 1, str(path))
        self._completion, self._chat = build_servers(llm, models, options)
        self.utility = VllmOpenAIUtility(
            llm, models, options, spec.name, (spec.version_path.parent.parent,)
        )
        """Tokenization and runtime LoRA adapters (vLLM's utility routes)."""

    async def create_completion(
        self,
        body: dict[str, Any],
        *,
        guard: RequestGuard,
        adapter: str | None,
        headers: Mapping[str, str],
    ) -> dict[str, Any] | AsyncGenerator[str, None]:
        """`POST /v1/completions`: the response's JSON, or its SSE frames when it streams."""
        check_limits(guard, body)
        check_logprobs(body, self._llm.model_config.max_logprobs)
        request = parse(CompletionRequest, body)
        check_limits(guard, values_of(request))
        limit = guard.limits.max_tokens
        if limit is not None and (request.max_tokens is None or request.max_tokens > limit):
            request.max_tokens = limit
        return await self._serve(
            self._completion, "create_completion", request, guard, adapter, headers
        )

    async def create_chat_completion(
        self,
        body: dict[str, Any],
        *,
        guard: RequestGuard,
        adapter: str | None,
        headers: Mapping[str, str],
    ) -> dict[str, Any] | AsyncGenerator[str, None]:
        """`POST /v1/chat/completions`: the response's JSON, or its SSE frames when it streams."""
        completion_tokens = body.get("max_completion_tokens") is not None
        field = "max_completion_tokens" if completion_tokens else "max_tokens"
        check_limits(guard, body, field)
        check_logprobs(body, self._llm.model_config.max_logprobs)
        request = parse(ChatCompletionRequest, body)
        check_limits(guard, values_of(request, field), field)
        limit = guard.limits.max_tokens
        if (
            limit is not None
            and request.max_completion_tokens is None
            and request.max_tokens is None
        ):
            request.max_tokens = limit
        return await self._serve(
            self._chat, "create_chat_completion", request, guard, adapter, headers
        )

    async def _serve(
        self,
        server: Any,
        method: str,
        request: Any,
        guard: RequestGuard,
        adapter: str | None,
        headers: Mapping[str, str],
    ) -> dict[str, Any] | AsyncGenerator[str, None]:
        """Run one request on a copy of `server` whose engine is this request's guarded one."""
        request.model = adapter or self._name
        view = copy.copy(server)
        view.engine_client = engine = GuardedEngineClient(
            self._llm, guard, self._requests, self._generate
        )
        try:
            result = await getattr(view, method)(request, RawRequest(headers))
            if not isinstance(result, (ErrorResponse, BaseModel)):
                await grammars_checked(engine, result)
                result = await begun(result, engine.acceptances)
        except ServerError:
            raise
        except EngineDeadError as exc:
            raise EngineUnhealthyError() from exc
        except Exception as exc:  # vLLM's serving code raises some errors instead of returning them
            raise as_server_error(create_error_response(exc), exc) from exc
        if isinstance(result, ErrorResponse):
            raise as_server_error(result)
        if isinstance(result, BaseModel):
            return result.model_dump()
        return result  # type: ignore[no-any-return]


async def grammars_checked(engine: GuardedEngineClient, stream: Any) -> None:
    """A stream starts once the grammars of its engine requests passed their checks; else
    the stream is closed unread and the check's error raised."""
    try:
        await engine.grammars_checked()
    except BaseException:
        await stream.aclose()
        raise


def build_servers(llm: Any, models: Any, options: OpenAIOptions) -> tuple[Any, Any]:
    """vLLM's completion and chat servers with the model's options, as vLLM's server builds
    them from its flags; a `ModelConfigError` when the options do not fit the model."""
    reasoning = options.reasoning_parser or getattr(
        llm.vllm_config.structured_outputs_config, "reasoning_parser", ""
    )
    shared = {
        "request_logger": None,
        "chat_template": None
        if options.chat_template is None
        else load_chat_template(options.chat_template),
        "chat_template_content_format": options.chat_template_content_format,
        "trust_request_chat_template": options.trust_request_chat_template,
        "enable_auto_tools": options.enable_auto_tool_choice,
        "exclude_tools_when_tool_choice_none": options.exclude_tools_when_tool_choice_none,
        "tool_parser": options.tool_call_parser,
        "default_chat_template_kwargs": options.default_chat_template_kwargs,
        "tool_strict_level": options.tool_strict_level or "auto",
    }
    usage = {
        "return_tokens_as_token_ids": options.return_tokens_as_token_ids,
        "enable_prompt_tokens_details": options.enable_prompt_tokens_details,
        "enable_force_include_usage": options.enable_force_include_usage,
    }
    try:
        renderer = OnlineRenderer(
            llm.model_config,
            llm.renderer,
            **accepted(OnlineRenderer, {**shared, "reasoning_parser": reasoning or None}),
        )
        completion = OpenAIServingCompletion(
            llm, models, online_renderer=renderer, request_logger=None, **usage
        )
        chat_arguments = {
            **shared,
            **usage,
            "reasoning_parser": reasoning or "",
            "online_renderer": renderer,
        }
        chat = OpenAIServingChat(
            llm, models, options.response_role, **accepted(OpenAIServingChat, chat_arguments)
        )
    except Exception as exc:  # unknown parser names, parsers that do not fit the tokenizer...
        raise ModelConfigError(f"OpenAI options: {type(exc).__name__}: {exc}") from exc
    return completion, chat


def check_tool_options(options: OpenAIOptions) -> None:
    """What vLLM's server checks of its tool flags before it starts."""
    if options.enable_auto_tool_choice and not options.tool_call_parser:
        raise ModelConfigError("OPENAI_ENABLE_AUTO_TOOL_CHOICE needs OPENAI_TOOL_CALL_PARSER")
    if options.tool_call_parser:
        try:
            ToolParserManager.get_tool_parser(options.tool_call_parser)
        except KeyError as exc:
            known = ", ".join(sorted(ToolParserManager.list_registered()))
            raise ModelConfigError(
                f"OPENAI_TOOL_CALL_PARSER: no tool-call parser '{options.tool_call_parser}' "
                f"(known: {known})"
            ) from exc
    if options.tool_strict_level and not accepted(
        OnlineRenderer, {"tool_strict_level": options.tool_strict_level}
    ):
        raise ModelConfigError("OPENAI_TOOL_STRICT_LEVEL needs vLLM >= 0.30")


class GuardedEngineClient:
    """The engine as vLLM's serving classes see it while they serve one request: each
    `generate` runs through the request's guard and is known by the request's admitted id,
    so that a drain can abort it. Everything else is the engine's own."""

    def __init__(
        self,
        llm: Any,
        guard: RequestGuard,
        requests: EngineRequests,
        generate: EngineOutputs | None = None,
    ) -> None:
        self._llm = llm
        self._guard = guard
        self._requests = requests
        self._generate = generate
        self._grammar_checks: list[asyncio.Future[None]] = []
        self.acceptances = Acceptances(llm)
        """Whether the engine took each engine request (a stream begins once it has)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    async def grammars_checked(self) -> None:
        """Wait for the grammar checks of the engine requests started so far: a grammar the
        engine cannot use is refused before a stream starts."""
        await asyncio.gather(*self._grammar_checks)

    def generate(
        self, prompt: Any, sampling_params: Any, request_id: str, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The engine's stream through the guard. A stream the core ends (its deadline) ends
        quietly when it streams to the client: vLLM's stream generator would log it as a
        crash; the frontend reports `guard.failure` in the stream instead."""
        check_integers(sampling_params)
        admitted = self._guard.request_id

        def remember() -> None:
            self._requests.setdefault(admitted, set()).add(request_id)

        def forget() -> None:
            engine_ids = self._requests.get(admitted)
            if engine_ids is not None:
                engine_ids.discard(request_id)
                if not engine_ids:
                    del self._requests[admitted]

        if self._generate is None:
            outputs = self._llm.generate(prompt, sampling_params, request_id, *args, **kwargs)
        else:
            outputs = self._generate(admitted, prompt, sampling_params, request_id, *args, **kwargs)
        streaming = getattr(sampling_params, "output_kind", None) == RequestOutputKind.DELTA
        outputs = self.acceptances.watch(request_id, outputs, streaming)
        if getattr(sampling_params, "structured_outputs", None) is not None:
            check = asyncio.ensure_future(grammar_check(self._llm).check(sampling_params, ""))
            check.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._grammar_checks.append(check)
            outputs = grammar_checked(check, outputs, sampling_params)
        return self._guard.stream(
            outputs,
            token_counts,
            quiet=streaming,
            on_start=remember,
            on_end=forget,
            timeline=engine_timeline,
        )


async def grammar_checked(
    check: asyncio.Future[None], outputs: Any, params: Any
) -> AsyncIterator[Any]:
    """The engine's outputs once the request's grammar passed its check; an output the
    engine ended with an error is the request's own fault (its grammar was in play), not an
    internal error."""
    try:
        await check
        async for output in outputs:
            if output.finished and any(c.finish_reason == ENGINE_ERROR for c in output.outputs):
                raise failure_of(params, "")
            yield output
    finally:
        await outputs.aclose()


class RawRequest:
    """What vLLM's serving code reads of the HTTP request: its headers (X-Request-Id, trace
    context, priority...) and a `state` it writes to."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.headers = headers
        self.state = SimpleNamespace()


INT_RANGE = (-(2**63), 2**64 - 1)
"""What the engine's message encoding (msgpack) can carry; a larger integer fails there, after
the engine has registered the request (which then never finishes)."""


def check_integers(sampling_params: Any) -> None:
    """Refuse, naming the field, an integer the engine could not be sent."""
    for name in getattr(sampling_params, "__struct_fields__", ()):
        if not fits(getattr(sampling_params, name, None)):
            raise InvalidRequestError(f"{name}: a number is out of range", param=name)


def fits(value: Any) -> bool:
    if isinstance(value, int):
        return INT_RANGE[0] <= value <= INT_RANGE[1]
    if isinstance(value, (list, tuple, set)):
        return all(fits(item) for item in value)
    if isinstance(value, dict):
        return all(fits(key) and fits(item) for key, item in value.items())
    return True


def token_counts(output: Any) -> tuple[int, int]:
    """A `RequestOutput`'s prompt tokens and new tokens (DELTA or FINAL_ONLY outputs)."""
    return len(output.prompt_token_ids or ()), sum(len(c.token_ids) for c in output.outputs)


def as_server_error(response: Any, cause: BaseException | None = None) -> ServerError:
    """vLLM's `ErrorResponse` as the server's exception of the same status."""
    error = response.error
    status = int(error.code)
    if status >= 500 and cause is not None:
        logger.error("vLLM's serving code failed: %s", cause, exc_info=cause)
    default = InvalidRequestError if 400 <= status < 500 else ServerError
    return ERROR_BY_STATUS.get(status, default)(error.message, param=error.param)

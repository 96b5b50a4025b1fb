"""vLLM's own OpenAI serving classes (completions, chat, responses) over one model version's
`AsyncLLM`, every engine request of theirs admitted, bounded and observed by the generation
core."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from functools import partial
from types import SimpleNamespace
from typing import Any, NamedTuple

from pydantic import BaseModel
from vllm.lora.request import LoRARequest
from vllm.v1.engine.exceptions import EngineDeadError

from app.core.guard import RequestGuard
from app.engine.vllm_openai.acceptance import begun
from app.engine.vllm_openai.compat import (
    BaseModelPath,
    ChatCompletionRequest,
    CompletionRequest,
    ErrorResponse,
    OnlineRenderer,
    OpenAIServingModels,
    ToolParserManager,
    load_chat_template,
    supported_arguments,
)
from app.engine.vllm_openai.errors import as_server_error, raised_by_vllm
from app.engine.vllm_openai.guarded_request import EngineOutputs, GuardedRequest, bound, serving
from app.engine.vllm_openai.guarded_request import EngineRequests as EngineRequests  # VllmEngine
from app.engine.vllm_openai.limits import ModelBounds, read_within_limits
from app.engine.vllm_openai.off_loop import OffLoopChat, OffLoopCompletion, finished_response
from app.engine.vllm_openai.options import OpenAIOptions
from app.engine.vllm_openai.responses import (
    responses_begun,
    responses_request,
    responses_server,
)
from app.engine.vllm_openai.utility import VllmOpenAIUtility
from app.errors import EngineUnhealthyError, ModelConfigError, ServerError
from app.repository.layout import ModelSpec
from app.schemas.openai import OpenAIEndpoint

logger = logging.getLogger(__name__)

VllmCreate = Callable[[Any, "RawRequest"], Awaitable[Any]]
"""A vLLM serving object's method (`create_completion`...): the request and the HTTP request
it reads, to the response, an `ErrorResponse` or a stream."""
StreamStart = Callable[[Any, GuardedRequest], Awaitable[AsyncGenerator[str, None]]]
"""How a stream vLLM's serving code returned is begun: its SSE frames once the engine took
its requests, or the refusal raised."""


class Servers(NamedTuple):
    """vLLM's serving objects of one model version."""

    completion: Any
    chat: Any
    responses: Any
    renderer: Any
    """The chat renderer they share (vLLM's `OnlineRenderer`)."""


def json_text(response: BaseModel, by_alias: bool = False) -> bytes:
    """A response's JSON as vLLM's server writes it, serialized by pydantic at once (not a
    dict first: a response of many log-probabilities takes a tenth of the time)."""
    return response.__pydantic_serializer__.to_json(response, by_alias=by_alias)


class VllmOpenAIServing:
    """The OpenAI API of one model version (the frontend's `OpenAIServing`): request bodies
    read and answered by vLLM's serving objects, built once on the engine; the engine
    requests they ask for run through the guard of the request they serve. `tokenizer`: the
    engine's, which bounds the prompts `/tokenize` takes."""

    def __init__(
        self,
        llm: Any,
        spec: ModelSpec,
        options: OpenAIOptions,
        requests: EngineRequests,
        tokenizer: Any,
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
        self._servers = build_servers(llm, models, options)
        self.utility = VllmOpenAIUtility(
            llm,
            models,
            options,
            spec.name,
            (spec.version_path.parent.parent,),
            max_prompt_chars=max_prompt_chars(llm.model_config.max_model_len, tokenizer),
        )
        """Tokenization and runtime LoRA adapters (vLLM's utility routes)."""

    def warm_up(self) -> None:
        """What `vllm serve` does before it serves: render one chat message (the chat
        template compiled, its content format found, the model's processor loaded), and a
        multimodal model's processing warmed, so that the first requests do not wait for it.
        Slow (a second on a small model): run it off the event loop."""
        warmup = getattr(self._servers.renderer, "warmup", None)  # vLLM >= 0.30
        if warmup is None:
            return
        try:
            warmup()
        except Exception:  # only the first requests' time is at stake
            logger.warning("%s: the chat renderer's warm-up failed", self._name, exc_info=True)

    async def create(
        self,
        endpoint: OpenAIEndpoint,
        body: dict[str, Any],
        *,
        guard: RequestGuard,
        adapter: str | None,
        headers: Mapping[str, str],
    ) -> bytes | AsyncGenerator[str, None]:
        """`endpoint`'s answer to `body`: the response's JSON text, or its SSE frames when
        it streams."""
        config = self._llm.model_config
        model = ModelBounds(config.max_logprobs, config.max_model_len, config.get_vocab_size())
        if endpoint is OpenAIEndpoint.RESPONSES:
            # vLLM's model reads each input item in Python (some 60 µs each): off the loop
            request = await asyncio.to_thread(responses_request, guard, body, model)
            return await self._serve(
                self._servers.responses.create_responses,
                request,
                guard,
                adapter,
                headers,
                start=responses_begun,
                dump=partial(json_text, by_alias=True),  # `text.format.schema`
            )
        if endpoint is OpenAIEndpoint.COMPLETIONS:
            request = read_within_limits(CompletionRequest, body, guard, model)
            create = self._servers.completion.create_completion
        else:
            field = endpoint.max_tokens_field(body)
            request = read_within_limits(ChatCompletionRequest, body, guard, model, field)
            create = self._servers.chat.create_chat_completion
        return await self._serve(create, request, guard, adapter, headers)

    async def _serve(
        self,
        create: VllmCreate,
        request: Any,
        guard: RequestGuard,
        adapter: str | None,
        headers: Mapping[str, str],
        start: StreamStart | None = None,
        dump: Callable[[BaseModel], bytes] = json_text,
    ) -> bytes | AsyncGenerator[str, None]:
        """Run one request with vLLM's `create`, serving it (the engine requests it asks for are the
        request's): a stream is begun by `start` (by default once the engine took its
        requests) and read serving it, a response built off the loop where vLLM deferred it
        (`finished_response`) and written by `dump`."""
        request.model = adapter or self._name
        served = GuardedRequest(self._llm, guard, self._requests, self._generate)
        try:
            with serving(served):
                result = await finished_response(await create(request, RawRequest(headers)))
                if not isinstance(result, (ErrorResponse, BaseModel)):
                    result = bound(await (start or begun_stream)(result, served), served)
        except ServerError:
            raise
        except EngineDeadError as exc:
            raise EngineUnhealthyError() from exc
        except Exception as exc:  # vLLM's serving code raises some errors instead of returning them
            raise raised_by_vllm(exc) from exc
        if isinstance(result, ErrorResponse):
            raise as_server_error(result)
        if isinstance(result, BaseModel):
            return dump(result)
        return result  # type: ignore[no-any-return]


async def begun_stream(stream: Any, served: GuardedRequest) -> AsyncGenerator[str, None]:
    """A stream starts once the grammars of its engine requests passed their checks (else it
    is closed unread and the check's error raised) and the engine took them."""
    try:
        await served.grammars_checked()
    except BaseException:
        await stream.aclose()
        raise
    return await begun(stream, served.acceptances)


def build_servers(llm: Any, models: Any, options: OpenAIOptions) -> Servers:
    """vLLM's completion, chat and responses servers with the model's options, as vLLM's
    server builds them from its flags; a `ModelConfigError` when the options do not fit the
    model."""
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
            **supported_arguments(
                OnlineRenderer, {**shared, "reasoning_parser": reasoning or None}
            ),
        )
        completion = OffLoopCompletion(
            llm, models, online_renderer=renderer, request_logger=None, **usage
        )
        chat_arguments = {
            **shared,
            **usage,
            "reasoning_parser": reasoning or "",
            "online_renderer": renderer,
        }
        chat = OffLoopChat(
            llm,
            models,
            options.response_role,
            **supported_arguments(OffLoopChat, chat_arguments),
        )
        responses = responses_server(llm, models, chat_arguments)
    except Exception as exc:  # unknown parser names, parsers that do not fit the tokenizer...
        raise ModelConfigError(f"OpenAI options: {type(exc).__name__}: {exc}") from exc
    return Servers(completion, chat, responses, renderer)


def max_prompt_chars(context: int, tokenizer: Any) -> int | None:
    """vLLM's bound on a generating request's prompt: the model's context in tokens times
    the characters of its tokenizer's longest token (None without a tokenizer)."""
    if tokenizer is None:
        return None
    return context * int(tokenizer.max_chars_per_token)


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
    if options.tool_strict_level and not supported_arguments(
        OnlineRenderer, {"tool_strict_level": options.tool_strict_level}
    ):
        raise ModelConfigError("OPENAI_TOOL_STRICT_LEVEL needs vLLM >= 0.30")


class RawRequest:
    """What vLLM's serving code reads of the HTTP request: its headers (X-Request-Id, trace
    context, priority...) and a `state` it writes to."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.headers = headers
        self.state = SimpleNamespace()

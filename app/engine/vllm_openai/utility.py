"""vLLM's utility API for one model version, by vLLM's own serving code: `/tokenize` and
`/detokenize` (its tokenization server) and runtime LoRA adapters (`/v1/load_lora_adapter`,
`/v1/unload_lora_adapter`, its model registry's)."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from app.core.limits import json_size
from app.engine.vllm_openai.bodies import parse
from app.engine.vllm_openai.compat import (
    ErrorResponse,
    OnlineRenderer,
    load_chat_template,
    supported_arguments,
)
from app.engine.vllm_openai.errors import as_server_error, raised_by_vllm
from app.engine.vllm_openai.options import OpenAIOptions
from app.errors import InvalidRequestError, NotSupportedError
from app.security.redaction import client_message

logger = logging.getLogger(__name__)

try:  # 0.32
    from vllm.entrypoints.serve.lora.protocol import (
        LoadLoRAAdapterRequest,
        UnloadLoRAAdapterRequest,
    )
    from vllm.entrypoints.serve.tokenize.protocol import (
        DetokenizeRequest,
        TokenizeChatRequest,
        TokenizeCompletionRequest,
    )
    from vllm.entrypoints.serve.tokenize.serving import ServingTokenization
except ImportError:  # 0.25
    from vllm.entrypoints.openai.protocol import (  # type: ignore[no-redef]
        DetokenizeRequest,
        LoadLoRAAdapterRequest,
        TokenizeChatRequest,
        TokenizeCompletionRequest,
        UnloadLoRAAdapterRequest,
    )
    from vllm.entrypoints.openai.serving_tokenization import (  # type: ignore[no-redef]
        OpenAIServingTokenization as ServingTokenization,
    )

UNAVAILABLE = "tokenization is not available with this vLLM release"


class VllmOpenAIUtility:
    """Tokenization and runtime LoRA adapters of one model version (the OpenAI frontend's
    `OpenAIUtility`). `models`: the version's `OpenAIServingModels`, shared with its
    completion and chat servers, so an adapter loaded here serves their requests.
    `max_prompt_chars`: vLLM's bound on a generating request's prompt (its context in tokens
    times the characters of the longest token), which `/tokenize` applies too (None: the
    model has no tokenizer)."""

    def __init__(
        self,
        llm: Any,
        models: Any,
        options: OpenAIOptions,
        name: str,
        adapter_roots: tuple[Path, ...],
        max_prompt_chars: int | None,
    ) -> None:
        self._name = name
        self._llm = llm
        self._max_prompt_chars = max_prompt_chars
        self._models = models
        self._static = set(models.lora_requests)
        for _ in self._static:  # runtime adapters get ids after multi_lora.json's (1..n)
            models.lora_id_counter.inc(1)
        self._adapter_roots = adapter_roots
        self.lora_enabled = bool(getattr(llm.vllm_config, "lora_config", None))
        self._tokenization = tokenization_server(llm, models, options)

    @property
    def runtime_adapters(self) -> list[str]:
        """The adapters loaded at run time (not those of multi_lora.json)."""
        return sorted(set(self._models.lora_requests) - self._static)

    async def tokenize(self, body: dict[str, Any], adapter: str | None) -> dict[str, Any]:
        """`POST /tokenize`: a prompt, or chat messages through the chat template, as token
        ids; one longer than any prompt the model could take is refused before the
        tokenizer, which the generating requests share, works through it."""
        request_class = TokenizeChatRequest if "messages" in body else TokenizeCompletionRequest
        request = parse(request_class, body)
        if self._max_prompt_chars is not None:
            check_prompt_size(body, self._max_prompt_chars)
        return await self._answer("create_tokenize", request, adapter)

    async def detokenize(self, body: dict[str, Any], adapter: str | None) -> dict[str, Any]:
        """`POST /detokenize`: token ids as text."""
        return await self._answer("create_detokenize", parse(DetokenizeRequest, body), adapter)

    async def _answer(self, method: str, request: Any, adapter: str | None) -> dict[str, Any]:
        if self._tokenization is None:
            raise NotSupportedError(UNAVAILABLE)
        request.model = adapter or self._name
        try:
            result = await getattr(self._tokenization, method)(request, None)
        except Exception as exc:  # vLLM's code raises some errors instead of returning them
            raise raised_by_vllm(exc) from exc
        if isinstance(result, ErrorResponse):
            raise as_server_error(result)
        answer: dict[str, Any] = result.model_dump() if isinstance(result, BaseModel) else result
        return answer

    async def load_lora_adapter(self, body: dict[str, Any]) -> str:
        """Load an adapter from a folder of a model repository (vLLM's checks and answer)."""
        if not self.lora_enabled:
            raise InvalidRequestError(
                f"model '{self._name}' was not started with LoRA: set enable_lora in model.json",
                param="model",
            )
        request = parse(LoadLoRAAdapterRequest, body)
        request.lora_path = str(self._adapter_folder(request.lora_path))
        result = await self._models.load_lora_adapter(request)
        if isinstance(result, ErrorResponse):
            # the adapter's files are the client's: a folder that is no adapter is a 400, and
            # vLLM's message names the folder by its path under the repository only
            message = client_message(result.error.message, self._adapter_roots)
            raise InvalidRequestError(message, param=result.error.param or "lora_path")
        return str(result)

    async def unload_lora_adapter(self, body: dict[str, Any]) -> str:
        request = parse(UnloadLoRAAdapterRequest, body)
        if request.lora_name in self._static:
            raise InvalidRequestError(
                f"The lora adapter '{request.lora_name}' is one of the model's multi_lora.json: "
                "unload the model instead",
                param="lora_name",
            )
        result = await self._models.unload_lora_adapter(request)
        if isinstance(result, ErrorResponse):
            raise as_server_error(result)
        return str(result)

    def _adapter_folder(self, path: str) -> Path:
        """A client's adapter path: a folder inside one of the model repositories, nothing
        else (no other file of the server, no download); the path is not echoed back."""
        candidate = Path(path)
        for root in self._adapter_roots:
            folder = (candidate if candidate.is_absolute() else root / candidate).resolve()
            if folder.is_relative_to(root) and folder.is_dir():
                return folder
        raise InvalidRequestError(
            "lora_path: must be an adapter folder inside a model repository", param="lora_path"
        )


def tokenization_server(llm: Any, models: Any, options: OpenAIOptions) -> Any:
    """vLLM's tokenization server with the model's chat options, as vLLM's server builds it;
    None (and a warning) where this vLLM release builds it from arguments we cannot give."""
    template = None if options.chat_template is None else load_chat_template(options.chat_template)
    renderer = OnlineRenderer(
        llm.model_config,
        llm.renderer,
        **supported_arguments(
            OnlineRenderer,
            {
                "request_logger": None,
                "chat_template": template,
                "chat_template_content_format": options.chat_template_content_format,
                "trust_request_chat_template": options.trust_request_chat_template,
            },
        ),
    )
    known = {
        "engine_client": llm,
        "models": models,
        "online_renderer": renderer,
        "model_config": llm.model_config,
        "request_logger": None,
        "chat_template": template,
        "chat_template_content_format": options.chat_template_content_format,
        "default_chat_template_kwargs": options.default_chat_template_kwargs,
        "trust_request_chat_template": options.trust_request_chat_template,
    }
    parameters = inspect.signature(ServingTokenization.__init__).parameters
    missing = [
        name
        for name, parameter in parameters.items()
        if name != "self"
        and parameter.default is inspect.Parameter.empty
        and name not in known
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]
    if missing:
        logger.warning("%s (its tokenization server needs %s)", UNAVAILABLE, ", ".join(missing))
        return None
    return ServingTokenization(
        **{name: value for name, value in known.items() if name in parameters}
    )


def check_prompt_size(body: dict[str, Any], max_chars: int) -> None:
    """Refuse, naming the field, a prompt of more than `max_chars` characters (chat messages
    and tools: their JSON text), as vLLM refuses one on the generating routes."""
    if "messages" in body:
        field, size = "messages", json_size([body["messages"], body.get("tools")], max_chars)
    else:
        field, size = "prompt", len(body.get("prompt") or "")
    if size > max_chars:
        raise InvalidRequestError(
            f"{field}: over {max_chars} characters, more than any prompt this model can take "
            "(its context times the characters of its longest token)",
            param=field,
        )

"""OpenAI model ids for the repository's models, versions and LoRA adapters.

<model>                    its highest ready version (the highest version if none is ready)
<model>/<version>          that version
<adapter>                  a LoRA adapter of multi_lora.json, when one model has it
<model>[/<version>]/<adapter>   an adapter of that model (or version)
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.errors import InvalidRequestError, ModelNotFoundError
from app.openai.serving import openai_serving, serves_openai
from app.repository.registry import ModelRegistry
from app.repository.served_model import ServedModel

OWNER = "vllm"


@dataclass(frozen=True, slots=True)
class Target:
    """What a request's `model` names: a model version, and one of its adapters or none."""

    model: ServedModel
    adapter: str | None = None


def by_name(registry: ModelRegistry) -> dict[str, list[ServedModel]]:
    """The loaded versions of each model whose engine has an OpenAI API, oldest first."""
    versions: dict[str, list[ServedModel]] = defaultdict(list)
    for served in registry:
        if serves_openai(served):
            versions[served.name].append(served)
    return {name: sorted(found, key=lambda s: int(s.version)) for name, found in versions.items()}


def adapters_of(served: ServedModel) -> set[str]:
    """The version's LoRA adapters: multi_lora.json's and those loaded at run time."""
    serving = openai_serving(served)
    loaded = serving.utility.runtime_adapters if serving is not None else []
    return set(served.spec.loras or {}) | set(loaded)


def preferred(versions: list[ServedModel]) -> ServedModel:
    """The highest ready version, else the highest (whose admission then says why not)."""
    ready = [served for served in versions if served.is_ready]
    return (ready or versions)[-1]


def not_found(model_id: str) -> ModelNotFoundError:
    return ModelNotFoundError(f"The model `{model_id}` does not exist.", param="model")


def resolve(registry: ModelRegistry, model_id: str | None) -> Target:
    """The model version (and adapter) `model_id` names; 404 when it names none."""
    models = by_name(registry)
    if not model_id:
        if not models:
            raise ModelNotFoundError("No model is served on the OpenAI API", param="model")
        if len(models) > 1:
            raise InvalidRequestError(
                "model: required when the server serves several models", param="model"
            )
        return Target(preferred(next(iter(models.values()))))
    name, *rest = model_id.split("/")
    if name in models:
        return resolve_in_model(models[name], rest, model_id)
    if not rest:
        return resolve_adapter(models, model_id)
    raise not_found(model_id)


def resolve_in_model(versions: list[ServedModel], rest: list[str], model_id: str) -> Target:
    """`<model>`, `<model>/<version>`, `<model>/<adapter>`, `<model>/<version>/<adapter>`."""
    by_version = {served.version: served for served in versions}
    if rest and rest[0] in by_version:
        versions = [by_version[rest.pop(0)]]
    if not rest:
        return Target(preferred(versions))
    if len(rest) == 1:
        with_adapter = [served for served in versions if rest[0] in adapters_of(served)]
        if with_adapter:
            return Target(preferred(with_adapter), rest[0])
    raise not_found(model_id)


def resolve_adapter(models: dict[str, list[ServedModel]], adapter: str) -> Target:
    """A bare adapter name: the model that has it; a 400 when several models do."""
    owners = {
        name: [served for served in versions if adapter in adapters_of(served)]
        for name, versions in models.items()
    }
    owners = {name: found for name, found in owners.items() if found}
    if not owners:
        raise not_found(adapter)
    if len(owners) > 1:
        choices = ", ".join(f"'{name}/{adapter}'" for name in sorted(owners))
        raise InvalidRequestError(
            f"model: several models have the adapter `{adapter}`: name one of {choices}",
            param="model",
        )
    return Target(preferred(next(iter(owners.values()))), adapter)


def model_cards(registry: ModelRegistry) -> list[dict[str, Any]]:
    """`GET /v1/models`: each model with a ready version, each ready version of a model that
    serves several, and each adapter of those, as OpenAI model objects."""
    cards = []
    for name, versions in by_name(registry).items():
        ready = [served for served in versions if served.is_ready]
        if not ready:
            continue
        cards.append(model_card(name, Target(ready[-1])))
        if len(ready) > 1:
            cards += [model_card(f"{name}/{served.version}", Target(served)) for served in ready]
        cards += adapter_cards(registry, name, ready)
    return cards


def adapter_cards(
    registry: ModelRegistry, name: str, ready: list[ServedModel]
) -> list[dict[str, Any]]:
    """One card per adapter of the model, under the id that reaches it (bare when unique)."""
    cards = []
    adapters = sorted({adapter for served in ready for adapter in adapters_of(served)})
    for adapter in adapters:
        target = resolve(registry, f"{name}/{adapter}")
        card_id = adapter if is_unique(registry, adapter) else f"{name}/{adapter}"
        parent = name if target.model is ready[-1] else f"{name}/{target.model.version}"
        cards.append(model_card(card_id, target, parent))
    return cards


def is_unique(registry: ModelRegistry, adapter: str) -> bool:
    try:
        resolve_adapter(by_name(registry), adapter)
    except InvalidRequestError:
        return False
    return True


def model_card(model_id: str, target: Target, parent: str | None = None) -> dict[str, Any]:
    """An OpenAI model object, with vLLM's extra fields (root, parent, max_model_len)."""
    return {
        "id": model_id,
        "object": "model",
        "created": int(time.time()),
        "owned_by": OWNER,
        "root": model_root(target),
        "parent": parent,
        "max_model_len": target.model.engine.max_model_len or None,
    }


def model_root(target: Target) -> str | None:
    """What the model (or adapter) was made from, as `vllm serve` shows it: a Hugging Face id
    as given; a folder of the model repository by its path in it; any other folder of the
    server by the model's (or adapter's) name, never its path on the server."""
    spec = target.model.spec
    if target.adapter:
        source: object = (spec.loras or {}).get(target.adapter, target.adapter)
        name = target.adapter
    else:
        source, name = spec.engine_args.get("model"), spec.name
    if source is None:
        return None
    path = Path(str(source))
    if not path.is_absolute():
        return str(source)
    repository = spec.version_path.parent.parent
    return str(path.relative_to(repository)) if path.is_relative_to(repository) else name


def model_card_for(registry: ModelRegistry, model_id: str) -> dict[str, Any]:
    """`GET /v1/models/{id}`: the card of any id that names a ready model; 404 otherwise."""
    target = resolve(registry, model_id)
    if not target.model.is_ready:
        raise not_found(model_id)
    if target.adapter is None:
        return model_card(model_id, target)
    name = target.model.name
    latest = preferred(by_name(registry)[name])
    parent = name if target.model is latest else f"{name}/{target.model.version}"
    return model_card(model_id, target, parent)

"""The engine layer: model repository, vLLM wrapper, request translation, registry."""

"""The OpenAI-compatible frontend: /v1/models, /v1/completions, /v1/chat/completions, served
by each model's OpenAI API (vLLM's own serving classes) through the generation core."""

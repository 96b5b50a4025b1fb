"""vLLM's own OpenAI serving code (completions, chat, responses, tokenization, LoRA adapters)
behind the one interface the OpenAI frontend knows (`app/openai/serving.py`): every engine
request it starts runs through the generation core's guard."""

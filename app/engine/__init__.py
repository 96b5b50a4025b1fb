"""The vLLM adapter: the only package that imports vLLM. Engine lifecycle (`AsyncLLM`),
neutral requests as `SamplingParams`/`LoRARequest`, model.json checks, `vllm:` metrics."""

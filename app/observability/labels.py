"""Labels of every per-model Prometheus series, as the Triton vLLM backend names them."""

MODEL_LABELS = ("model", "version")
ENGINE_LABELS = (*MODEL_LABELS, "instance")
"""An engine's series (`vllm:`): one per instance of a model version ("0" for the only one)."""

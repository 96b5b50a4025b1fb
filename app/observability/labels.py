"""Labels of every per-model Prometheus series, as the Triton vLLM backend names them."""

MODEL_LABELS = ("model", "version")

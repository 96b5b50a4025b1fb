"""The Triton vLLM backend's semantics, shared by the HTTP and gRPC frontends: its inputs as
a neutral request, its output fields, its model configuration and its error texts."""

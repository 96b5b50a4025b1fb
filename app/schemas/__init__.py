"""Triton's HTTP wire formats (the generate extension's and KServe v2's bodies): pure Pydantic,
no engine imports. gRPC's are the protobuf messages tritonclient ships; OpenAI's, vLLM's models."""

"""The wire formats: Triton's HTTP bodies (the generate extension's and KServe v2's) and the
names of OpenAI's generating routes; pure Pydantic, no engine imports. gRPC's are the
protobuf messages tritonclient ships; OpenAI's bodies, vLLM's models."""

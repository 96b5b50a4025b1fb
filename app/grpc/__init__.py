"""Triton's gRPC frontend: KServe v2 `GRPCInferenceService` on port 8001, on grpc.aio and the
service definitions tritonclient ships; the backend's semantics come from app/triton."""

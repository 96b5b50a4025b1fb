"""Triton's HTTP frontend: the generate extension and the KServe v2 routes, as thin FastAPI
routers that validate, call the core and format (OpenAI's frontend is app/openai, gRPC app/grpc)."""

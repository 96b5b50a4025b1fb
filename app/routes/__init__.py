"""Thin FastAPI routers: validate, call the engine layer, format."""

"""Wire formats of the HTTP API (pure Pydantic, no engine imports)."""

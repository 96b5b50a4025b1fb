"""The model repository and its lifecycle: Triton's folder layout and config.pbtxt, versions,
the registry of served models, loading, unloading, admission and drain."""

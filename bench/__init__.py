"""Benchmarks: our server against the in-process engine and vLLM's OpenAI server.

`python -m bench --help` lists the options; `make bench` runs the default workload.
"""

"""Several frontend processes sharing each model version's engine core (`FRONTEND_PROCESSES`).

The supervisor (`supervisor.py`) binds the ports, runs each engine core (`cores.py`) and
spawns the worker processes; every worker serves HTTP, gRPC and the OpenAI routes on its own
client of the shared cores (`worker.py`), reaching the supervisor over one channel
(`channel.py`) for its core slots, repository changes and the aggregated metrics.
"""

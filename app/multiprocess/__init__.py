"""Several frontend processes sharing each model version's engine core (`FRONTEND_PROCESSES`).

The supervisor (`supervisor.py`) binds the ports, runs each engine core (`cores.py`) and
spawns the frontend processes; every frontend process serves HTTP, gRPC and the OpenAI routes
on its own client of the shared cores, reaching the supervisor over one channel
(`channel.py`, the calls of `ops.py`) for its core slots, repository changes and the
aggregated metrics (`metrics.py`): its side of the channel is `link.py`. What a frontend
process runs and which engine cores are hosted come from app/launch/frontend_group.py.
"""

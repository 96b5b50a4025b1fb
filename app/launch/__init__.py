"""How the server starts, once the command line (app/cli) has given its settings: one process
serving HTTP and gRPC (`server.py`), or with `FRONTEND_PROCESSES` > 1 a supervisor and its
frontend processes (`frontend_group.py`). The app itself is built by app/main.py."""

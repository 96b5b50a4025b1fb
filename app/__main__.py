"""`python -m app`: the same program as `tritonserver` (Triton's flags, and ours: `--help`)."""

from app.cli.main import main

if __name__ == "__main__":
    main(prog="python -m app")

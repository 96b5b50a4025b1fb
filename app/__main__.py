"""`python -m app`: the same program as `tritonserver` (Triton's flags, and ours: `--help`)."""

from app.cli.main import main

__spec__ = None
"""Named by its path, not as `app.__main__`: multiprocessing then runs this file first in each
process it spawns (vLLM's engine cores and workers, frontend processes), as `__mp_main__`,
where a package's `__main__` named by its module is skipped. Its import of the command line
sets up the log filters there before vLLM is imported (app/observability/vllm_notes.py)."""

if __name__ == "__main__":
    main(prog="python -m app")

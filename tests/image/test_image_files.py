"""The images themselves: size within the budget the docs give, HEALTHCHECK kept, the
with-model image's weights readable by the user it runs as, and vLLM's own command working."""

from __future__ import annotations

import json
import os

from tests.image.conftest import IMAGE_CPU, TOOL, report
from tests.image.container import run

IMAGE_CPU_WITH_MODEL = os.environ.get("IMAGE_CPU_WITH_MODEL", "")
SIZE_BUDGET_BYTES = 2_500_000_000  # docs/deployment.md: the CPU image, without the model


def size(image: str) -> int:
    return int(run(TOOL, "image", "inspect", "--format", "{{.Size}}", image).stdout)


def test_the_cpu_image_stays_within_its_size_budget() -> None:
    cpu, with_model = size(IMAGE_CPU), size(IMAGE_CPU_WITH_MODEL)
    report(f"{IMAGE_CPU}: {cpu / 1e9:.2f} GB; {IMAGE_CPU_WITH_MODEL}: {with_model / 1e9:.2f} GB")
    assert cpu <= SIZE_BUDGET_BYTES


def test_the_image_keeps_its_healthcheck() -> None:
    """podman drops HEALTHCHECK unless it builds with --format docker."""
    (image,) = json.loads(run(TOOL, "image", "inspect", IMAGE_CPU).stdout)
    healthcheck = image["Config"].get("Healthcheck") or image.get("Healthcheck")  # docker, podman
    assert healthcheck["Test"] == ["CMD", "python", "/app/docker/healthcheck.py"]


def test_the_with_model_image_user_reads_every_model_file() -> None:
    """The server runs as uid 1000; a model folder prepared by root must be readable to it."""
    read_all = (
        "import os, pathlib; "
        "folder = pathlib.Path('/app/.cache/models/smollm2'); "
        "files = [p for p in folder.rglob('*') if p.is_file()]; "
        "[p.read_bytes() for p in files]; print(os.getuid(), len(files))"
    )
    command = ("run", "--rm", "--entrypoint", "python", IMAGE_CPU_WITH_MODEL, "-c", read_all)
    result = run(TOOL, *command)
    uid, count = result.stdout.split()
    assert uid == "1000" and int(count) >= 5


def test_vllms_own_command_answers_in_the_image() -> None:
    """`vllm --version` (and so `vllm bench serve`) with the CPU build, as in `.venv`."""
    command = ("run", "--rm", "--entrypoint", "vllm", IMAGE_CPU, "--version")
    assert run(TOOL, *command).stdout.strip().startswith("0.32.0")

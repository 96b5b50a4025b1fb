"""The container command lines the docs give, as the image tests run them: the README's
`docker run` and curl lines, docs/deployment.md's compose and helm lines."""

from __future__ import annotations

import re
from pathlib import Path

from app.paths import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
DEPLOYMENT_DOC = PROJECT_ROOT / "docs" / "deployment.md"
SHELL_FENCES = {"```bash", "```sh", "```console"}


def shell_blocks(text: str) -> list[str]:
    """The text of each fenced block whose language is a shell's."""
    blocks: list[str] = []
    current: list[str] | None = None
    fence = ""
    for line in text.splitlines():
        if current is None and line.startswith("```"):
            fence, current = line.strip(), []
        elif current is not None and line.strip() == "```":
            if fence in SHELL_FENCES:
                blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def commands(path: Path) -> list[str]:
    """Each command of the file's shell blocks, continuation lines joined, comments dropped."""
    found: list[str] = []
    for block in shell_blocks(path.read_text()):
        joined = re.sub(r"\\\n\s*", " ", block)
        found += [line.strip() for line in joined.splitlines() if line.strip()[:1] not in ("", "#")]
    return found


def starting_with(path: Path, prefix: str) -> list[str]:
    return [command for command in commands(path) if command.startswith(prefix)]


def only(path: Path, prefix: str, containing: str = "") -> str:
    """The one command of the file that starts with `prefix` (and contains `containing`)."""
    matches = [c for c in starting_with(path, prefix) if containing in c]
    expected = f"{path.name}: expected one '{prefix}' line with '{containing}'"
    assert len(matches) == 1, f"{expected}, got {matches}"
    return matches[0]


def on_ports(command: str, ports: dict[int, int]) -> str:
    """The command with each documented host port replaced (`-p 8000:8000`, `localhost:8000`),
    so that the test's container takes free ports."""
    for documented, free in ports.items():
        command = re.sub(rf"-p {documented}:", f"-p {free}:", command)
        command = command.replace(f"localhost:{documented}", f"localhost:{free}")
    return command

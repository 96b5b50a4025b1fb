"""Hand this host's pip configuration to an image build (`podman build -v`), read-only.

Where pip is set up to take packages from a mirror or a local wheel folder, the image's pip
should do the same. This writes the host's effective settings (its config files and PIP_*
variables, as `pip config list` shows them) into one pip.conf under the given folder and
prints the `-v` options that mount it at /etc/pip.conf, with every local file or folder the
settings name (certificates, constraints, find-links, file:// indexes) at the same path.
It prints nothing where the host has no pip configuration.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

PATH_KEYS = {"cert", "client-cert", "constraint", "find-links", "index-url", "extra-index-url"}


def effective_settings() -> dict[str, str]:
    """`pip config list` as option -> value: config files, then PIP_* variables on top."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    files: dict[str, str] = {}
    variables: dict[str, str] = {}
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        section, _, option = key.rpartition(".")
        if section in ("global", "install", "download"):
            files[option] = value.strip("'\"")
        elif section == ":env:":
            variables[option] = value.strip("'\"")
    return files | variables


def local_paths(settings: dict[str, str]) -> list[Path]:
    """Files and folders on this host that the settings name."""
    paths = []
    for option in PATH_KEYS & settings.keys():
        for word in settings[option].split():
            path = Path(word.removeprefix("file://"))
            if path.name == "simple" and option.endswith("index-url"):
                path = path.parent  # a local index's pages link to files beside simple/
            if path.is_absolute() and path.exists():
                paths.append(path)
    return sorted(set(paths))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="where to write the merged pip.conf")
    args = parser.parse_args(argv)
    settings = effective_settings()
    if not settings:
        return 0
    args.folder.mkdir(parents=True, exist_ok=True)
    conf = args.folder.resolve() / "pip.conf"
    lines = ["[global]", *(f"{option} = {value}" for option, value in sorted(settings.items()))]
    conf.write_text("\n".join(lines) + "\n")
    mounts = [(conf, Path("/etc/pip.conf"))] + [(path, path) for path in local_paths(settings)]
    print(" ".join(f"-v {source}:{target}:ro" for source, target in mounts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

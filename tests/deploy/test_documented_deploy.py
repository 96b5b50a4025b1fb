"""The deployment docs' `helm install` lines render and validate, and the chart's default
image is the one `make image` builds, with the model where the chart's model.json names it."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as schemas

from app.paths import PROJECT_ROOT
from tests.deploy.conftest import CHART, container, helm, render
from tests.deploy.test_makefile import dry_run
from tests.image.lines import DEPLOYMENT_DOC, starting_with

HELM_LINES = starting_with(DEPLOYMENT_DOC, "helm install")


def test_the_docs_show_helm_install_lines() -> None:
    assert len(HELM_LINES) >= 3


@pytest.mark.parametrize("line", HELM_LINES)
def test_a_documented_helm_install_renders_valid_manifests(line: str) -> None:
    """`helm install NAME CHART ARGS...` rendered by `helm template` with the same arguments
    (no cluster here), then checked against the Kubernetes schemas."""
    _, _, release, chart, *args = shlex.split(line)
    assert (PROJECT_ROOT / chart) == CHART
    result = helm("template", release, str(CHART), *args, cwd=PROJECT_ROOT)
    assert result.returncode == 0, result.stderr
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(result.stdout) if d]
    for doc in docs:
        if doc["kind"] in {"ServiceMonitor", "LeaderWorkerSet"}:
            continue
        schemas.validate(doc, schemas.latest_version(), strict=True)
    images = {
        c["image"]
        for d in docs
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    if "image.repository=registry.example.com/triton-vllm-generate" in line:
        assert all(i.startswith("registry.example.com/triton-vllm-generate:0.1.0-") for i in images)


def made_images(tmp_path: Any) -> set[str]:
    commands = dry_run("image", tmp_path, gpu=False, variables=("IMAGE_TOOL=docker",))
    words = commands.split()
    return {words[i + 1] for i, word in enumerate(words) if word == "-t"}


def test_the_charts_default_image_is_one_make_image_builds(tmp_path: Any) -> None:
    built = made_images(tmp_path)
    assert built == {"triton-vllm-generate:0.1.0-cpu", "triton-vllm-generate:0.1.0-cpu-with-model"}
    assert container(render("default"))["image"] in built


def test_the_with_model_image_holds_the_model_where_the_default_values_look() -> None:
    dockerfile = (PROJECT_ROOT / "docker" / "Dockerfile.cpu").read_text()
    stage = dockerfile[dockerfile.index("AS with-model") :]
    (copy,) = [line for line in stage.splitlines() if line.startswith("COPY --from=model")]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    (model,) = values["modelRepository"]["models"]
    assert copy.split()[-1] == model["modelJson"]["model"]
    assert values["image"]["variant"] == "cpu-with-model"

"""Rendered manifests against the Kubernetes JSON schemas (kubeconform's job; kubeconform is
on no registry reachable here, so the schemas come from the kubernetes-validate package)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes_validate import utils as schemas

from tests.deploy.conftest import CASES, render

# The chart's kubeVersion floor (Chart.yaml) and the newest release the package knows.
KUBERNETES_VERSIONS = ("1.25.0", schemas.latest_version())
# Custom resources have no schema in the package; tests/deploy/test_chart.py and
# tests/deploy/test_multinode_chart.py check them.
CUSTOM_KINDS = {"ServiceMonitor", "LeaderWorkerSet"}


def check(doc: dict[str, Any], version: str) -> None:
    schemas.validate(doc, version, strict=True)  # strict: unknown fields are errors


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("case", CASES)
def test_rendered_manifests_match_the_kubernetes_schemas(case: str, version: str) -> None:
    for doc in render(case):
        if doc["kind"] in CUSTOM_KINDS:
            continue
        try:
            check(doc, version)
        except schemas.SchemaNotFoundError as exc:
            pytest.fail(exc.message)
        except schemas.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']}: {path}: {exc.message}")


def test_the_schema_check_rejects_a_misspelt_field() -> None:
    deployment = copy.deepcopy(next(d for d in render("default") if d["kind"] == "Deployment"))
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 60
    with pytest.raises(schemas.ValidationError, match="terminationGracePeriod"):
        check(deployment, KUBERNETES_VERSIONS[-1])

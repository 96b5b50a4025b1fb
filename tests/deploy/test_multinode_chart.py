"""The chart's multi-node mode: a LeaderWorkerSet checked field by field against the LWS API
(no schema package has its CRD), its pod templates against the Kubernetes schemas, the group
it forms, and the leader's and workers' start-up commands run with a stand-in `ray`."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate import utils as schemas

from tests.deploy.conftest import (
    CASES,
    CHART,
    helm,
    model_repository_files,
    one,
    render,
    value_args,
)
from tests.deploy.test_manifest_schemas import KUBERNETES_VERSIONS

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
Fields = dict[str, Any]

# LeaderWorkerSet v1, as the LWS API types define it: each object's fields with their type
# (a nested dict: an object checked the same way), the required ones, and the enums.
ROLLING_UPDATE: Fields = {"partition": int, "maxUnavailable": (int, str), "maxSurge": (int, str)}
LWS_SPEC: Fields = {
    "replicas": int,
    "leaderWorkerTemplate": {
        "leaderTemplate": "PodTemplateSpec",
        "workerTemplate": "PodTemplateSpec",
        "size": int,
        "restartPolicy": str,
        "subGroupPolicy": {"subGroupPolicyType": str, "subGroupSize": int},
        "volumeClaimTemplates": list,
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": str, "whenScaled": str},
    },
    "rolloutStrategy": {"type": str, "rollingUpdateConfiguration": ROLLING_UPDATE},
    "startupPolicy": str,
    "networkConfig": {"subdomainPolicy": str},
}
REQUIRED = {
    "spec": {"leaderWorkerTemplate"},
    "spec.leaderWorkerTemplate": {"workerTemplate"},
    "spec.rolloutStrategy": {"type"},
    "spec.networkConfig": {"subdomainPolicy"},
}
ENUMS = {
    "spec.startupPolicy": {"LeaderCreated", "LeaderReady"},
    "spec.leaderWorkerTemplate.restartPolicy": {
        "RecreateGroupOnPodRestart",
        "RecreateGroupAfterStart",
        "None",
        "Default",
    },
    "spec.leaderWorkerTemplate.subGroupPolicy.subGroupPolicyType": {
        "LeaderWorker",
        "LeaderExcluded",
    },
    "spec.rolloutStrategy.type": {"RollingUpdate"},
    "spec.networkConfig.subdomainPolicy": {"Shared", "UniquePerReplica"},
}
MINIMUM = {"spec.replicas": 0, "spec.leaderWorkerTemplate.size": 1}


def field_problems(value: Any, fields: Fields, path: str) -> list[str]:
    """What in `value` (an object at `path`) the API does not accept."""
    if not isinstance(value, dict):
        return [f"{path}: an object expected"]
    problems = [f"{path}.{key}: required" for key in REQUIRED.get(path, set()) - set(value)]
    for key, item in value.items():
        where, kind = f"{path}.{key}", fields.get(key)
        if kind is None:
            problems.append(f"{where}: unknown field")
        elif isinstance(kind, dict):
            problems += field_problems(item, kind, where)
        elif kind == "PodTemplateSpec":
            problems += pod_template_problems(item, where)
        elif isinstance(item, bool) or not isinstance(item, kind):
            problems.append(f"{where}: {type(item).__name__} is not {kind}")
        elif where in ENUMS and item not in ENUMS[where]:
            problems.append(f"{where}: {item!r} not one of {sorted(ENUMS[where])}")
        elif where in MINIMUM and item < MINIMUM[where]:
            problems.append(f"{where}: below {MINIMUM[where]}")
    return problems


def pod_template_problems(template: Any, where: str) -> list[str]:
    """A PodTemplateSpec, checked strictly by the Kubernetes schema of a v1 PodTemplate."""
    problems = []
    for version in KUBERNETES_VERSIONS:
        holder = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "t"},
            "template": template,
        }
        try:
            schemas.validate(holder, version, strict=True)
        except schemas.ValidationError as exc:
            inside = list(exc.path)[1:]  # the path below the holder's "template"
            problems.append(
                f"{where}.{'.'.join(map(str, inside))} (Kubernetes {version}): {exc.message}"
            )
    return problems


def lws_problems(doc: dict[str, Any]) -> list[str]:
    problems = (
        [] if doc.get("apiVersion") == LWS_API_VERSION else [f"apiVersion: {doc.get('apiVersion')}"]
    )
    problems += [
        f"{key}: unknown field" for key in set(doc) - {"apiVersion", "kind", "metadata", "spec"}
    ]
    return problems + field_problems(doc["spec"], LWS_SPEC, "spec")


def lws(sets: tuple[str, ...] = ()) -> dict[str, Any]:
    return one(render("multi-node", sets), "LeaderWorkerSet")


def group(doc: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = doc["spec"]["leaderWorkerTemplate"]
    return template


def only_container(template: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any]
    (container,) = template["spec"]["containers"]
    return container


def test_multi_node_renders_a_leader_worker_set_instead_of_the_deployment() -> None:
    kinds = [doc["kind"] for doc in render("multi-node")]
    assert "LeaderWorkerSet" in kinds and "Deployment" not in kinds
    assert "LeaderWorkerSet" not in [doc["kind"] for doc in render("multi-gpu")]


def test_the_leader_worker_set_matches_the_lws_api_field_by_field() -> None:
    assert lws_problems(lws()) == []
    assert lws_problems(lws(("autoscaling.enabled=true", "multiNode.restartPolicy=None"))) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: group(d).update(sizee=2), "spec.leaderWorkerTemplate.sizee: unknown field"),
        (lambda d: group(d).update(size="2"), "spec.leaderWorkerTemplate.size: str is not"),
        (lambda d: group(d).update(restartPolicy="Always"), "restartPolicy: 'Always' not one of"),
        (
            lambda d: d["spec"].update(startupPolicy="LeaderStarted"),
            "spec.startupPolicy: 'LeaderStarted'",
        ),
        (
            lambda d: group(d).pop("workerTemplate"),
            "spec.leaderWorkerTemplate.workerTemplate: required",
        ),
        (
            lambda d: group(d)["workerTemplate"]["spec"].update(restartPolicyy="Always"),
            "workerTemplate.spec",
        ),
        (lambda d: d["spec"]["rolloutStrategy"].pop("type"), "spec.rolloutStrategy.type: required"),
        (lambda d: d.update(apiVersion="leaderworkerset.x-k8s.io/v1alpha1"), "apiVersion"),
    ],
)
def test_the_field_check_rejects_what_the_lws_api_does_not_accept(
    change: Any, problem: str
) -> None:
    doc = copy.deepcopy(lws())
    change(doc)
    assert any(problem in found for found in lws_problems(doc)), lws_problems(doc)


def test_group_size_gpus_and_shared_memory_of_every_pod() -> None:
    docs = render("multi-node")
    spec = group(one(docs, "LeaderWorkerSet"))
    assert spec["size"] == 2 and spec["restartPolicy"] == "RecreateGroupOnPodRestart"
    (model_json,) = [
        json.loads(t) for p, t in model_repository_files(docs).items() if p.endswith("model.json")
    ]
    assert model_json["distributed_executor_backend"] == "ray"
    for template in (spec["leaderTemplate"], spec["workerTemplate"]):
        container = only_container(template)
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
        assert container["resources"]["requests"]["nvidia.com/gpu"] == 8
        assert container["image"] == "triton-vllm-generate:0.1.0-gpu"
        (shm,) = [v for v in template["spec"]["volumes"] if v["name"] == "dshm"]
        assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        assert {"name": "weights", "mountPath": "/weights", "readOnly": True} in container[
            "volumeMounts"
        ]
    assert (
        spec["size"] * 8
        == model_json["tensor_parallel_size"] * model_json["pipeline_parallel_size"]
    )


def test_probes_on_the_leader_only() -> None:
    spec = group(lws())
    leader, worker = only_container(spec["leaderTemplate"]), only_container(spec["workerTemplate"])
    assert leader["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert leader["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert leader["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert not {"readinessProbe", "startupProbe", "livenessProbe"} & set(worker)
    assert (
        lws()["spec"]["startupPolicy"] == "LeaderCreated"
    )  # the leader is ready only with its workers


def test_the_service_selects_the_leaders_only() -> None:
    docs = render("multi-node")
    selector = one(docs, "Service")["spec"]["selector"].items()
    spec = group(one(docs, "LeaderWorkerSet"))
    assert selector <= spec["leaderTemplate"]["metadata"]["labels"].items()
    assert not selector <= spec["workerTemplate"]["metadata"]["labels"].items()


def test_the_hpa_scales_groups() -> None:
    docs = render("multi-node", ("autoscaling.enabled=true",))
    target = one(docs, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert target == {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "name": one(docs, "LeaderWorkerSet")["metadata"]["name"],
    }
    assert "replicas" not in one(docs, "LeaderWorkerSet")["spec"]


def test_the_leader_serves_on_the_ray_head_of_its_group() -> None:
    leader = only_container(group(lws())["leaderTemplate"])
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in leader["env"]}
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["RAY_ADDRESS"] == "$(POD_IP):6379"
    ports = {p["name"]: p["containerPort"] for p in leader["ports"]}
    assert ports["ray-gcs"] == 6379 and ports["ray-dashboard"] == 8265


def fake_tools(folder: Path, ray_status_failures: int) -> dict[str, str]:
    """`ray`, `python` and `sleep` stand-ins that log their arguments; `ray status` fails
    `ray_status_failures` times before the head answers."""
    folder.mkdir()
    log, count = folder / "calls.log", folder / "status-count"
    count.write_text("0")
    scripts = {
        "ray": f'echo "ray $*" >> {log}\nif [ "$1" = status ]; then\n'
        f'  n=$(cat {count}); echo $((n + 1)) > {count}; [ "$n" -ge {ray_status_failures} ]\nfi\n',
        "python": f'echo "python $*" >> {log}\n',
        "sleep": "exit 0\n",
    }
    for name, body in scripts.items():
        (folder / name).write_text("#!/bin/sh\n" + body)
        (folder / name).chmod(0o755)
    return {
        "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}",
        "POD_IP": "10.1.2.3",
        "LWS_LEADER_ADDRESS": "g-0.g",
    }


def run_container_command(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    assert container["args"][:2] == ["sh", "-c"]
    subprocess.run(container["args"], env=env, check=True, timeout=30, capture_output=True)
    return Path(env["PATH"].split(os.pathsep)[0], "calls.log").read_text().splitlines()


def test_the_leader_starts_the_ray_head_then_the_server(tmp_path: Path) -> None:
    calls = run_container_command(
        only_container(group(lws())["leaderTemplate"]), fake_tools(tmp_path / "bin", 0)
    )
    assert calls == [
        (
            "ray start --head --port=6379 --dashboard-host=0.0.0.0 --dashboard-port=8265"
            " --node-ip-address=10.1.2.3 --num-gpus=8 --disable-usage-stats"
        ),
        "python -m app",
    ]


def test_a_worker_waits_for_the_head_then_joins_it(tmp_path: Path) -> None:
    worker = only_container(
        group(lws(("multiNode.rayStartArgs={--object-store-memory=1000000000}",)))["workerTemplate"]
    )
    calls = run_container_command(worker, fake_tools(tmp_path / "bin", ray_status_failures=2))
    join = (
        "ray start --address=g-0.g:6379 --block --node-ip-address=10.1.2.3 --num-gpus=8"
        " --disable-usage-stats --object-store-memory=1000000000"
    )
    assert calls == ["ray status --address=g-0.g:6379"] * 3 + [join]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (("multiNode.size=1",), "multiNode.size (1) must be at least 2"),
        (("gpus=0",), "multiNode needs gpus per pod"),
        (("image.variant=cpu",), "multiNode needs image.variant gpu: the CPU image carries no Ray"),
        (("gpus=4",), "= 16 needs more than multiNode.size x gpus = 8"),
        (
            ("modelRepository.models[0].modelJson.distributed_executor_backend=mp",),
            "needs distributed_executor_backend: ray",
        ),
        (
            ("multiNode.restartPolicy=Default",),
            "restartPolicy must be RecreateGroupOnPodRestart or None",
        ),
    ],
)
def test_render_refuses_a_group_that_cannot_serve(values: tuple[str, ...], message: str) -> None:
    result = helm("template", "x", str(CHART), *value_args(CASES["multi-node"], values))
    assert result.returncode != 0
    assert message in result.stderr

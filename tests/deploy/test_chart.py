"""The Helm chart: helm lint, and what `helm template` renders with each case's values."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.deploy.conftest import (
    CASES,
    CHART,
    container,
    env,
    find,
    helm,
    model_repository_files,
    one,
    render,
    server_pod,
    value_args,
)


@pytest.mark.parametrize("case", CASES)
def test_helm_lint_is_clean(case: str) -> None:
    result = helm("lint", "--strict", str(CHART), *value_args(CASES[case]))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("case", CASES)
def test_probes_use_the_health_routes(case: str) -> None:
    server = container(render(case))
    assert server["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    assert server["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert server["startupProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}


@pytest.mark.parametrize(
    ("case", "minimum_seconds"), [("default", 300), ("gpu", 1200), ("multi-gpu", 1800)]
)
def test_startup_probe_allows_the_model_load(case: str, minimum_seconds: int) -> None:
    startup = container(render(case))["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= minimum_seconds


@pytest.mark.parametrize("case", CASES)
def test_termination_grace_exceeds_prestop_and_drain(case: str) -> None:
    docs = render(case)
    pod = server_pod(docs)
    drain = int(env(docs)["DRAIN_TIMEOUT_SECONDS"])
    pre_stop = container(docs)["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    assert pod["terminationGracePeriodSeconds"] > drain + int(pre_stop[1])


@pytest.mark.parametrize(
    ("case", "in_place"),
    [("default", "false"), ("gpu", "true"), ("multi-gpu", "true"), ("multi-node", "true")],
)
def test_engine_restart_policy_and_reload_mode_reach_the_server(case: str, in_place: str) -> None:
    variables = env(render(case))
    assert variables["ENGINE_RESTART"] == "true" and variables["ENGINE_RESTART_MAX"] == "5"
    assert variables["ENGINE_RESTART_WINDOW_SECONDS"] == "600"
    assert variables["ENGINE_PROBE_INTERVAL_SECONDS"] == "10"
    assert variables["RELOAD_IN_PLACE"] == in_place


def test_frontend_processes_reach_the_server_only_when_set() -> None:
    assert "FRONTEND_PROCESSES" not in env(render("default"))
    assert env(render("gpu", ("server.frontendProcesses=4",)))["FRONTEND_PROCESSES"] == "4"


def test_liveness_fails_only_for_good_so_its_probe_may_act_fast() -> None:
    """Live is 503 only once a model's restarts are exhausted (readiness covers restarts)."""
    docs = render("default", ("server.engineRestart.enabled=false",))
    assert env(docs)["ENGINE_RESTART"] == "false"
    liveness = container(docs)["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] <= 60


def test_render_refuses_a_grace_period_within_the_drain() -> None:
    result = helm("template", "x", str(CHART), "--set", "terminationGracePeriodSeconds=30")
    assert result.returncode != 0
    assert "terminationGracePeriodSeconds (30) must exceed" in result.stderr


def test_cpu_default_asks_for_no_gpu() -> None:
    server = container(render("default"))
    assert "nvidia.com/gpu" not in json.dumps(server["resources"])
    assert server["image"] == "triton-vllm-generate:0.1.0-cpu-with-model"


@pytest.mark.parametrize(("case", "gpus"), [("gpu", 1), ("multi-gpu", 4)])
def test_gpu_values_request_gpus(case: str, gpus: int) -> None:
    server = container(render(case))
    assert server["resources"]["limits"]["nvidia.com/gpu"] == gpus
    assert server["resources"]["requests"]["nvidia.com/gpu"] == gpus
    assert server["image"].endswith("-gpu")


def test_multi_gpu_example_is_tensor_parallel_with_kind_model() -> None:
    docs = render("multi-gpu")
    files = model_repository_files(docs)
    (config,) = [text for path, text in files.items() if path.endswith("config.pbtxt")]
    (model_json,) = [json.loads(t) for p, t in files.items() if p.endswith("model.json")]
    assert "kind: KIND_MODEL" in config
    assert model_json["tensor_parallel_size"] == 4
    assert model_json["distributed_executor_backend"] == "mp"
    assert container(docs)["resources"]["limits"]["nvidia.com/gpu"] == 4
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (shm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container(docs)["volumeMounts"]


def test_render_refuses_more_tensor_parallel_ranks_than_gpus() -> None:
    result = helm("template", "x", str(CHART), *value_args(CASES["multi-gpu"], ("gpus=2",)))
    assert result.returncode != 0
    assert "pipeline_parallel_size = 4 needs more than gpus = 2" in result.stderr


@pytest.mark.parametrize("case", CASES)
def test_model_repository_comes_from_the_configmap(case: str) -> None:
    docs = render(case)
    files = model_repository_files(docs)
    assert env(docs)["MODEL_REPOSITORY"] == "/model_repository"
    mount = {"name": "model-repository", "mountPath": "/model_repository", "readOnly": True}
    assert mount in container(docs)["volumeMounts"]
    model_jsons = [json.loads(t) for p, t in files.items() if p.endswith("/model.json")]
    assert model_jsons and all(m["model"].startswith("/") for m in model_jsons)


@pytest.mark.parametrize(
    ("case", "source"),
    [
        ("gpu", "persistentVolumeClaim"),
        ("multi-gpu", "hostPath"),
        ("all-features", "persistentVolumeClaim"),
    ],
)
def test_weights_are_mounted_read_only_where_model_json_points(case: str, source: str) -> None:
    docs = render(case)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (weights,) = [v for v in pod["volumes"] if v["name"] == "weights"]
    assert source in weights
    (mount,) = [m for m in container(docs)["volumeMounts"] if m["name"] == "weights"]
    assert mount["readOnly"] is True
    if case != "all-features":  # that one serves the baked model, with an adapter on the PVC
        files = model_repository_files(docs)
        (model_json,) = [json.loads(t) for p, t in files.items() if p.endswith("model.json")]
        assert model_json["model"].startswith(mount["mountPath"] + "/")


@pytest.mark.parametrize("case", CASES)
def test_service_exposes_http_grpc_and_metrics(case: str) -> None:
    docs = render(case)
    ports = {p["name"]: p for p in one(docs, "Service")["spec"]["ports"]}
    assert set(ports) == {"http", "grpc", "metrics"}
    container_ports = {p["name"]: p["containerPort"] for p in container(docs)["ports"]}
    assert ports["http"]["targetPort"] in container_ports
    assert ports["grpc"]["targetPort"] in container_ports and ports["grpc"]["port"] == 8001
    assert ports["metrics"]["targetPort"] in container_ports
    assert int(env(docs)["METRICS_PORT"]) == container_ports["metrics"] == 8002
    assert int(env(docs)["PORT"]) == container_ports["http"] == 8000
    assert int(env(docs)["GRPC_PORT"]) == container_ports["grpc"] == 8001


def test_no_grpc_port_when_grpc_is_off() -> None:
    docs = render("default", ("server.grpcPort=0",))
    assert "grpc" not in {p["name"] for p in one(docs, "Service")["spec"]["ports"]}
    assert "grpc" not in {p["name"] for p in container(docs)["ports"]}
    assert env(docs)["GRPC_PORT"] == "0"


def test_metrics_on_the_main_port_when_no_metrics_port() -> None:
    docs = render("default", ("server.metricsPort=0",))
    ports = {p["name"]: p for p in one(docs, "Service")["spec"]["ports"]}
    assert ports["metrics"]["targetPort"] == "http"
    assert "METRICS_PORT" not in env(docs)


def test_optional_parts_are_off_by_default() -> None:
    docs = render("default")
    kinds = {doc["kind"] for doc in docs}
    assert kinds == {"ConfigMap", "Service", "Deployment"}
    assert "API_KEYS" not in env(docs)


def test_all_features_example_renders_every_optional_part() -> None:
    kinds = {doc["kind"] for doc in render("all-features")}
    assert {
        "ServiceMonitor",
        "HorizontalPodAutoscaler",
        "Ingress",
        "Secret",
        "PodDisruptionBudget",
        "ServiceAccount",
        "PersistentVolumeClaim",
    } <= kinds


def test_api_keys_come_from_the_secret() -> None:
    docs = render("all-features")
    secret = one(docs, "Secret")
    assert secret["stringData"] == {"api-keys": "change-me-1,change-me-2"}
    ref = env(docs)["API_KEYS"]["secretKeyRef"]
    assert ref == {"name": secret["metadata"]["name"], "key": "api-keys"}


def test_api_keys_from_an_existing_secret() -> None:
    docs = render("default", ("apiKeys.existingSecret=my-keys",))
    assert not find(docs, "Secret")
    assert env(docs)["API_KEYS"]["secretKeyRef"] == {"name": "my-keys", "key": "api-keys"}


def test_hpa_scales_the_deployment_on_waiting_requests() -> None:
    docs = render("all-features")
    hpa, deployment = one(docs, "HorizontalPodAutoscaler"), one(docs, "Deployment")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    pods_metric = hpa["spec"]["metrics"][0]["pods"]
    assert pods_metric["metric"]["name"] == "vllm_num_requests_waiting"
    assert pods_metric["target"] == {"type": "AverageValue", "averageValue": "8"}
    assert "replicas" not in deployment["spec"]  # the HPA owns it


def test_service_monitor_scrapes_the_service_metrics_port() -> None:
    docs = render("all-features")
    monitor, service = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_ingress_routes_to_the_service_http_port() -> None:
    docs = render("all-features")
    (rule,) = one(docs, "Ingress")["spec"]["rules"]
    (path,) = rule["http"]["paths"]
    assert path["backend"]["service"] == {
        "name": one(docs, "Service")["metadata"]["name"],
        "port": {"name": "http"},
    }


def test_pod_runs_as_the_images_non_root_user() -> None:
    docs = render("default")
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 1000
    assert container(docs)["securityContext"]["allowPrivilegeEscalation"] is False


def test_chart_readme_documents_every_top_level_value() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    missing = [key for key in values if f"`{key}" not in readme]
    assert not missing, f"chart README does not document: {missing}"

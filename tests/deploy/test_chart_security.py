"""The chart's security values: TLS from a Secret on both ports (HTTPS probes), a
NetworkPolicy for the server's ports, and any setting by its variable (`settings`)."""

from __future__ import annotations

import json

from app.settings import Settings
from tests.deploy.conftest import container, env, find, one, render, server_pod
from tests.deploy.test_manifest_schemas import KUBERNETES_VERSIONS, check

TLS = ("tls.secretName=server-tls", "tls.grpcMutual=true")


def test_tls_from_a_secret_serves_both_ports_and_probes_over_https() -> None:
    docs = render("default", TLS)
    variables = env(docs)
    assert (variables["HTTP_SSL_CERTFILE"], variables["HTTP_SSL_KEYFILE"]) == (
        "/tls/tls.crt",
        "/tls/tls.key",
    )
    assert variables["GRPC_USE_SSL"] == variables["GRPC_USE_SSL_MUTUAL"] == "true"
    assert (variables["GRPC_SERVER_CERT"], variables["GRPC_ROOT_CERT"]) == (
        "/tls/tls.crt",
        "/tls/ca.crt",
    )
    server = container(docs)
    assert {m["mountPath"]: m.get("readOnly") for m in server["volumeMounts"]}["/tls"] is True
    volumes = {v["name"]: v for v in server_pod(docs)["volumes"]}
    assert volumes["tls"]["secret"] == {"secretName": "server-tls"}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert server[probe]["httpGet"]["scheme"] == "HTTPS"
    for doc in docs:
        if doc["kind"] not in {"ServiceMonitor", "LeaderWorkerSet"}:
            check(doc, KUBERNETES_VERSIONS[-1])


def test_without_a_secret_nothing_changes() -> None:
    docs = render("default", ("tls.grpcMutual=true",))
    assert not {"HTTP_SSL_CERTFILE", "GRPC_USE_SSL"} & set(env(docs))
    assert "scheme" not in container(docs)["readinessProbe"]["httpGet"]


def test_a_network_policy_keeps_the_ports_to_the_peers_given() -> None:
    assert not find(render("default"), "NetworkPolicy")
    docs = render("default", ("networkPolicy.enabled=true",))
    policy = one(docs, "NetworkPolicy")
    serving, metrics = policy["spec"]["ingress"]
    assert [p["port"] for p in serving["ports"]] == ["http", "grpc"]
    assert [p["port"] for p in metrics["ports"]] == ["metrics"]
    assert serving["from"] == [{"podSelector": {}}]
    deployment = one(docs, "Deployment")
    assert policy["spec"]["podSelector"] == deployment["spec"]["selector"]
    check(policy, KUBERNETES_VERSIONS[-1])


def test_any_setting_reaches_the_server_by_its_variable() -> None:
    docs = render(
        "default",
        (
            "settings.MODEL_CONTROL_MODE=explicit",
            "settings.LOAD_MODEL={smollm2}",
            "settings.HTTP_RESTRICTED_API={model-repository:admin-key=s3cret}",
            "settings.CORS_ALLOW_ORIGINS={https://ui.example}",
        ),
    )
    variables = env(docs)
    assert variables["MODEL_CONTROL_MODE"] == "explicit"
    assert json.loads(variables["LOAD_MODEL"]) == ["smollm2"]
    restricted, origins = (
        json.loads(variables["HTTP_RESTRICTED_API"]),
        json.loads(variables["CORS_ALLOW_ORIGINS"]),
    )
    settings = Settings(
        http_restricted_api=variables["HTTP_RESTRICTED_API"],
        cors_allow_origins=variables["CORS_ALLOW_ORIGINS"],
    )
    assert settings.http_restricted_api == restricted == ["model-repository:admin-key=s3cret"]
    assert settings.cors_allow_origins == origins == ["https://ui.example"]

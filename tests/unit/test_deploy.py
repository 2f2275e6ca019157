"""Deployment files: the Helm chart rendered and linted by a pinned helm, docker-compose.yml
validated against the Compose specification's JSON schema, the Dockerfile's invariants.

No Docker engine and no cluster are needed: the chart is checked by `helm lint` / `helm template`
(helm built from the Go module proxy by ``scripts/helm``, ``make tools``, cached) and the rendered
manifests are parsed; the compose file is checked against ``schema/compose-spec.json`` of the Go
module ``github.com/compose-spec/compose-go/v2`` (the loader Docker Compose itself uses; fetched
with ``go mod download``, hash-checked by Go's checksum database and pinned here by SHA-256). Both
checks fail on an unknown key and on a broken template, which the tests prove by mutation.
Nothing is skipped: without Go the fixtures fail with the reason.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "cardstream"
CPU_VALUES = CHART / "values-cpu.yaml"
COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_CPU = ROOT / "deploy" / "compose.cpu.yaml"
DOCKERFILE = ROOT / "Dockerfile"

COMPOSE_GO = "github.com/compose-spec/compose-go/v2"
COMPOSE_GO_VERSION = "v2.16.2"
# sha256 of schema/compose-spec.json in that module version (Apache-2.0, its LICENSE beside it)
COMPOSE_SCHEMA_SHA256 = "f266dcbb043229405d7cedd5aec918f9102c2b3d5e3850808fdd8edd564a43ff"
GPU = "nvidia.com/gpu"


# ---------------------------------------------------------------------------------------- helm

@pytest.fixture(scope="module")
def helm() -> str:
    """Path of the pinned helm binary, built by ``make tools`` (``scripts/helm --cached`` finds it;
    a build inside a test would take minutes)."""
    if os.environ.get("CARDSTREAM_HELM"):
        return os.environ["CARDSTREAM_HELM"]
    r = subprocess.run([str(ROOT / "scripts" / "helm"), "--cached"], check=False,
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.fail(r.stderr[-2000:])
    return r.stdout.strip().splitlines()[-1]


def run_helm(helm: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run helm with a fixed, empty HOME-like environment (no repositories, no plugins)."""
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/cardstream-helm/cache",
           "HELM_CONFIG_HOME": "/tmp/cardstream-helm/config",
           "HELM_DATA_HOME": "/tmp/cardstream-helm/data"}
    return subprocess.run([helm, *map(str, args)], check=False, capture_output=True, text=True,
                          timeout=120, env=env)


def render(helm: str, *args: str | Path, chart: Path = CHART) -> list[dict[str, Any]]:
    """``helm template`` -> the rendered manifests (parsed); fails the test on a helm error."""
    r = run_helm(helm, "template", "cs", chart, "--namespace", "cardstream", *args)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, component: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and component in (
        None, d["metadata"]["labels"].get("app.kubernetes.io/component"))]
    assert len(found) == 1, f"expected one {kind} {component or ''}, found {len(found)}"
    return found[0]


def container(doc: dict[str, Any]) -> dict[str, Any]:
    (c,) = doc["spec"]["template"]["spec"]["containers"]
    return c


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


@pytest.fixture(scope="module")
def default_docs(helm: str) -> list[dict[str, Any]]:
    return render(helm)


@pytest.fixture(scope="module")
def cpu_docs(helm: str) -> list[dict[str, Any]]:
    return render(helm, "-f", CPU_VALUES)


@pytest.mark.parametrize("values", [[], ["-f", str(CPU_VALUES)]], ids=["default", "cpu"])
def test_helm_lint_strict_passes(helm: str, values: list[str]) -> None:
    r = run_helm(helm, "lint", "--strict", CHART, *values)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in r.stdout


def test_default_render_has_every_part(default_docs: list[dict[str, Any]]) -> None:
    kinds = sorted(d["kind"] for d in default_docs)
    assert kinds == sorted(["ServiceAccount", "ConfigMap", "Service", "Service", "StatefulSet",
                            "PodDisruptionBudget", "ScaledObject", "Deployment",
                            "NetworkPolicy", "NetworkPolicy",
                            # the gateway
                            "Deployment", "Service", "HorizontalPodAutoscaler", "NetworkPolicy"])
    # no Secret is rendered: credentials are references to existing Secrets only
    assert all(d["kind"] != "Secret" for d in default_docs)


def test_worker_statefulset_probes_slot_and_secrets(default_docs: list[dict[str, Any]]) -> None:
    sts = one(default_docs, "StatefulSet")
    c = container(sts)
    port = {p["name"]: p["containerPort"] for p in c["ports"]}["http"]
    cm = one(default_docs, "ConfigMap")["data"]
    assert str(port) == cm["CARDSTREAM_WORKER__HTTP_PORT"]
    assert c["startupProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/live", "port": "http"}
    # warm-up budget of the startup probe: at least 5 minutes before a restart
    sp = c["startupProbe"]
    assert sp["periodSeconds"] * sp["failureThreshold"] >= 300
    assert c["args"][:1] == ["worker"] and "card,id_photo" in c["args"]
    env = env_of(c)
    # stable slot = the StatefulSet ordinal, from the pod-index label (downward API)
    assert env["CARDSTREAM_WORKER__SLOT"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.labels['apps.kubernetes.io/pod-index']"
    for name in ("CARDSTREAM_S3__ACCESS_KEY", "CARDSTREAM_S3__SECRET_KEY"):
        assert "value" not in env[name]
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "cardstream-s3"
    cm_name = one(default_docs, "ConfigMap")["metadata"]["name"]
    assert c["envFrom"] == [{"configMapRef": {"name": cm_name}}]
    # headless service = the StatefulSet's serviceName, selecting the worker pods
    svc = next(d for d in default_docs if d["kind"] == "Service"
               and d["metadata"]["name"] == sts["spec"]["serviceName"])
    assert svc["spec"]["clusterIP"] == "None"
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert sts["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    # graceful shutdown fits: the pod's grace period is above the worker's own bound (30 s)
    assert sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 30
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"mountPath": "/tmp", "name": "tmp"} in c["volumeMounts"]


def test_gpu_request_in_default_and_absent_in_cpu(default_docs: list[dict[str, Any]],
                                                  cpu_docs: list[dict[str, Any]]) -> None:
    sts = one(default_docs, "StatefulSet")
    c, spec = container(sts), sts["spec"]["template"]["spec"]
    assert c["resources"]["limits"][GPU] == "1"
    assert c["resources"]["limits"]["memory"] == "8Gi"  # values' limits kept beside the GPU
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t["key"] == GPU for t in spec["tolerations"])
    assert c["image"].endswith(":0.1.0-gpu")
    assert one(default_docs, "ConfigMap")["data"]["CARDSTREAM_RUNTIME__DEVICE"] == "cuda"

    cpu_sts = one(cpu_docs, "StatefulSet")
    assert GPU not in json.dumps(cpu_docs)
    assert "nodeSelector" not in cpu_sts["spec"]["template"]["spec"]
    assert "tolerations" not in cpu_sts["spec"]["template"]["spec"]
    assert container(cpu_sts)["image"].endswith(":0.1.0-cpu")
    assert one(cpu_docs, "ConfigMap")["data"]["CARDSTREAM_RUNTIME__DEVICE"] == "cpu"


def test_scaledobject_targets_workers_within_partitions(default_docs: list[dict[str, Any]]) -> None:
    so = one(default_docs, "ScaledObject")
    sts = one(default_docs, "StatefulSet")
    cm = one(default_docs, "ConfigMap")["data"]
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                            "name": sts["metadata"]["name"]}
    partitions = int(cm["CARDSTREAM_KAFKA__TOPICS__UPLOADS_PARTITIONS"])
    assert 1 <= so["spec"]["minReplicaCount"] <= so["spec"]["maxReplicaCount"] <= partitions
    (trig,) = so["spec"]["triggers"]
    assert trig["type"] == "kafka"
    md = trig["metadata"]
    assert md["topic"] == cm["CARDSTREAM_KAFKA__UPLOADS_TOPIC"] == "cardstream.uploads.v1"
    assert md["consumerGroup"] == cm["CARDSTREAM_KAFKA__GROUP_ID"]
    assert md["bootstrapServers"] == cm["CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS"]
    assert md["allowIdleConsumers"] == "false"
    assert all(isinstance(v, str) for v in md.values())  # KEDA's metadata is string-valued
    # KEDA owns the replica count: the StatefulSet must not set one (an upgrade would reset it)
    assert "replicas" not in sts["spec"]


def test_partition_ceiling_is_enforced_by_the_chart(helm: str) -> None:
    r = run_helm(helm, "template", "cs", CHART, "--set", "autoscaling.maxReplicaCount=7")
    assert r.returncode != 0
    assert "autoscaling.maxReplicaCount (7) must be <= kafka.uploadsPartitions (6)" in r.stderr
    # the ceiling follows the partitions value, not a constant
    so = one(render(helm, "--set", "kafka.uploadsPartitions=12",
                    "--set", "autoscaling.maxReplicaCount=12"), "ScaledObject")
    assert so["spec"]["maxReplicaCount"] == 12
    # without KEDA the fixed replica count is held to the same ceiling
    r = run_helm(helm, "template", "cs", CHART, "--set", "autoscaling.enabled=false",
                 "--set", "worker.replicas=7")
    assert r.returncode != 0 and "worker.replicas (7)" in r.stderr
    docs = render(helm, "--set", "autoscaling.enabled=false", "--set", "worker.replicas=3")
    assert one(docs, "StatefulSet")["spec"]["replicas"] == 3
    assert not [d for d in docs if d["kind"] == "ScaledObject"]


@pytest.mark.parametrize("bad", ["worker.replicaz=3", "kafka.bootstrapServer=x:9092",
                                 "autoscalling.enabled=true", "image.variant=tpu",
                                 "worker.maxBatch=0"])
def test_unknown_or_invalid_value_fails(helm: str, bad: str) -> None:
    for cmd in (["template", "cs"], ["lint"]):
        r = run_helm(helm, *cmd, CHART, "--set", bad)
        assert r.returncode != 0, f"{cmd[0]} accepted --set {bad}"
        assert "schema" in (r.stdout + r.stderr)


def test_inconsistent_gpu_settings_fail(helm: str) -> None:
    r = run_helm(helm, "template", "cs", CHART, "-f", CPU_VALUES,
                 "--set", "worker.gpu.enabled=true")
    assert r.returncode != 0 and "device is cpu" in r.stderr
    r = run_helm(helm, "template", "cs", CHART, "--set", "worker.gpu.enabled=false")
    assert r.returncode != 0 and "refuses to start" in r.stderr


def test_broken_template_fails_lint_and_template(helm: str, tmp_path: Path) -> None:
    chart = tmp_path / "cardstream"
    shutil.copytree(CHART, chart)
    assert render(helm, chart=chart)  # the copy renders as the original does
    (chart / "templates" / "broken.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Values.worker.replicas \n")
    for cmd in (["template", "cs"], ["lint"]):
        r = run_helm(helm, *cmd, chart)
        assert r.returncode != 0, f"helm {cmd[0]} passed a broken template"
        assert "broken.yaml" in (r.stdout + r.stderr)


def test_kubernetes_version_floor(helm: str) -> None:
    # the pod-index label the slot comes from exists from Kubernetes 1.28
    r = run_helm(helm, "template", "cs", CHART, "--kube-version", "1.27.9")
    assert r.returncode != 0 and "kubeVersion" in r.stderr
    assert render(helm, "--kube-version", "1.28.0")


def test_optional_parts_toggle(helm: str) -> None:
    docs = render(helm, "--set", "serviceMonitor.enabled=true", "--set", "statusApp.enabled=false",
                  "--set", "init.enabled=true", "--set", "kafka.existingSecret=kafka-sasl",
                  "--set", "autoscaling.authenticationRef=kafka-auth")
    sm = one(docs, "ServiceMonitor")
    headless = one(docs, "Service", "worker")  # the status Service is gone
    assert sm["spec"]["selector"]["matchLabels"].items() <= headless["metadata"]["labels"].items()
    assert sm["spec"]["endpoints"][0]["port"] == "http"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sorted(d["metadata"]["labels"]["app.kubernetes.io/component"] for d in docs
                  if d["kind"] in ("Deployment", "Service")) == ["gateway", "gateway", "worker"]
    job = one(docs, "Job")
    assert "pre-install" in job["metadata"]["annotations"]["helm.sh/hook"]
    script = container(job)["args"][0]
    assert "cardstream topics create" in script and "cardstream buckets create" in script
    assert "--uploads-partitions 6" in script and "--no-roles" not in script
    no_roles = render(helm, "--set", "init.enabled=true", "--set", "init.roles=false")
    assert container(one(no_roles,
                         "Job"))["args"][0].endswith("cardstream buckets create --no-roles")
    sts_env = env_of(container(one(docs, "StatefulSet")))
    assert sts_env["CARDSTREAM_KAFKA__SASL_PASSWORD"]["valueFrom"]["secretKeyRef"] == \
        {"name": "kafka-sasl", "key": "sasl-password"}
    trig = one(docs, "ScaledObject")["spec"]["triggers"][0]
    assert trig["authenticationRef"] == {"name": "kafka-auth"}


def test_pull_secrets_and_scheduling_reach_every_pod(helm: str) -> None:
    docs = render(helm, "--set", "init.enabled=true",
                  "--set-json", 'imagePullSecrets=[{"name":"registry"}]',
                  "--set-json", 'statusApp.nodeSelector={"pool":"general"}',
                  "--set-json", 'gateway.nodeSelector={"pool":"edge"}')
    pods = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d["spec"]["template"]["spec"]
            for d in docs if d["kind"] in {"StatefulSet", "Deployment", "Job"}}
    assert sorted(pods) == ["gateway", "init", "status", "worker"]
    assert all(p["imagePullSecrets"] == [{"name": "registry"}] for p in pods.values())
    assert pods["status"]["nodeSelector"] == {"pool": "general"}
    assert pods["gateway"]["nodeSelector"] == {"pool": "edge"}
    assert pods["worker"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def _from_env(env: dict[str, str], load: Any) -> Any:
    """``load()`` (a settings loader) with ``env`` as the only CARDSTREAM_* variables; every
    variable it set or removed is as it was afterwards (a pod's ``HOME`` among them: popping it
    left this process without one, and later tests' scripts failed on ``$HOME``)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("CARDSTREAM_") or k in env}
    try:
        for k in saved:
            del os.environ[k]
        os.environ.update(env)
        return load()
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(saved)


def _status_settings(env: dict[str, str]):
    """:class:`StatusSettings` as the app reads them from ``env`` alone (nothing of os.environ)."""
    from streams.status_settings import load_status_settings

    return _from_env(env, load_status_settings)


def test_status_app_listens_where_the_probes_and_service_look(helm: str) -> None:
    """The status app binds 127.0.0.1 unless told otherwise: in a pod its probes and Service
    reach the pod IP, so the chart must make it listen on every interface, on the port the
    probes use, and name the pod IP as the address other instances reach it at."""
    docs = render(helm, "--set", "statusApp.port=7070")
    dep = next(d for d in docs if d["kind"] == "Deployment"
               and d["metadata"]["labels"]["app.kubernetes.io/component"] == "status")
    c = container(dep)
    env = env_of(c)
    assert (env["CARDSTREAM_STATUS__WEB_HOST"]["valueFrom"]["fieldRef"]["fieldPath"]
            == "status.podIP")
    assert env["CARDSTREAM_STATUS__API_TOKEN"]["valueFrom"]["secretKeyRef"]
    st = _status_settings({**{k: v["value"] for k, v in env.items() if "value" in v
                              and k.startswith("CARDSTREAM_STATUS__")},
                           "CARDSTREAM_STATUS__API_TOKEN": "token-from-the-secret"})
    assert st.web_bind == "0.0.0.0"
    port = {p["name"]: p["containerPort"] for p in c["ports"]}["http"]
    assert port == st.web_port == 7070
    assert c["readinessProbe"]["tcpSocket"]["port"] == "http"


def test_compose_status_app_listens_on_the_published_port(compose: dict[str, Any]) -> None:
    """Compose publishes the status app's port from the container's interface, which a server
    bound to 127.0.0.1 inside the container never answers."""
    svc = compose["services"]["status"]
    st = _status_settings({k: str(v) for k, v in svc["environment"].items()
                           if k.startswith("CARDSTREAM_STATUS__")})
    assert st.web_bind == "0.0.0.0"
    assert st.web_host == "status"
    published = [str(p).rsplit(":", 1)[1] for p in svc["ports"]]
    assert published == [str(st.web_port)]


def test_configmap_keys_are_real_settings(helm: str) -> None:
    """Every CARDSTREAM_* variable the chart sets names a field of streams.settings.Settings,
    and the values parse into the settings the chart was given (pydantic-settings, env only)."""
    from pydantic import BaseModel

    from streams.settings import Settings

    docs = render(helm, "--set", "worker.maxBatch=17", "--set", "kafka.uploadsPartitions=9",
                  "--set", "autoscaling.maxReplicaCount=9", "--set", "s3.uploadsBucket=incoming",
                  "--set-json", 'kafka.config={"security.protocol":"SASL_SSL","linger.ms":7}',
                  "--set", "kafka.tls.caSecret=kafka-ca", "--set", "s3.tls.caSecret=s3-ca",
                  "--set", "s3.expiryDays.results=14")
    data = one(docs, "ConfigMap")["data"]
    for key in data:
        model: type[BaseModel] = Settings
        parts = key.removeprefix("CARDSTREAM_").lower().split("__")
        for i, part in enumerate(parts):
            assert part in model.model_fields, f"{key}: no setting {part!r} in {model.__name__}"
            ann = model.model_fields[part].annotation
            if i < len(parts) - 1:
                assert isinstance(ann, type) and issubclass(ann, BaseModel), key
                model = ann
    s = _env_settings({**data, "CARDSTREAM_S3__ACCESS_KEY": "a", "CARDSTREAM_S3__SECRET_KEY": "b"})
    assert s.worker.max_batch == 17
    assert s.kafka.topics.uploads_partitions == 9
    # private by default: SASL_SSL with SCRAM, MinIO over TLS, SSE-S3, the mounted CA files
    assert s.kafka.config == {"linger.ms": 7}
    assert (s.kafka.security_protocol, s.kafka.sasl_mechanism, s.kafka.sasl_username) == (
        "SASL_SSL", "SCRAM-SHA-512", "cardstream")
    assert str(s.kafka.ca_file) == "/etc/cardstream/kafka-ca/ca.crt"
    assert str(s.s3.ca_file) == "/etc/cardstream/s3-ca/ca.crt"
    assert s.s3.secure is True and s.s3.sse is True
    assert (s.s3.uploads_expiry_days, s.s3.results_expiry_days,
            s.s3.quarantine_expiry_days) == (7, 14, 1)
    assert s.s3.uploads_bucket == "incoming" and s.s3.allowed_buckets == ("incoming",)
    assert s.runtime.device == "cuda"


def _pod(docs: list[dict[str, Any]], kind: str, component: str | None = None) -> dict[str, Any]:
    return one(docs, kind, component)["spec"]["template"]["spec"]


def test_certificates_and_credentials_come_from_secrets(helm: str) -> None:
    """CA and client certificate Secrets are mounted read-only where the ConfigMap's paths point;
    every credential is a secretKeyRef; the status app has no S3 credentials; the init job alone
    holds the admin's; nothing secret is in the ConfigMap."""
    docs = render(helm, "--set", "init.enabled=true", "--set", "kafka.tls.caSecret=kafka-ca",
                  "--set", "kafka.tls.clientSecret=kafka-client", "--set", "s3.tls.caSecret=s3-ca",
                  "--set", "s3.roles.producerSecret=s3-producer",
                  "--set", "s3.roles.ocrSecret=s3-ocr")
    cm = one(docs, "ConfigMap")["data"]
    files = {cm["CARDSTREAM_KAFKA__CA_FILE"]: "kafka-ca",
             cm["CARDSTREAM_KAFKA__CERT_FILE"]: "kafka-client",
             cm["CARDSTREAM_KAFKA__KEY_FILE"]: "kafka-client",
             cm["CARDSTREAM_S3__CA_FILE"]: "s3-ca"}
    for kind, comp, s3 in (("StatefulSet", None, True), ("Deployment", "status", False),
                           ("Deployment", "gateway", True), ("Job", None, True)):
        pod = _pod(docs, kind, comp)
        vols = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
        for path, secret in files.items():
            if secret == "s3-ca" and not s3:
                assert "s3-ca" not in vols, kind  # the status app never talks to the object store
                continue
            folder, name = path.rsplit("/", 1)
            m = mounts[folder]
            assert m["readOnly"] is True, (kind, folder)
            vol = vols[m["name"]]["secret"]
            assert vol["secretName"] == secret
            assert name in {i["path"] for i in vol["items"]}, (kind, path)
    env = {k: env_of(container(one(docs, *k.split(":")))) for k in
           ("StatefulSet", "Deployment:status", "Deployment:gateway", "Job")}
    ref = {k: {n: e["valueFrom"]["secretKeyRef"]["name"] for n, e in v.items()
               if "secretKeyRef" in e.get("valueFrom", {})} for k, v in env.items()}
    assert ref["StatefulSet"] == {"CARDSTREAM_S3__ACCESS_KEY": "cardstream-s3",
                                  "CARDSTREAM_S3__SECRET_KEY": "cardstream-s3",
                                  "CARDSTREAM_KAFKA__SASL_PASSWORD": "cardstream-kafka"}
    assert ref["Deployment:status"] == {"CARDSTREAM_KAFKA__SASL_PASSWORD": "cardstream-kafka",
                                        "CARDSTREAM_STATUS__API_TOKEN": "cardstream-status"}
    assert ref["Deployment:gateway"] == {"CARDSTREAM_S3__ACCESS_KEY": "cardstream-gateway-s3",
                                         "CARDSTREAM_S3__SECRET_KEY": "cardstream-gateway-s3",
                                         "CARDSTREAM_KAFKA__SASL_PASSWORD": "cardstream-kafka",
                                         "CARDSTREAM_STATUS__API_TOKEN": "cardstream-status"}
    assert ref["Job"] == {"CARDSTREAM_S3__ACCESS_KEY": "cardstream-s3-admin",
                          "CARDSTREAM_S3__SECRET_KEY": "cardstream-s3-admin",
                          "CARDSTREAM_S3__ROLES__WORKER__ACCESS_KEY": "cardstream-s3",
                          "CARDSTREAM_S3__ROLES__WORKER__SECRET_KEY": "cardstream-s3",
                          "CARDSTREAM_S3__ROLES__PRODUCER__ACCESS_KEY": "s3-producer",
                          "CARDSTREAM_S3__ROLES__PRODUCER__SECRET_KEY": "s3-producer",
                          "CARDSTREAM_S3__ROLES__OCR__ACCESS_KEY": "s3-ocr",
                          "CARDSTREAM_S3__ROLES__OCR__SECRET_KEY": "s3-ocr",
                          "CARDSTREAM_S3__ROLES__GATEWAY__ACCESS_KEY": "cardstream-gateway-s3",
                          "CARDSTREAM_S3__ROLES__GATEWAY__SECRET_KEY": "cardstream-gateway-s3",
                          "CARDSTREAM_KAFKA__SASL_PASSWORD": "cardstream-kafka"}
    assert env["Deployment:status"]["CARDSTREAM_STATUS__WEB_BIND"]["value"] == "0.0.0.0"
    web_host = env["Deployment:status"]["CARDSTREAM_STATUS__WEB_HOST"]
    assert web_host["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    # no Secret rendered, no credential-named key in a ConfigMap or a plain env value
    for doc in docs:
        assert doc["kind"] != "Secret"
    assert not [k for k in cm if re.search(r"PASSWORD|SECRET|TOKEN|ACCESS_KEY", k)]
    plain = [e["name"] for v in env.values() for e in v.values() if "value" in e]
    assert not [n for n in plain if re.search(r"PASSWORD|SECRET|TOKEN|ACCESS_KEY", n)], plain


def _env_settings(env: dict[str, str]):
    """:class:`Settings` as a process reads them from ``env`` alone (nothing of os.environ)."""
    from streams.settings import load_settings

    return _from_env(env, load_settings)


def test_gateway_deployment_service_hpa_and_policy(default_docs: list[dict[str, Any]],
                                                   helm: str) -> None:
    """The gateway listens where its probes and Service look, reads the keys file mounted from
    its Secret, uses the gateway role's S3 user, scales on CPU, and is fenced like the others."""
    dep = one(default_docs, "Deployment", "gateway")
    c = container(dep)
    env = env_of(c)
    cm = one(default_docs, "ConfigMap")["data"]
    s = _env_settings({**cm, **{k: v["value"] for k, v in env.items() if "value" in v},
                       "CARDSTREAM_S3__ACCESS_KEY": "a", "CARDSTREAM_S3__SECRET_KEY": "b"})
    g = s.gateway
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert (g.bind, g.port,
            g.admin_port) == ("0.0.0.0", ports["http"], ports["admin"]) == ("0.0.0.0", 8000, 8001)
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "admin"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/live", "port": "admin"}
    assert c["args"] == ["gateway"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    folder, name = str(g.api_keys_file).rsplit("/", 1)
    # updates reach it
    assert mounts[folder]["readOnly"] is True and "subPath" not in mounts[folder]
    vol = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}[mounts[folder]["name"]]
    assert vol["secret"]["secretName"] == "cardstream-gateway-keys"
    assert vol["secret"]["items"] == [{"key": "api-keys", "path": name}]
    assert (env["CARDSTREAM_S3__ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"]
            == "cardstream-gateway-s3")
    assert "replicas" not in dep["spec"]  # the HPA owns it
    svc = one(default_docs, "Service", "gateway")
    assert svc["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http",
                                     "protocol": "TCP"}]
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    hpa = one(default_docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": dep["metadata"]["name"]}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 10)
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    pol = one(default_docs, "NetworkPolicy", "gateway")["spec"]
    assert (pol["podSelector"]["matchLabels"].items()
            <= dep["spec"]["template"]["metadata"]["labels"].items())
    api, admin = pol["ingress"]
    assert api == {"ports": [{"port": "http", "protocol": "TCP"}]}  # the front door: from anyone
    assert admin["ports"] == [{"port": "admin",
                               "protocol": "TCP"}] and admin["from"] == [{"podSelector": {}}]
    assert {p["port"] for r in pol["egress"] for p in r["ports"]} == {53, 9092, 9093, 9094, 9000,
                                                                      443, 6066}
    assert (g.status_url
            == f"http://{one(default_docs, 'Service', 'status')['metadata']['name']}:6066")
    assert (env["CARDSTREAM_STATUS__API_TOKEN"]["valueFrom"]["secretKeyRef"]["name"]
            == "cardstream-status")
    narrowed = render(helm, "--set-json", 'networkPolicy.gatewayFrom=[{"namespaceSelector":{}}]',
                      "--set", "gateway.autoscaling.enabled=false", "--set", "gateway.replicas=3")
    assert one(narrowed, "NetworkPolicy",
               "gateway")["spec"]["ingress"][0]["from"] == [{"namespaceSelector": {}}]
    assert one(narrowed, "Deployment", "gateway")["spec"]["replicas"] == 3
    assert not [d for d in narrowed if d["kind"] == "HorizontalPodAutoscaler"]
    off = render(helm, "--set", "gateway.enabled=false")
    assert not [d for d in off
                if d["metadata"]["labels"].get("app.kubernetes.io/component") == "gateway"]
    r = run_helm(helm, "template", "cs", CHART, "--set", "gateway.apiKeysSecret=")
    assert r.returncode != 0 and "API keys" in r.stderr
    r = run_helm(helm, "template", "cs", CHART, "--set", "gateway.autoscaling.minReplicas=20")
    assert r.returncode != 0 and "minReplicas" in r.stderr


def test_secrets_in_values_and_missing_secrets_fail(helm: str) -> None:
    r = run_helm(helm, "template", "cs", CHART, "--set-json", 'kafka.config={"sasl.password":"x"}')
    assert r.returncode != 0 and "schema" in r.stderr
    r = run_helm(helm, "template", "cs", CHART, "--set", "kafka.existingSecret=")
    assert r.returncode != 0 and "needs kafka.existingSecret" in r.stderr
    r = run_helm(helm, "template", "cs", CHART, "--set", "statusApp.existingSecret=")
    assert r.returncode != 0 and "bearer token" in r.stderr
    # PLAINTEXT is possible, on purpose: no SASL settings rendered then
    cm = one(render(helm, "--set", "kafka.securityProtocol=PLAINTEXT", "--set",
                    "kafka.existingSecret="),
             "ConfigMap")["data"]
    assert (cm["CARDSTREAM_KAFKA__SECURITY_PROTOCOL"] == "PLAINTEXT"
            and "CARDSTREAM_KAFKA__SASL_USERNAME" not in cm)


def test_network_policies_fence_workers_and_status_app(default_docs: list[dict[str, Any]],
                                                       helm: str) -> None:
    pols = {d["metadata"]["name"].rsplit("-", 1)[1]: d["spec"] for d in default_docs
            if d["kind"] == "NetworkPolicy"}
    assert sorted(pols) == ["gateway", "status", "worker"]
    pods = {"worker": one(default_docs, "StatefulSet"),
            "status": one(default_docs, "Deployment", "status"),
            "gateway": one(default_docs, "Deployment", "gateway")}
    for name, spec in pols.items():
        if name == "gateway":
            continue  # test_gateway_deployment_service_hpa_and_policy
        labels = pods[name]["spec"]["template"]["metadata"]["labels"]
        assert spec["podSelector"]["matchLabels"].items() <= labels.items()
        assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"]
        (ing,) = spec["ingress"]
        assert ing["ports"] == [{"port": "http", "protocol": "TCP"}]
        assert {"podSelector": {}} in ing["from"]  # the release's namespace by default
    egress_ports = {n: {p["port"] for rule in spec["egress"] for p in rule["ports"]}
                    for n, spec in pols.items() if n != "gateway"}
    assert egress_ports["worker"] == {53, 9092, 9093, 9094, 9000, 443}
    assert egress_ports["status"] == {53, 9092, 9093, 9094, 6066}  # no object store
    peer = next(r for r in pols["status"]["egress"] if "to" in r)
    assert peer["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "status"
    assert any(f.get("podSelector",
                     {}).get("matchLabels", {}).get("app.kubernetes.io/component") == "status"
               for f in pols["status"]["ingress"][0]["from"])  # instances proxy to each other
    docs = render(helm, "--set-json", "networkPolicy.metricsFrom="
                  '[{"namespaceSelector":{"matchLabels":{"name":"monitoring"}}}]',
                  "--set-json",
                  'networkPolicy.s3={"ports":[443],"to":[{"ipBlock":{"cidr":"10.1.0.0/16"}}]}')
    w = next(d["spec"] for d in docs
             if d["metadata"]["name"].endswith("-worker") and d["kind"] == "NetworkPolicy")
    assert (w["ingress"][0]["from"]
            == [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}])
    assert {"ports": [{"port": 443, "protocol": "TCP"}],
            "to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}]} in w["egress"]
    assert not [d for d in render(helm, "--set",
                                  "networkPolicy.enabled=false") if d["kind"] == "NetworkPolicy"]


# ------------------------------------------------------------------------------------- compose

def _go_module_dir(module: str, version: str) -> Path:
    """``go mod download`` a module into the project's Go cache and return its folder."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("Go is needed to fetch the Compose specification schema (compose-go)")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cardstream"
    env = {**os.environ, "GOPATH": os.environ.get("CARDSTREAM_GOPATH", str(cache / "gopath")),
           "GOFLAGS": "-modcacherw"}
    r = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"],
                       check=False, capture_output=True, text=True, timeout=600, env=env,
                       cwd="/")
    if r.returncode != 0:
        pytest.fail(f"go mod download {module}@{version} failed:\n{r.stdout}{r.stderr}")
    return Path(json.loads(r.stdout)["Dir"])


@pytest.fixture(scope="module")
def compose_validator() -> jsonschema.protocols.Validator:
    import hashlib

    d = _go_module_dir(COMPOSE_GO, COMPOSE_GO_VERSION)
    raw = (d / "schema" / "compose-spec.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == COMPOSE_SCHEMA_SHA256
    assert (d / "LICENSE").is_file()
    schema = json.loads(raw)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


class ComposeLoader(yaml.SafeLoader):
    """PyYAML with Compose's merge tags (``!reset``, ``!override``), kept as their values."""


ComposeLoader.add_constructor("!reset", lambda loader, node: (
    loader.construct_mapping(node) if isinstance(node, yaml.MappingNode)
    else loader.construct_sequence(node) if isinstance(node, yaml.SequenceNode)
    else loader.construct_scalar(node)))
ComposeLoader.add_constructor("!override", ComposeLoader.yaml_constructors["!reset"])

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(node: Any, env: dict[str, str]) -> Any:
    """Compose's variable interpolation (``${VAR:-default}``, ``$VAR``, ``$$``) on every string."""
    if isinstance(node, dict):
        return {k: interpolate(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, env) for v in node]
    if isinstance(node, str):
        def sub(m: re.Match[str]) -> str:
            if m.group(0) == "$$":
                return "$"
            name = m.group(1) or m.group(3)
            return env.get(name) or (m.group(2) or "")
        return _VAR.sub(sub, node)
    return node


def load_compose(path: Path = COMPOSE) -> dict[str, Any]:
    return yaml.load(path.read_text(), Loader=ComposeLoader)  # a SafeLoader subclass


def errors(validator: jsonschema.protocols.Validator, doc: dict[str, Any]) -> list[str]:
    return sorted(f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in validator.iter_errors(doc))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return interpolate(load_compose(), {})


def test_compose_files_validate_against_the_spec(compose_validator: jsonschema.protocols.Validator,
                                                 compose: dict[str, Any]) -> None:
    assert errors(compose_validator, load_compose()) == []  # as written
    assert errors(compose_validator, compose) == []  # after interpolation with the defaults
    assert errors(compose_validator, interpolate(load_compose(COMPOSE_CPU), {})) == []


@pytest.mark.parametrize("mutate", [
    lambda d: d["services"]["worker-0"].__setitem__("replica", 2),  # typo of a real key
    lambda d: d.__setitem__("service", {}),  # unknown top-level key
    lambda d: d["services"]["worker-0"]["deploy"]["resources"]["reservations"]["devices"][0]
    .__setitem__("gpu_count", 1),
    lambda d: d["services"]["kafka"]["healthcheck"].__setitem__("test", 42),
    lambda d: d["services"]["init"]["depends_on"]["kafka"].__setitem__("condition", "healthy"),
], ids=["service-key", "top-level-key", "device-key", "wrong-type", "bad-enum"])
def test_compose_schema_rejects_mutations(compose_validator: jsonschema.protocols.Validator,
                                          compose: dict[str, Any], mutate: Any) -> None:
    doc = copy.deepcopy(compose)
    mutate(doc)
    assert errors(compose_validator, doc) != []


def _stack_pin(name: str) -> str:
    stack = (ROOT / "scripts" / "stack").read_text()
    m = re.search(rf"^{name}=(?:\$\{{[A-Z_]+:-)?([^}}\s]+)", stack, re.MULTILINE)
    assert m, f"scripts/stack has no {name}"
    return m.group(1)


def test_compose_runs_the_versions_the_tests_run(compose: dict[str, Any]) -> None:
    s = compose["services"]
    assert s["kafka"]["image"] == f"apache/kafka:{_stack_pin('KAFKA_VERSION')}"
    minio = _stack_pin("MINIO_VERSION")
    assert s["minio"]["build"]["args"]["MINIO_VERSION"] == minio
    assert s["minio"]["image"].endswith(":" + minio)
    dockerfile = (ROOT / "deploy" / "minio" / "Dockerfile").read_text()
    m = re.search(r"^ARG MINIO_VERSION=(\S+)$", dockerfile, re.MULTILINE)
    assert m and m.group(1) == minio


def test_compose_workers_gpus_slots_and_partitions(compose: dict[str, Any]) -> None:
    s = compose["services"]
    workers = {n: v for n, v in s.items() if v.get("command", [None])[0] == "worker"}
    assert sorted(workers) == ["worker-0", "worker-1"]
    slots = [w["environment"]["CARDSTREAM_WORKER__SLOT"] for w in workers.values()]
    assert sorted(slots) == ["0", "1"]  # distinct, stable transactional ids
    partitions = int(s["init"]["environment"]["CARDSTREAM_KAFKA__TOPICS__UPLOADS_PARTITIONS"])
    assert len(workers) <= partitions
    for w in workers.values():
        (dev,) = w["deploy"]["resources"]["reservations"]["devices"]
        assert dev["driver"] == "nvidia" and dev["capabilities"] == ["gpu"]
        assert w["environment"]["CARDSTREAM_RUNTIME__DEVICE"] == "cuda"
        assert w["depends_on"]["init"]["condition"] == "service_completed_successfully"
        assert w["environment"]["CARDSTREAM_KAFKA__BOOTSTRAP_SERVERS"] == "kafka:9092"
    # Kafka on one broker: transactions need the internal topics at replication 1
    k = s["kafka"]["environment"]
    assert k["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 1
    assert k["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == 1
    assert k["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    script = s["init"]["command"][0]
    assert "cardstream topics create" in script and "cardstream buckets create" in script
    assert "$$" not in script  # interpolation turned the escaped $$ into the shell's $
    # Prometheus only on request, scraping exactly the workers' metrics ports
    assert s["prometheus"]["profiles"] == ["monitoring"]
    assert all("profiles" not in v for n, v in s.items() if n != "prometheus")
    prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    targets = prom["scrape_configs"][0]["static_configs"][0]["targets"]
    assert sorted(targets) == [f"{n}:8080" for n in sorted(workers)]
    # nothing published beyond the host's loopback
    for name, svc in s.items():
        for p in svc.get("ports", []):
            assert str(p).startswith("127.0.0.1:"), f"{name} publishes {p} on every interface"


def test_compose_roles_encryption_and_status_token(compose: dict[str, Any]) -> None:
    """Workers use their own MinIO user, only ``init`` holds the root credentials (and creates
    the role users), the status app has no S3 credentials and wants a token, SSE is on."""
    s = compose["services"]
    root = s["minio"]["environment"]["MINIO_ROOT_USER"]
    init = s["init"]["environment"]
    assert init["CARDSTREAM_S3__ACCESS_KEY"] == root
    for n in ("worker-0", "worker-1"):
        env = s[n]["environment"]
        assert (env["CARDSTREAM_S3__ACCESS_KEY"]
                == init["CARDSTREAM_S3__ROLES__WORKER__ACCESS_KEY"] != root)
        assert env["CARDSTREAM_S3__SECRET_KEY"] == init["CARDSTREAM_S3__ROLES__WORKER__SECRET_KEY"]
        assert env["CARDSTREAM_S3__SSE"] == "true"
    assert {"PRODUCER",
            "OCR"} <= {k.split("__")[2] for k in init if k.startswith("CARDSTREAM_S3__ROLES__")}
    status = s["status"]["environment"]
    assert not [k for k in status if k.startswith("CARDSTREAM_S3__") and "KEY" in k]
    assert (status["CARDSTREAM_STATUS__API_TOKEN"] and status["CARDSTREAM_STATUS__WEB_BIND"]
            == "0.0.0.0")
    from streams.status_settings import StatusSettings

    StatusSettings(web_bind=status["CARDSTREAM_STATUS__WEB_BIND"],
                   api_token=status["CARDSTREAM_STATUS__API_TOKEN"])  # valid together


def test_compose_two_gateways_behind_nginx(compose: dict[str, Any]) -> None:
    """Two gateway services with the gateway role's user and the keys file as a Compose secret;
    nginx publishes them on the loopback and sends requests to both; the demo keys file parses."""
    from streams.gateway.keys import ApiKeys

    s = compose["services"]
    gws = {n: v for n, v in s.items() if v.get("command", [None])[0] == "gateway"}
    assert sorted(gws) == ["gateway-0", "gateway-1"]
    init = s["init"]["environment"]
    for svc in gws.values():
        env = svc["environment"]
        st = _env_settings({k: str(v) for k, v in env.items()})
        assert (st.gateway.bind == "0.0.0.0" and st.gateway.port == 8000 and st.gateway.admin_port
                == 8001)
        assert str(st.gateway.api_keys_file) == "/run/secrets/gateway-api-keys"
        assert svc["secrets"] == ["gateway-api-keys"]
        assert env["CARDSTREAM_S3__ACCESS_KEY"] == init["CARDSTREAM_S3__ROLES__GATEWAY__ACCESS_KEY"]
        assert env["CARDSTREAM_S3__SECRET_KEY"] == init["CARDSTREAM_S3__ROLES__GATEWAY__SECRET_KEY"]
        assert "8001/ready" in " ".join(svc["healthcheck"]["test"])
        assert "ports" not in svc  # only nginx publishes
        assert st.gateway.status_url == "http://status:6066"
        assert (st.status.api_token.get_secret_value()
                == s["status"]["environment"]["CARDSTREAM_STATUS__API_TOKEN"])
    keys = ROOT / compose["secrets"]["gateway-api-keys"]["file"]
    assert ApiKeys(keys).clients == ["demo"]
    nginx = s["nginx"]
    assert nginx["ports"] == ["127.0.0.1:8080:8080"]
    assert set(nginx["depends_on"]) == set(gws)
    (mount,) = nginx["volumes"]
    conf = (ROOT / mount.split(":")[0]).read_text()
    upstream = re.findall(r"^\s*server (\S+?):(\d+)", conf, re.MULTILINE)
    assert sorted(upstream) == [(n, "8000") for n in sorted(gws)]
    assert "listen 8080;" in conf and "proxy_request_buffering off;" in conf
    read_timeout = int(re.search(r"proxy_read_timeout (\d+)s;", conf).group(1))
    assert read_timeout * 1000 > st.gateway.max_wait_ms  # a wait never outlives nginx


def test_compose_cpu_override_drops_gpu_reservations() -> None:
    base, cpu = load_compose(), load_compose(COMPOSE_CPU)
    gpu_services = {n for n, v in base["services"].items() if "deploy" in v}
    assert gpu_services == {"worker-0", "worker-1"}
    assert "!reset" in COMPOSE_CPU.read_text()
    for n in gpu_services:
        assert cpu["services"][n]["deploy"] == {}
        assert cpu["services"][n]["environment"]["CARDSTREAM_RUNTIME__DEVICE"] == "cpu"
    built = [v for v in cpu["services"].values() if "build" in v]
    assert built and all(v["build"]["args"]["VARIANT"] == "cpu" for v in built)


# ------------------------------------------------------------------------------------ Dockerfile

def dockerfile_instructions() -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    buf = ""
    for line in DOCKERFILE.read_text().splitlines():
        if line.lstrip().startswith("#") and not buf or not line.strip():
            continue
        buf += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            ins, _, rest = buf.strip().partition(" ")
            yield ins.upper(), rest
            buf = ""


def test_dockerfile_invariants() -> None:
    ins = list(dockerfile_instructions())
    args = dict(a.split("=", 1) for i, a in ins if i == "ARG" and "=" in a)
    assert args["VARIANT"] == "gpu"
    # CUDA 13 + cuDNN 9: what the PyPI onnxruntime-gpu 1.3x wheels are built with
    assert re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-cudnn-runtime-ubuntu\d+\.\d+",
                        args["CUDA_IMAGE"])
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    froms = [a for i, a in ins if i == "FROM"]
    assert "${PYTHON_IMAGE} AS base-cpu" in froms and "${CUDA_IMAGE} AS base-gpu" in froms
    assert froms[-1] == "base-${VARIANT} AS runtime"
    final = ins[max(k for k, (i, a) in enumerate(ins) if i == "FROM"):]
    users = [a for i, a in final if i == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    (hc,) = [a for i, a in final if i == "HEALTHCHECK"]
    assert "/ready" in hc and "CARDSTREAM_WORKER__HTTP_PORT" in hc
    assert any(i == "RUN" and a.strip() == "scripts/models" for i, a in ins)
    assert any(i == "ENV" and "U2NET_HOME=/models" in a for i, a in final)
    # `pip install .[${VARIANT}]`: both variants are extras of the project
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {"gpu", "cpu"} <= set(extras)
    assert any(i == "RUN" and '.[${VARIANT}]' in a for i, a in ins)


def test_dockerignore_lets_every_copied_path_in() -> None:
    """The context is an allow-list; every COPY source must be on it and exist."""
    allowed = [ln[1:].rstrip("/") for ln in (ROOT / ".dockerignore").read_text().splitlines()
               if ln.startswith("!")]
    sources = []
    for i, a in dockerfile_instructions():
        if i == "COPY" and "--from" not in a:
            sources += a.split()[:-1]
    assert sources
    for src in sources:
        assert (ROOT / src).exists() or src == "README.md", f"COPY {src}: not in the repository"
        assert any(src == p or src.startswith(p + "/") for p in allowed), f"{src} is ignored"

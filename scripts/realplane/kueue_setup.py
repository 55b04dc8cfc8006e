"""Kueue as a plain process beside the plane, wired as its release's manifests wire it in a cluster.

Kueue's own manifests (``config/components`` of the pinned module) are used as shipped, with the changes
controller-runtime's envtest makes to run a manager outside the cluster (``pkg/envtest/webhook.go``):
every webhook's ``service`` becomes a ``url`` on 127.0.0.1 with the plane's CA as its ``caBundle``, and
the same for the conversion webhook of the CRDs whose kustomization enables one. The manager reads the
configuration a deployment ships (``config/components/manager/controller_manager_config.yaml``), or the
one ``--kueue-config`` names merged over it, with only its addresses, certificates and leader election
changed (a process has no Service, no mounted Secret and no second replica).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from realplane.plane import Plane, Process

NAMESPACE = "kueue-system"
# With Kueue's internal certificate management off (a process has no Secret volume for it to wait on),
# v0.19.2 reads two serving pairs from fixed directories: the metrics server's (cmd/kueue/main.go,
# `metricsCertPath := "/etc/kueue/metrics/certs"`, exits without it) and the visibility server's
# (pkg/visibility/server.go, `certDir = "/visibility"`). scripts/cluster puts a pair there once; every
# plane may share it (nothing verifies these two servers by name here: the visibility APIService skips
# verification as Kueue's own manifest does, and nothing scrapes the metrics).
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
VISIBILITY_CERT_DIR = Path("/visibility")


def _load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def conversion_crds(kueue: Path) -> set[str]:
    """The CRD plural names whose conversion webhook the release's kustomization enables."""
    text = (kueue / "config" / "components" / "crd" / "kustomization.yaml").read_text()
    return set(re.findall(r"^- path: patches/webhook_in_([a-z]+)\.yaml", text, flags=re.M))


def selected_webhooks(kueue: Path) -> tuple[set[str], dict]:
    """The webhooks the release restricts to managed namespaces, and the selector it gives them."""
    text = (kueue / "config" / "components" / "webhook" / "kustomization.yaml").read_text()
    names = set(re.findall(r"webhooks\.\[name=([a-z0-9.]+)\]", text))
    kustomization = yaml.safe_load(text)
    selector: dict = {}
    for patch in kustomization.get("patches", []):
        body = yaml.safe_load(patch.get("patch", "")) or {}
        for hook in body.get("webhooks", []):
            if "namespaceSelector" in hook:
                names.add(hook["name"])
                selector = hook["namespaceSelector"]
    return names, selector


def crds(kueue: Path, webhook_url: str, ca_bundle: str) -> list[dict]:
    convert = conversion_crds(kueue)
    out = []
    for path in sorted((kueue / "config" / "components" / "crd" / "bases").glob("*.yaml")):
        for doc in _load_all(path):
            plural = doc["spec"]["names"]["plural"]
            if plural in convert:
                doc["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"url": f"{webhook_url}/convert", "caBundle": ca_bundle},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            out.append(doc)
    return out


def webhooks(kueue: Path, webhook_url: str, ca_bundle: str) -> list[dict]:
    names, selector = selected_webhooks(kueue)
    out = []
    for doc in _load_all(kueue / "config" / "components" / "webhook" / "manifests.yaml"):
        # config/default's namePrefix: the configurations are kueue-{mutating,validating}-webhook-configuration.
        doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
        for hook in doc.get("webhooks", []):
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"{webhook_url}{path}", "caBundle": ca_bundle}
            if hook["name"] in names and selector:
                hook["namespaceSelector"] = copy.deepcopy(selector)
        out.append(doc)
    return out


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def manager_configuration(kueue: Path, plane: Plane, cert_dir: Path, visibility: bool) -> dict:
    assert plane.state is not None
    shipped = yaml.safe_load(
        (kueue / "config" / "components" / "manager" / "controller_manager_config.yaml").read_text()
    )
    if plane.options.kueue_config is not None:
        shipped = _merge(shipped, yaml.safe_load(Path(plane.options.kueue_config).read_text()) or {})
    p = plane.state.ports
    wiring = {
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{p['kueue-health']}"},
        "metrics": {"bindAddress": f"127.0.0.1:{p['kueue-metrics']}"},
        "webhook": {"host": "127.0.0.1", "port": p["kueue-webhook"], "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": p["kueue-visibility"]},
    }
    config = _merge(shipped, wiring)
    if not visibility:
        config = _merge(config, {"featureGates": {"VisibilityOnDemand": False}})
    return config


def fixed_certs(plane: Plane, directory: Path) -> bool:
    """Put a serving pair where Kueue looks for one; False where this user cannot write there."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, src in (("tls.crt", plane.serving.cert), ("tls.key", plane.serving.key)):
            target = directory / name
            if not target.exists():
                shutil.copyfile(src, target)
        return os.access(directory / "tls.key", os.R_OK)
    except OSError:
        return False


def visibility_api(plane: Plane) -> list[dict]:
    """The visibility APIService, routed to the local server through an ExternalName Service to localhost
    (k8s.io/apiserver/pkg/util/proxy.ResolveCluster resolves ExternalName to host:port)."""
    assert plane.state is not None
    port = plane.state.ports["kueue-visibility"]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kueue-visibility-server", "namespace": NAMESPACE},
        "spec": {
            "type": "ExternalName",
            "externalName": "localhost",
            "ports": [{"name": "https", "port": port}],
        },
    }
    apiservices = []
    for version in ("v1beta2", "v1beta1"):
        apiservices.append(
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.visibility.kueue.x-k8s.io"},
                "spec": {
                    "group": "visibility.kueue.x-k8s.io",
                    "version": version,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100,
                    "insecureSkipTLSVerify": True,
                    "service": {"name": "kueue-visibility-server", "namespace": NAMESPACE, "port": port},
                },
            }
        )
    return [service, *apiservices]


def install(plane: Plane) -> None:
    from realplane.plane import PlaneError

    assert plane.state is not None
    kueue = plane.module("kueue")
    p = plane.state.ports
    url = f"https://127.0.0.1:{p['kueue-webhook']}"
    ca_bundle = base64.b64encode(plane.ca.ca.cert.read_bytes()).decode()
    plane.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}], "namespace")
    definitions = crds(kueue, url, ca_bundle)
    plane.apply(definitions, "Kueue CRDs")
    plane.established([d["metadata"]["name"] for d in definitions])
    start_manager(plane)
    # Kueue starts serving its webhooks before /readyz answers; the configurations go in only now, so no
    # Job is ever refused for want of a listening webhook.
    plane.apply(webhooks(kueue, url, ca_bundle), "Kueue webhook configurations")
    if (plane.dir / "kueue-visibility").exists():
        plane.apply(visibility_api(plane), "Kueue visibility API")
        try:
            plane._wait(
                _kueue_process(plane), "serving its visibility API", lambda: _available(plane), timeout=60
            )
        except PlaneError as exc:
            plane.say(
                f"Kueue's visibility API is not available ({str(exc).splitlines()[0]}); going on without it"
            )


def _kueue_process(plane: Plane) -> Process:
    assert plane.state is not None
    return next(p for p in reversed(plane.state.processes) if p.name == "kueue")


def start_manager(plane: Plane) -> None:
    """Start Kueue's manager process and wait until it is ready."""
    from realplane.plane import PlaneError

    assert plane.state is not None
    kueue = plane.module("kueue")
    p = plane.state.ports
    cert_dir = plane.dir / "kueue-certs"
    cert_dir.mkdir(exist_ok=True)
    shutil.copyfile(plane.serving.cert, cert_dir / "tls.crt")
    shutil.copyfile(plane.serving.key, cert_dir / "tls.key")
    if not fixed_certs(plane, METRICS_CERT_DIR):
        raise PlaneError(
            f"kueue: cannot write its metrics certificate to {METRICS_CERT_DIR} (Kueue reads it from there; "
            f"create the directory once, writable by {os.environ.get('USER', 'this user')}, e.g. with sudo)"
        )
    visibility = fixed_certs(plane, VISIBILITY_CERT_DIR)
    config = manager_configuration(kueue, plane, cert_dir, visibility)
    config_path = plane.dir / "kueue-config.yaml"
    text = yaml.safe_dump(config, sort_keys=False)
    config_path.write_text(text)
    # What a deployment of Kueue keeps in its manager ConfigMap (config/default: kueue-manager-config),
    # so a client reads this plane's Kueue configuration where it reads a real one's.
    plane.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kueue-manager-config", "namespace": NAMESPACE},
                "data": {"controller_manager_config.yaml": text},
            }
        ],
        "Kueue manager ConfigMap",
    )
    proc = plane._spawn(
        "kueue",
        [
            plane.bin("kueue"),
            f"--config={config_path}",
            f"--kubeconfig={plane.own_kubeconfig('kueue')}",
            "--zap-log-level=2",
        ],
        supervised=True,
    )
    plane._wait(proc, "ready (/readyz)", lambda: _http_ok(p["kueue-health"], "/readyz"), timeout=120)
    if visibility:
        (plane.dir / "kueue-visibility").touch()


def _available(plane: Plane) -> bool:
    out = plane.kubectl("get", "apiservice", "v1beta2.visibility.kueue.x-k8s.io", "-o", "json", check=False)
    conditions = json.loads(out).get("status", {}).get("conditions", []) if out else []
    return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)


def _http_ok(port: int, path: str) -> bool:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as resp:
        return resp.status == 200

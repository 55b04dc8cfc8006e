"""A service account's own kubeconfig on the plane: what a pod of that account would hold.

The admission controller of the demo and of the real-plane tests runs as a process here, not as a pod,
yet must call the API server as its own service account (never as the admin): its kubeconfig carries
a token the API server issued for that account (the TokenRequest API, kubernetes v1.36.3
``pkg/registry/core/serviceaccount/storage/token.go``), bound to the rights the deployment's manifests
give it, or to the ClusterRole named here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

# A day: the demo and a test run are shorter; the API server caps it (--service-account-max-token-expiration).
TOKEN_SECONDS = 86_400


def _ignore_exists(create: Callable[[], object]) -> None:
    try:
        create()
    except ApiException as exc:
        if exc.status != 409:
            raise


def service_account_kubeconfig(
    admin_kubeconfig: Path, namespace: str, name: str, out: Path, cluster_role: str | None = None
) -> Path:
    """Create ``namespace``/``name`` (and, with ``cluster_role``, its ClusterRoleBinding) and write a
    kubeconfig at ``out`` whose user is a token of that account."""
    api_client = config.new_client_from_config(str(admin_kubeconfig))
    core = client.CoreV1Api(api_client)
    _ignore_exists(lambda: core.create_namespace({"metadata": {"name": namespace}}))
    _ignore_exists(lambda: core.create_namespaced_service_account(namespace, {"metadata": {"name": name}}))
    if cluster_role:
        rbac = client.RbacAuthorizationV1Api(api_client)
        binding = {
            "metadata": {"name": f"{name}-{cluster_role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
        _ignore_exists(lambda: rbac.create_cluster_role_binding(binding))
    token = core.create_namespaced_service_account_token(
        name, namespace, {"spec": {"expirationSeconds": TOKEN_SECONDS}}
    ).status.token
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = admin["clusters"][0]
    own = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": cluster["name"], "user": name}}],
        "current-context": name,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(own))
    out.chmod(0o600)
    return out

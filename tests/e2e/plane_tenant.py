"""A namespace of the real control plane (``scripts/cluster``) set up for the end-to-end stack as a
deployment sets up its jobs' namespace (docs/deploying.md, "Layout"), and taken away again.

What it installs, with the plane's admin kubeconfig:

- the jobs' namespace (``e2e-stack-<random>``), holding helm-values/rbac.yaml's namespaced documents (the
  submitter, observer and viewer Roles and their bindings, the job-accounts and priority-classes
  ConfigMaps), the shipped quota policy, and the example DAGs' artifact claim bound to a volume of its
  own (the plane has no provisioner; kwok mounts nothing);
- Airflow's namespace (``<jobs' namespace>-airflow``) holding the service accounts the bindings name
  (``airflow-worker``, ``airflow-triggerer``, ``airflow-api-server``), so each Airflow component calls the
  API server with a token of its own account, as its pod would (the TokenRequest API: what a pod's
  projected token is), and the real API server's RBAC judges every request of the worker and of the
  triggerers against the shipped Roles.

Not installed: rbac.yaml's cluster-scoped ClusterRole and binding for the GPU Jobs page's node view (one
per plane, shared, and no example DAG reads nodes), and the ValidatingAdmissionPolicies of
admission-policy.yaml (cluster-wide; tests/plane_scenarios/test_rbac_and_admission_policy_on_the_plane.py
installs them, waits until the API server enforces them and proves each rule). The admission controller is
the real tier's own (scripts/test: its own process and service account, for every namespace not labelled
``airflow-jobs.io/own-controller``).

``remove`` deletes both namespaces and the volume and waits until they are gone: nothing is left on the
plane.
"""

from __future__ import annotations

import copy
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.patience import Deadline

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / "helm-values"
# Each component's service account, as helm-values/values.yaml names them (rbac.yaml binds them).
ACCOUNTS = {"worker": "airflow-worker", "triggerer": "airflow-triggerer", "api-server": "airflow-api-server"}
# Long enough for a run of the tests; the API server accepts no less than 10 minutes.
TOKEN_SECONDS = 2 * 3600


def _documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((HELM / name).read_text()) if d]


@dataclass
class PlaneTenant:
    """The stack's namespaces on a real control plane, and a kubeconfig per Airflow component."""

    admin_kubeconfig: Path
    folder: Path
    namespace: str = field(default_factory=lambda: f"e2e-stack-{secrets.token_hex(3)}")
    kubeconfigs: dict[str, Path] = field(default_factory=dict)

    @property
    def airflow_namespace(self) -> str:
        return f"{self.namespace}-airflow"

    @property
    def volume(self) -> str:
        return f"{self.namespace}-ml-artifacts"

    def _api(self):  # type: ignore[no-untyped-def]
        from kubernetes import config

        return config.new_client_from_config(str(self.admin_kubeconfig))

    def install(self) -> PlaneTenant:
        from kubernetes import client, utils

        api = self._api()
        core = client.CoreV1Api(api)
        for name in (self.namespace, self.airflow_namespace):
            core.create_namespace({"metadata": {"name": name}})
        for account in ACCOUNTS.values():
            core.create_namespaced_service_account(self.airflow_namespace, {"metadata": {"name": account}})
        for doc in _documents("rbac.yaml"):
            if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                continue  # the node view's (module docstring)
            if doc["kind"] == "RoleBinding":
                doc = copy.deepcopy(doc)
                for subject in doc["subjects"]:
                    subject["namespace"] = self.airflow_namespace
            utils.create_from_dict(api, doc, namespace=self.namespace)
        for name in ("quota-policy.yaml", "example-artifacts-claim.yaml"):
            for doc in _documents(name):
                utils.create_from_dict(api, doc, namespace=self.namespace)
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": self.volume},
            "spec": {
                "capacity": {"storage": "50Gi"},
                "accessModes": ["ReadWriteMany"],
                "hostPath": {"path": f"/tmp/{self.volume}"},
                "claimRef": {"namespace": self.namespace, "name": "ml-artifacts"},
            },
        }
        core.create_persistent_volume(volume)
        admin = yaml.safe_load(self.admin_kubeconfig.read_text())
        cluster = admin["clusters"][0]
        self.folder.mkdir(parents=True, exist_ok=True)
        for component, account in ACCOUNTS.items():
            token = core.create_namespaced_service_account_token(
                account, self.airflow_namespace, {"spec": {"expirationSeconds": TOKEN_SECONDS}}
            ).status.token
            own = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [{"name": component, "context": {"cluster": cluster["name"], "user": account}}],
                "current-context": component,
            }
            path = self.folder / f"{component}.kubeconfig"
            path.write_text(yaml.safe_dump(own))
            path.chmod(0o600)
            self.kubeconfigs[component] = path
        return self

    def remove(self, timeout: float = 120) -> None:
        """Delete the namespaces (their jobs, pods, Roles, policy, claim) and the volume; wait until the
        plane holds none of them."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        core = client.CoreV1Api(self._api())
        deletions = [
            (core.delete_namespace, core.read_namespace, self.namespace),
            (core.delete_namespace, core.read_namespace, self.airflow_namespace),
            (core.delete_persistent_volume, core.read_persistent_volume, self.volume),
        ]
        for delete, _, name in deletions:
            try:
                delete(name, propagation_policy="Foreground")
            except ApiException as exc:
                if exc.status != 404:
                    raise
        left = [name for _, _, name in deletions]
        deadline = Deadline(timeout)
        while left:
            for _, read, name in deletions:
                if name not in left:
                    continue
                try:
                    read(name)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    left.remove(name)
            if left and deadline.passed():
                raise TimeoutError(f"{', '.join(left)} still on the plane after {deadline}")
            time.sleep(1)

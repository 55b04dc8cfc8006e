"""Static configuration of the simulated cluster: its size and speed, and the API types it serves."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClusterConfig:
    """Size, speed and behaviour of one simulated cluster."""

    nodes: int = 2
    gpus_per_node: int = 8
    # Other GPU devices every node offers, by extended-resource name, as a device plugin advertises them
    # in the node's capacity (e.g. (("nvidia.com/mig-1g.10gb", 14),) for a node of MIG slices).
    devices_per_node: tuple[tuple[str, int], ...] = ()
    # Extra labels of node i, as NVIDIA's GPU Feature Discovery puts them on GPU nodes (e.g.
    # (("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),)); nodes past the tuple's end get none.
    node_labels: tuple[tuple[tuple[str, str], ...], ...] = ()
    cpu_per_node: str = "64"
    memory_per_node: str = "512Gi"
    time_scale: float = 1.0  # multiply every simulated duration by this (0.01 = 100x faster)
    exec_commands: bool = False  # run container commands as real local processes (demo mode)
    watch_history: int = 1000  # events kept for watch resume; older resourceVersion -> 410
    host: str = "127.0.0.1"
    port: int = 0
    # Real API servers send a bookmark about once a minute; tests want them sooner.
    bookmark_interval: float = 5.0
    # Bearer token the server demands; None accepts anonymous requests (a local, insecure server).
    token: str | None = None
    # With ``token`` set: tokens expire. ``token`` becomes the secret that signs short-lived tokens and
    # only those minted with it, and not yet expired, are accepted (see ``sim/auth.py``).
    token_ttl: float | None = None
    # A Kueue installed in the cluster (``sim/controllers/kueue.py``): its API group is served and its
    # controller and job webhook run. Off by default, like on a cluster that has none.
    kueue: KueueConfig | None = None
    # Who else may call the API, each with a bearer token of its own (service accounts, users); with
    # ``rbac`` their requests are authorized by the cluster's Roles and RoleBindings (``sim/rbac.py``).
    # ``token`` (and the tokens minted with it) stays the cluster admin's, in group system:masters. Without
    # a ``token`` no caller must authenticate, but one that sends an identity's token is that identity.
    identities: tuple[Identity, ...] = ()
    rbac: bool = False

    def __post_init__(self) -> None:
        if self.rbac and not self.token:
            raise ValueError("rbac needs an admin token: set ClusterConfig.token")


@dataclass(frozen=True)
class Identity:
    """A caller the simulated API server authenticates by its bearer token."""

    token: str
    user: str
    groups: tuple[str, ...] = ()

    @classmethod
    def service_account(cls, namespace: str, name: str, token: str) -> Identity:
        """A service account's token, with the groups kube-apiserver gives one
        (``staging/src/k8s.io/apiserver/pkg/authentication/serviceaccount/util.go``, v1.32)."""
        return cls(
            token,
            f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
        )


@dataclass(frozen=True)
class KueueConfig:
    """How the simulated Kueue is configured (Kueue's ``Configuration``, apis/config/v1beta2)."""

    # ``manageJobsWithoutQueueName``: Kueue suspends and queues every job, labelled or not.
    manage_jobs_without_queue_name: bool = False
    # ``waitForPodsReady``, defaulted as Kueue v0.19.2 does (apis/config/v1beta2/defaults.go
    # ``SetDefaults_Configuration``; pkg/util/waitforpodsready/waitforpodsready.go ``Enabled``): on, since
    # the configuration always gets a ``waitForPodsReady`` and only the ``DisableWaitForPodsReady``
    # feature gate (alpha, off) turns it off; ``timeout`` 30 minutes; ``recoveryTimeout`` the timeout's
    # value; ``blockAdmission`` false; ``requeuingStrategy`` with ``timestamp: Eviction``,
    # ``backoffBaseSeconds`` 60, ``backoffMaxSeconds`` 3600 and ``backoffLimitCount`` null (requeued for
    # ever). The simulator models the timeouts and the back-off; ``blockAdmission`` stays false.
    # ``waitForPodsReady.timeout`` in simulated seconds; None turns waitForPodsReady off (what the
    # ``DisableWaitForPodsReady`` gate does): no ``PodsReady`` condition, no eviction.
    wait_for_pods_ready_seconds: float | None = 1800.0
    # ``waitForPodsReady.recoveryTimeout`` in simulated seconds: how long a started Workload whose pods
    # stopped being ready may wait for them; None: the timeout's value, 0: no recovery timeout.
    recovery_timeout_seconds: float | None = None
    # ``waitForPodsReady.requeuingStrategy.backoffBaseSeconds`` and ``backoffMaxSeconds``.
    requeue_backoff_base_seconds: float = 60.0
    requeue_backoff_max_seconds: float = 3600.0


@dataclass(frozen=True)
class ResourceType:
    """One REST resource the simulated API server serves (what discovery advertises)."""

    plural: str
    singular: str
    kind: str
    group: str
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    has_status: bool = False
    # Fields a fieldSelector may name besides metadata.name/metadata.namespace (the server's allow-list).
    field_labels: tuple[str, ...] = ()
    verbs: tuple[str, ...] = field(
        default=("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
    )
    # An add-on whose CRDs the resource belongs to ("kueue"): served only by clusters that install it.
    addon: str = ""
    # The registry strategy's AllowCreateOnUpdate and AllowUnconditionalUpdate (k8s.io/apiserver v0.36.3
    # pkg/registry/generic/registry/store.go ``Update``): a PUT of a missing object creates it; a PUT
    # without metadata.resourceVersion overwrites the stored object (else it is 422 Invalid). Set for the
    # kinds whose strategy says so where the product relies on it (Leases).
    create_on_update: bool = False
    unconditional_update: bool = True

    @property
    def api_version(self) -> str:
        """The apiVersion string of objects of this type ("v1", "batch/v1", ...)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """The resource name as the API server writes it in messages: "pods", "jobs.batch"."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: dict[str, ResourceType] = {
    r.plural: r
    for r in (
        ResourceType(
            "namespaces",
            "namespace",
            "Namespace",
            "",
            "v1",
            namespaced=False,
            short_names=("ns",),
            subresources=("status",),
            has_status=True,
            field_labels=("status.phase",),
            verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
        ),
        ResourceType(
            "nodes",
            "node",
            "Node",
            "",
            "v1",
            namespaced=False,
            short_names=("no",),
            subresources=("status",),
            has_status=True,
            field_labels=("spec.unschedulable",),
        ),
        ResourceType(
            "pods",
            "pod",
            "Pod",
            "",
            "v1",
            namespaced=True,
            short_names=("po",),
            categories=("all",),
            subresources=("status", "log", "exec"),
            has_status=True,
            field_labels=(
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.podIPs",
                "status.nominatedNodeName",
            ),
        ),
        ResourceType(
            "events",
            "event",
            "Event",
            "",
            "v1",
            namespaced=True,
            short_names=("ev",),
            field_labels=(
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ),
        ),
        ResourceType("configmaps", "configmap", "ConfigMap", "", "v1", namespaced=True, short_names=("cm",)),
        ResourceType("secrets", "secret", "Secret", "", "v1", namespaced=True, field_labels=("type",)),
        ResourceType(
            "services",
            "service",
            "Service",
            "",
            "v1",
            namespaced=True,
            short_names=("svc",),
            categories=("all",),
            subresources=("status",),
            has_status=True,
        ),
        ResourceType(
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            "PersistentVolumeClaim",
            "",
            "v1",
            namespaced=True,
            short_names=("pvc",),
            subresources=("status",),
            has_status=True,
        ),
        ResourceType(
            "jobs",
            "job",
            "Job",
            "batch",
            "v1",
            namespaced=True,
            categories=("all",),
            subresources=("status",),
            has_status=True,
            field_labels=("status.successful",),
        ),
        ResourceType(
            "mpijobs",
            "mpijob",
            "MPIJob",
            "kubeflow.org",
            "v2beta1",
            namespaced=True,
            short_names=("mpij",),
            categories=("kubeflow",),
            subresources=("status",),
            has_status=True,
        ),
        ResourceType(
            "roles",
            "role",
            "Role",
            "rbac.authorization.k8s.io",
            "v1",
            namespaced=True,
            verbs=("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"),
        ),
        ResourceType(
            "rolebindings",
            "rolebinding",
            "RoleBinding",
            "rbac.authorization.k8s.io",
            "v1",
            namespaced=True,
        ),
        ResourceType(
            "clusterroles",
            "clusterrole",
            "ClusterRole",
            "rbac.authorization.k8s.io",
            "v1",
            namespaced=False,
        ),
        ResourceType(
            "clusterrolebindings",
            "clusterrolebinding",
            "ClusterRoleBinding",
            "rbac.authorization.k8s.io",
            "v1",
            namespaced=False,
        ),
        ResourceType(
            "validatingadmissionpolicies",
            "validatingadmissionpolicy",
            "ValidatingAdmissionPolicy",
            "admissionregistration.k8s.io",
            "v1",
            namespaced=False,
            subresources=("status",),
            has_status=True,
        ),
        ResourceType(
            "validatingadmissionpolicybindings",
            "validatingadmissionpolicybinding",
            "ValidatingAdmissionPolicyBinding",
            "admissionregistration.k8s.io",
            "v1",
            namespaced=False,
        ),
        # The pods' PriorityClasses: the API server's Priority admission refuses a pod naming one that does
        # not exist (kubernetes plugin/pkg/admission/priority/admission.go, v1.36: sim/store.py).
        ResourceType(
            "priorityclasses",
            "priorityclass",
            "PriorityClass",
            "scheduling.k8s.io",
            "v1",
            namespaced=False,
            short_names=("pc",),
        ),
        # Leader election's Leases (kubernetes v1.36.3 pkg/registry/coordination/lease/strategy.go: created
        # by a PUT of a missing one, never updated without a resourceVersion).
        ResourceType(
            "leases",
            "lease",
            "Lease",
            "coordination.k8s.io",
            "v1",
            namespaced=True,
            create_on_update=True,
            unconditional_update=False,
        ),
        # Kueue's CRDs (kubernetes-sigs/kueue v0.19.2 config/components/crd; v1beta2 is the storage
        # version there, apis/kueue/v1beta2/*_types.go).
        *(
            ResourceType(
                plural,
                kind.lower(),
                kind,
                "kueue.x-k8s.io",
                "v1beta2",
                namespaced=namespaced,
                short_names=short,
                categories=("kueue",),
                subresources=("status",) if status else (),
                has_status=status,
                addon="kueue",
            )
            for plural, kind, namespaced, short, status in (
                ("resourceflavors", "ResourceFlavor", False, ("flavor", "flavors", "rf"), False),
                ("clusterqueues", "ClusterQueue", False, ("cq",), True),
                ("localqueues", "LocalQueue", True, ("queue", "queues", "lq"), True),
                ("workloads", "Workload", True, ("kwl", "kueueworkload", "kueueworkloads"), True),
                ("workloadpriorityclasses", "WorkloadPriorityClass", False, ("wpc",), False),
            )
        ),
    )
}


def resource_type(plural: str) -> ResourceType:
    """The registered type for a plural resource name (KeyError for unknown ones)."""
    return RESOURCES[plural]


def groups(addons: frozenset[str] = frozenset()) -> dict[str, list[ResourceType]]:
    """Resources by apiVersion ("v1", "batch/v1", ...), in registration order; add-on resources only
    for the add-ons named."""
    out: dict[str, list[ResourceType]] = {}
    for r in RESOURCES.values():
        if r.addon and r.addon not in addons:
            continue
        out.setdefault(r.api_version, []).append(r)
    return out


def addons_of(config: ClusterConfig) -> frozenset[str]:
    """The add-ons a cluster installs."""
    return frozenset({"kueue"} if config.kueue is not None else ())

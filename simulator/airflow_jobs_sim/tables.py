"""Server-side ``Table`` answers (what ``kubectl get`` prints), following the API server's printers.

Pure functions of the objects and the current time. The pod STATUS column implements the printer's
rules independently of the product's own lifecycle code, so the two can check each other.
"""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_jobs_sim.store import parse_time

_NAME_DOC = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources "
    "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
    "intended for creation idempotence and configuration definition. Cannot be updated."
)
_AGE_DOC = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
    "guaranteed to be set in happens-before order across separate operations. Clients may not set this "
    "value. It is represented in RFC3339 form and is in UTC."
)


def _col(name: str, description: str = "", priority: int = 0, fmt: str = "", type_: str = "string") -> dict:
    return {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}


NAME_COLUMN = _col("Name", _NAME_DOC, fmt="name")
AGE_COLUMN = _col("Age", _AGE_DOC)

POD_COLUMNS = [
    NAME_COLUMN,
    _col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", "The aggregate status of the containers in this pod."),
    _col(
        "Restarts",
        "The number of times the containers in this pod have been restarted and when the last container in "
        "this pod has restarted.",
    ),
    AGE_COLUMN,
    _col(
        "IP",
        "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
        1,
    ),
    _col("Node", "NodeName indicates in which node this pod is scheduled.", 1),
    _col("Nominated Node", "nominatedNodeName is set only when this pod preempts other pods on the node.", 1),
    _col("Readiness Gates", "If specified, all readiness gates will be evaluated for pod readiness.", 1),
]
JOB_COLUMNS = [
    NAME_COLUMN,
    _col("Status", "Status of the job."),
    _col("Completions", "The completion status of the job."),
    _col("Duration", "Time required to complete the job."),
    AGE_COLUMN,
    _col("Containers", "Names of each container in the template.", 1),
    _col("Images", "Images referenced by each container in the template.", 1),
    _col("Selector", "A label query over pods that should match the pod count.", 1),
]
NODE_COLUMNS = [
    NAME_COLUMN,
    _col("Status", "The status of the node"),
    _col("Roles", "The roles of the node"),
    AGE_COLUMN,
    _col("Version", "Kubelet Version reported by the node."),
    _col("Internal-IP", "List of addresses reachable to the node.", 1),
]
NAMESPACE_COLUMNS = [NAME_COLUMN, _col("Status", "The status of the namespace"), AGE_COLUMN]
CONFIGMAP_COLUMNS = [
    NAME_COLUMN,
    _col("Data", "Data contains the configuration data.", type_="integer"),
    AGE_COLUMN,
]
# The printers of pkg/printers/internalversion/printers.go (release-1.32): secretColumnDefinitions and
# serviceColumnDefinitions.
SECRET_COLUMNS = [
    NAME_COLUMN,
    _col("Type", "The type of the secret"),
    _col("Data", "The number of entries in the secret", type_="integer"),
    AGE_COLUMN,
]
SERVICE_COLUMNS = [
    NAME_COLUMN,
    _col("Type", "The type of the service"),
    _col("Cluster-IP", "The cluster IP of the service"),
    _col("External-IP", "The external IP of the service"),
    _col("Port(s)", "The ports of the service"),
    AGE_COLUMN,
    _col("Selector", "The selector of the service", 1),
]
# leaseColumnDefinitions and printLease (pkg/printers/internalversion/printers.go, kubernetes v1.36.3).
LEASE_COLUMNS = [
    NAME_COLUMN,
    _col(
        "Holder",
        "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader "
        "Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name "
        "field.",
    ),
    AGE_COLUMN,
]
EVENT_COLUMNS = [
    _col("Last Seen", "The time at which the most recent occurrence of this event was recorded."),
    _col("Type", "Type of this event (Normal, Warning), new types could be added in the future."),
    _col(
        "Reason",
        "This should be a short, machine understandable string that gives the reason for this event being generated.",
    ),
    _col("Object", "The object this Event is about."),
    _col("Subobject", "The field of the object this Event is about.", 1),
    _col("Source", "The component reporting this event.", 1),
    _col("Message", "A human-readable description of the status of this operation."),
    _col("First Seen", "The time at which the event was first recorded.", 1),
    _col("Count", "The number of times this event has occurred.", 1),
    _col("Name", _NAME_DOC, 1, "name"),
]
GENERIC_COLUMNS = [NAME_COLUMN, AGE_COLUMN]


def human_duration(seconds: float) -> str:
    """A duration the way kubectl prints ages: 45s, 3m20s, 12m, 5h3m, 2d4h, 1y30d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def since(timestamp: str | None, now: datetime) -> str:
    """Age of a timestamp ("<unknown>" when unset)."""
    t = parse_time(timestamp)
    if t is None:
        return "<unknown>"
    return human_duration((now - t).total_seconds())


def _restartable(container: dict | None) -> bool:
    return container is not None and container.get("restartPolicy") == "Always"


def _condition_true(conditions: list, ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True" for c in conditions)


def _later(a: datetime | None, b: str | None) -> datetime | None:
    t = parse_time(b)
    if t is None:
        return a
    return t if a is None or t > a else a


def pod_columns(pod: dict, now: datetime) -> tuple[str, str, str, str]:
    """READY, STATUS, RESTARTS and AGE of a pod, by the API server's printer rules."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    conditions = status.get("conditions") or []
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    total = len(spec.get("containers") or []) + sum(1 for c in init_specs.values() if _restartable(c))
    ready = 0
    restarts = 0
    sidecar_restarts = 0
    last_restart: datetime | None = None
    last_sidecar_restart: datetime | None = None

    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for c in conditions:
        if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or []):
        state = cs.get("state") or {}
        terminated = state.get("terminated")
        waiting = state.get("waiting")
        last_terminated = (cs.get("lastState") or {}).get("terminated")
        restarts += int(cs.get("restartCount") or 0)
        if last_terminated:
            last_restart = _later(last_restart, last_terminated.get("finishedAt"))
        sidecar = _restartable(init_specs.get(cs.get("name")))
        if sidecar:
            sidecar_restarts += int(cs.get("restartCount") or 0)
            if last_terminated:
                last_sidecar_restart = _later(last_sidecar_restart, last_terminated.get("finishedAt"))
        if terminated and int(terminated.get("exitCode") or 0) == 0:
            continue
        if sidecar and cs.get("started"):
            if cs.get("ready"):
                ready += 1
            continue
        if terminated:
            if not terminated.get("reason"):
                if terminated.get("signal"):
                    reason = f"Init:Signal:{terminated['signal']}"
                else:
                    reason = f"Init:ExitCode:{int(terminated.get('exitCode') or 0)}"
            else:
                reason = "Init:" + terminated["reason"]
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _condition_true(conditions, "Initialized"):
        restarts = sidecar_restarts
        last_restart = last_sidecar_restart
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            state = cs.get("state") or {}
            terminated = state.get("terminated")
            waiting = state.get("waiting")
            restarts += int(cs.get("restartCount") or 0)
            last_terminated = (cs.get("lastState") or {}).get("terminated")
            if last_terminated:
                last_restart = _later(last_restart, last_terminated.get("finishedAt"))
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                if terminated.get("signal"):
                    reason = f"Signal:{terminated['signal']}"
                else:
                    reason = f"ExitCode:{int(terminated.get('exitCode') or 0)}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _condition_true(conditions, "Ready") else "NotReady"

    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"

    restarts_text = str(restarts)
    if restarts and last_restart is not None:
        restarts_text = f"{restarts} ({human_duration((now - last_restart).total_seconds())} ago)"
    return f"{ready}/{total}", reason, restarts_text, since(meta.get("creationTimestamp"), now)


def pod_status(pod: dict, now: datetime | None = None) -> str:
    """The STATUS column of ``kubectl get pods`` for one pod."""
    return pod_columns(pod, now or datetime.now(timezone.utc))[1]


def pod_row(pod: dict, now: datetime) -> tuple[list, list | None]:
    """Cells of a pod row (wide columns included) and the row conditions."""
    ready, reason, restarts, age = pod_columns(pod, now)
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    ips = status.get("podIPs") or []
    ip = (ips[0].get("ip") if ips else "") or "<none>"
    gates = spec.get("readinessGates") or []
    gates_text = "<none>"
    if gates:
        conditions = status.get("conditions") or []
        true_count = 0
        for gate in gates:
            for c in conditions:
                if c.get("type") == gate.get("conditionType"):
                    true_count += c.get("status") == "True"
                    break
        gates_text = f"{true_count}/{len(gates)}"
    cells = [
        pod["metadata"]["name"],
        ready,
        reason,
        restarts,
        age,
        ip,
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_text,
    ]
    conditions = None
    if status.get("phase") == "Succeeded":
        conditions = [
            {
                "type": "Completed",
                "status": "True",
                "reason": "Succeeded",
                "message": "The pod has completed successfully.",
            }
        ]
    elif status.get("phase") == "Failed":
        conditions = [
            {"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}
        ]
    return cells, conditions


def job_status(job: dict) -> str:
    """The STATUS column of ``kubectl get jobs``."""
    conditions = (job.get("status") or {}).get("conditions") or []

    def has(ctype: str) -> bool:
        for c in conditions:
            if c.get("type") == ctype:
                return c.get("status") == "True"
        return False

    if has("Complete"):
        return "Complete"
    if has("Failed"):
        return "Failed"
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        return "Terminating"
    if has("Suspended"):
        return "Suspended"
    if has("FailureTarget"):
        return "FailureTarget"
    if has("SuccessCriteriaMet"):
        return "SuccessCriteriaMet"
    return "Running"


def format_label_selector(selector: dict | None) -> str:
    """A LabelSelector as kubectl writes it ("<none>" when empty)."""
    if not selector:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, key, values = expr.get("operator"), expr.get("key"), expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts) or "<none>"


def job_row(job: dict, now: datetime) -> list:
    """Cells of a job row, wide columns included."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    duration = ""
    if start is not None:
        duration = human_duration(((end or now) - start).total_seconds())
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [
        job["metadata"]["name"],
        job_status(job),
        completions,
        duration,
        since(job["metadata"].get("creationTimestamp"), now),
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
        format_label_selector(spec.get("selector")),
    ]


def node_row(node: dict, now: datetime) -> list:
    """Cells of a node row."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    state = "Unknown"
    if ready is not None:
        state = "Ready" if ready.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = node["metadata"].get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    addresses = (node.get("status") or {}).get("addresses") or []
    internal = next((a.get("address") for a in addresses if a.get("type") == "InternalIP"), "<none>")
    version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [
        node["metadata"]["name"],
        state,
        ",".join(roles) or "<none>",
        since(node["metadata"].get("creationTimestamp"), now),
        version,
        internal,
    ]


def event_row(event: dict, now: datetime) -> list:
    """Cells of an event row."""
    obj = event.get("involvedObject") or {}
    last = event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
    first = (
        event.get("firstTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp")
    )
    source = (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
    return [
        since(last, now),
        event.get("type", ""),
        event.get("reason", ""),
        f"{(obj.get('kind') or '').lower()}/{obj.get('name', '')}",
        obj.get("fieldPath", ""),
        source,
        (event.get("message") or "").strip(),
        since(first, now),
        int(event.get("count") or 1),
        event["metadata"]["name"],
    ]


def service_row(svc: dict, now: datetime) -> list:
    """Cells of a service row: printService's external IP and port rules."""
    spec = svc.get("spec") or {}
    kind = spec.get("type", "ClusterIP")
    ingress = ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    if kind == "ExternalName":
        external = spec.get("externalName", "")
    elif spec.get("externalIPs"):
        external = ",".join(spec["externalIPs"])
    elif kind == "LoadBalancer":
        external = ",".join(i.get("ip") or i.get("hostname", "") for i in ingress) or "<pending>"
    else:
        external = "<none>"
    ports = []
    for p in spec.get("ports") or []:
        text = f"{p.get('port')}"
        if p.get("nodePort"):
            text += f":{p['nodePort']}"
        ports.append(f"{text}/{p.get('protocol', 'TCP')}")
    selector = spec.get("selector") or {}
    return [
        svc["metadata"]["name"],
        kind,
        spec.get("clusterIP") or "<none>",
        external,
        ",".join(ports) or "<none>",
        since(svc["metadata"].get("creationTimestamp"), now),
        ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>",
    ]


def columns_for(resource: str) -> list[dict]:
    """Column definitions of a resource's table."""
    return {
        "pods": POD_COLUMNS,
        "jobs": JOB_COLUMNS,
        "nodes": NODE_COLUMNS,
        "namespaces": NAMESPACE_COLUMNS,
        "configmaps": CONFIGMAP_COLUMNS,
        "secrets": SECRET_COLUMNS,
        "services": SERVICE_COLUMNS,
        "events": EVENT_COLUMNS,
        "leases": LEASE_COLUMNS,
    }.get(resource, GENERIC_COLUMNS)


def row_for(resource: str, obj: dict, now: datetime, include_object: str = "PartialObjectMetadata") -> dict:
    """One table row for an object."""
    conditions = None
    if resource == "pods":
        cells, conditions = pod_row(obj, now)
    elif resource == "jobs":
        cells = job_row(obj, now)
    elif resource == "nodes":
        cells = node_row(obj, now)
    elif resource == "namespaces":
        cells = [
            obj["metadata"]["name"],
            (obj.get("status") or {}).get("phase", ""),
            since(obj["metadata"].get("creationTimestamp"), now),
        ]
    elif resource == "configmaps":
        count = len(obj.get("data") or {}) + len(obj.get("binaryData") or {})
        cells = [obj["metadata"]["name"], count, since(obj["metadata"].get("creationTimestamp"), now)]
    elif resource == "secrets":
        count = len(obj.get("data") or {})
        cells = [
            obj["metadata"]["name"],
            obj.get("type", ""),
            count,
            since(obj["metadata"].get("creationTimestamp"), now),
        ]
    elif resource == "services":
        cells = service_row(obj, now)
    elif resource == "events":
        cells = event_row(obj, now)
    elif resource == "leases":
        holder = (obj.get("spec") or {}).get("holderIdentity")
        cells = [
            obj["metadata"]["name"],
            holder if isinstance(holder, str) else "",
            since(obj["metadata"].get("creationTimestamp"), now),
        ]
    else:
        cells = [obj["metadata"]["name"], since(obj["metadata"].get("creationTimestamp"), now)]
    row: dict = {"cells": cells}
    if conditions:
        row["conditions"] = conditions
    if include_object == "Object":
        row["object"] = obj
    elif include_object != "None":
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"],
        }
    return row


def table(
    resource: str,
    objects: list[dict],
    now: datetime,
    resource_version: str | None = None,
    include_object: str = "PartialObjectMetadata",
    headers: bool = True,
) -> dict:
    """A meta.k8s.io/v1 Table of objects of one resource."""
    meta: dict = {}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns_for(resource) if headers else None,
        "rows": [row_for(resource, o, now, include_object) for o in objects],
    }

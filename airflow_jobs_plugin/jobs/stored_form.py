"""A pod template in the one form that says what its pods run: the API server's defaults filled in, what
reads as absent left out, quantities by value (pure, no I/O).

Two job objects that run the same pods differ as JSON. One was read back from the API server, which
fills defaults on create and writes the object back through Go structs that leave out empty lists, maps
and strings and false plain booleans; the other was built by this product and never sent. An MPIJob is a
custom resource: the server stores its templates as given, with only its CRD's schema defaults, and the
rest of the defaults reach its pods when the MPI operator creates them. :func:`pod_template` brings any of
these to one form, so that two templates are equal exactly when the pods made from them are.

Where each rule comes from (read there, not guessed):

* kubernetes v1.36.3 ``pkg/apis/core/v1/defaults.go``: ``SetDefaults_PodSpec`` (dnsPolicy, restartPolicy,
  an empty securityContext, terminationGracePeriodSeconds, schedulerName), ``SetDefaults_Container``
  (imagePullPolicy from the image's tag, terminationMessagePath and -Policy), ``SetDefaults_Volume`` (a
  volume naming no source is an emptyDir), the volume sources' ``defaultMode``, ``hostPath.type``,
  ``SetDefaults_Probe``, ``SetDefaults_HTTPGetAction``, ``SetDefaults_ObjectFieldSelector``,
  ``SetDefaults_ServiceAccountTokenProjection``, ``SetDefaults_PersistentVolumeClaimSpec``,
  ``SetDefaults_ResourceList`` (quantities rounded up to milli-units), and ``SetDefaults_Pod``, which
  every pod made from a template gets (requests default to limits, enableServiceLinks, the host ports of
  a host-network pod);
* kubernetes v1.36.3 ``pkg/apis/batch/v1/zz_generated.defaults.go`` (``SetObjectDefaults_Job``): which of
  those run inside a Job's template (ports' protocol, fileKeyRef.optional, the iscsi, rbd, scaleIO and
  azureDisk sources' fields);
* kubernetes v1.36.3 ``pkg/apis/core/v1/conversion.go``: ``serviceAccount`` is the deprecated spelling of
  ``serviceAccountName`` (the name wins; the server writes both); the ServiceAccount admission plugin
  (``plugin/pkg/admission/serviceaccount``) gives a pod naming none the account ``default``;
* kubeflow/mpi-operator v0.8.2 ``manifests/base/kubeflow.org_mpijobs.yaml``: the CRD's schema defaults
  in an MPIJob's templates are a subset of the above (ports' protocol, references' empty names).

What a kind's controller adds to its own object (a Job's selector, an MPIJob's replicas) is the kind's:
``JobKind.stored_form``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from airflow_jobs_plugin.jobs.spec_checks import parse_quantity

# Fields whose value is a map of free keys (labels, a node selector, a resource list), not a struct: their
# entries are kept whatever their value (a label's empty value is a value).
MAP_FIELDS = frozenset(
    {"labels", "annotations", "nodeSelector", "limits", "requests", "overhead", "matchLabels", "capacity"}
)
# Resource lists, whose quantities the server rounds up to milli-units (SetDefaults_ResourceList).
RESOURCE_LISTS = frozenset({"limits", "requests", "overhead"})
# Plain (non-pointer) booleans of the core types that default to false: the server never writes false.
PLAIN_BOOLS = frozenset({"hostNetwork", "hostPID", "hostIPC", "stdin", "stdinOnce", "tty", "readOnly"})
# Volume sources that carry a default file mode (0644: SecretVolumeSourceDefaultMode and its siblings).
_DEFAULT_MODE_SOURCES = ("secret", "configMap", "downwardAPI", "projected")
_DEFAULT_MODE = 0o644
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def pod_template(template: Any) -> Any:
    """``template`` (a PodTemplateSpec's JSON) in the form that says what its pods run: a new object,
    ``template`` unchanged. Anything that is not shaped like a template is returned as it is, for the
    comparison to name."""
    if not isinstance(template, Mapping):
        return copy.deepcopy(template)
    out = pruned(copy.deepcopy(dict(template)))
    spec = out.get("spec")
    if isinstance(spec, dict):
        _fill_pod_spec(spec)
    return pruned(out)


def pruned(value: Any, field: str | None = None) -> Any:
    """``value`` without what the API server's JSON leaves out: ``None``, empty strings, lists and maps,
    and the plain booleans' false (``field`` is the key ``value`` sits under, an item of a list the
    list's). A volume keeps an empty source: ``emptyDir: {}`` is a volume. Map entries are all kept;
    a resource list's quantities are read by value."""
    if isinstance(value, Mapping):
        if field in MAP_FIELDS:
            if field in RESOURCE_LISTS:
                return {str(k): quantity(v, milli=True) for k, v in value.items()}
            return dict(value)
        out: dict[str, Any] = {}
        for key, item in value.items():
            kept = pruned(item, key)
            if _absent(kept, key) and not (field == "volumes" and kept == {}):
                continue
            out[key] = kept
        return out
    if isinstance(value, list):
        return [pruned(item, field) for item in value]
    if field == "sizeLimit":
        return quantity(value, milli=False)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _absent(value: Any, field: str) -> bool:
    if value is None or value == "" or value == [] or value == {}:
        return True
    if value is False and field in PLAIN_BOOLS:
        return True
    # A container port's host port 0 is "none" (ContainerPort.HostPort is a plain int32, omitempty).
    return field == "hostPort" and value == 0 and not isinstance(value, bool)


def quantity(value: Any, *, milli: bool) -> Any:
    """A Kubernetes quantity by its value (``"1000m"`` and ``"1"``, ``"1Gi"`` and ``"1024Mi"`` read
    alike), rounded up to milli-units where the server rounds (``milli``); a value that is no quantity
    is kept as it is, for the comparison to name."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return value
    number = parse_quantity(str(value))
    if number is None:
        return value
    if milli:
        number = Decimal(math.ceil(number * 1000)) / 1000
    text = format(number.normalize(), "f")
    return "0" if text in ("-0", "0") else text


def pull_policy(image: str) -> str:
    """The imagePullPolicy the server gives a container of ``image`` that names none: ``Always`` for the
    tag ``latest`` (also when no tag nor digest is given), else ``IfNotPresent`` (``SetDefaults_Container``
    with ``parsers.ParseImageName``, kubernetes v1.36.3)."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.rpartition(":")[2] if ":" in last else ""
    if not tag and not digest:
        tag = "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _fill_pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = account
    spec.pop("serviceAccount", None)
    host_network = spec.get("hostNetwork") is True
    for kind in _CONTAINER_LISTS:
        for container in _dicts(spec.get(kind)):
            _fill_container(container, host_network)
    for volume in _dicts(spec.get("volumes")):
        _fill_volume(volume)


def _fill_container(container: dict[str, Any], host_network: bool) -> None:
    image = container.get("image")
    if isinstance(image, str):
        container.setdefault("imagePullPolicy", pull_policy(image))
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    for port in _dicts(container.get("ports")):
        port.setdefault("protocol", "TCP")
        if host_network and "hostPort" not in port and "containerPort" in port:
            port["hostPort"] = port["containerPort"]
    for variable in _dicts(container.get("env")):
        source = variable.get("valueFrom")
        if isinstance(source, dict):
            _fill_field_ref(source.get("fieldRef"))
            if isinstance(source.get("fileKeyRef"), dict):
                source["fileKeyRef"].setdefault("optional", False)
    resources = container.get("resources")
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for name, amount in resources["limits"].items():
                requests.setdefault(name, amount)
        # Limits first: a request the limits filled in is named by its limit when it differs.
        container["resources"] = {"limits": resources.pop("limits"), **resources}
    for probe in (container.get(name) for name in _PROBES):
        if isinstance(probe, dict):
            for key, default in (
                ("timeoutSeconds", 1),
                ("periodSeconds", 10),
                ("successThreshold", 1),
                ("failureThreshold", 3),
            ):
                probe.setdefault(key, default)
            _fill_http_get(probe.get("httpGet"))
    lifecycle = container.get("lifecycle")
    if isinstance(lifecycle, dict):
        for hook in ("postStart", "preStop"):
            if isinstance(lifecycle.get(hook), dict):
                _fill_http_get(lifecycle[hook].get("httpGet"))


def _fill_http_get(action: Any) -> None:
    if isinstance(action, dict):
        action.setdefault("path", "/")
        action.setdefault("scheme", "HTTP")


def _fill_field_ref(ref: Any) -> None:
    if isinstance(ref, dict):
        ref.setdefault("apiVersion", "v1")


def _fill_volume(volume: dict[str, Any]) -> None:
    if not any(key != "name" for key in volume):
        volume["emptyDir"] = {}
    for moded in _DEFAULT_MODE_SOURCES:
        if isinstance(volume.get(moded), dict):
            volume[moded].setdefault("defaultMode", _DEFAULT_MODE)
    if isinstance(volume.get("hostPath"), dict):
        volume["hostPath"].setdefault("type", "")
    if isinstance(volume.get("downwardAPI"), dict):
        for item in _dicts(volume["downwardAPI"].get("items")):
            _fill_field_ref(item.get("fieldRef"))
    if isinstance(volume.get("projected"), dict):
        for source in _dicts(volume["projected"].get("sources")):
            if isinstance(source.get("downwardAPI"), dict):
                for item in _dicts(source["downwardAPI"].get("items")):
                    _fill_field_ref(item.get("fieldRef"))
            if isinstance(source.get("serviceAccountToken"), dict):
                source["serviceAccountToken"].setdefault("expirationSeconds", 3600)
    for kind, defaults in _SOURCE_DEFAULTS:
        if isinstance(volume.get(kind), dict):
            for key, default in defaults:
                volume[kind].setdefault(key, default)
    ephemeral = volume.get("ephemeral")
    if isinstance(ephemeral, dict) and isinstance(ephemeral.get("volumeClaimTemplate"), dict):
        claim_spec = ephemeral["volumeClaimTemplate"].get("spec")
        if isinstance(claim_spec, dict):
            claim_spec.setdefault("volumeMode", "Filesystem")
    image = volume.get("image")
    if isinstance(image, dict) and isinstance(image.get("reference"), str):
        image.setdefault("pullPolicy", pull_policy(image["reference"]))


# The volume sources whose fields SetObjectDefaults_Job fills (kubernetes v1.36.3).
_SOURCE_DEFAULTS: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = (
    ("iscsi", (("iscsiInterface", "default"),)),
    ("rbd", (("pool", "rbd"), ("user", "admin"), ("keyring", "/etc/ceph/keyring"))),
    ("scaleIO", (("storageMode", "ThinProvisioned"), ("fsType", "xfs"))),
    (
        "azureDisk",
        (("cachingMode", "ReadWrite"), ("fsType", "ext4"), ("readOnly", False), ("kind", "Shared")),
    ),
)


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []

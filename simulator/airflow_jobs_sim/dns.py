"""Cluster DNS names for the local processes of exec mode.

The records are those of the Kubernetes DNS specification (kubernetes/dns ``docs/specification.md``,
as CoreDNS's ``kubernetes`` plugin serves them):

- a Service ``s`` in ``ns``: ``s.ns.svc.cluster.local`` -> its ClusterIP, or for a headless Service
  (``clusterIP: None``) the IPs of its Ready pods matching its selector;
- a pod with ``spec.hostname`` ``h`` and ``spec.subdomain`` ``s``, when a headless Service ``s`` exists in
  its namespace: ``h.s.ns.svc.cluster.local`` -> the pod IP (published before the pod is Ready only when
  the Service sets ``publishNotReadyAddresses``, which the MPI operator's Service does);
- a pod's resolv.conf searches ``ns.svc.cluster.local svc.cluster.local cluster.local`` with ``ndots:5``,
  so ``h.s.ns.svc`` resolves through the last search domain.

Resolving them without root: a process cannot get a private ``/etc/hosts`` or resolver, and ``HOSTALIASES``
only maps a name to another name, never to an address. The kubelet therefore puts two small commands,
``getent`` and ``nslookup``, first on the process's ``PATH``: they answer cluster names from a hosts file
the kubelet keeps current and hand every other name to the system's own command. Shell scripts that
resolve with ``getent hosts`` or ``nslookup`` (as the product's wait-for-workers script does) see the
cluster's names; a program calling ``getaddrinfo`` itself (Python's ``socket``, ``ping``, ``ssh``) does not.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterable

DOMAIN = "cluster.local"
HOSTS_ENV = "SIM_CLUSTER_HOSTS"
SEARCH_ENV = "SIM_CLUSTER_SEARCH"


def _selected(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _ready(pod: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def cluster_records(services: Iterable[dict], pods: Iterable[dict]) -> dict[str, list[str]]:
    """Fully qualified name -> addresses, from the stored Services and pods (pure)."""
    pods = [p for p in pods if (p.get("status") or {}).get("podIP")]
    records: dict[str, list[str]] = {}
    headless: dict[tuple[str, str], dict] = {}
    for svc in services:
        meta, spec = svc["metadata"], svc.get("spec") or {}
        ns, name = meta.get("namespace", "default"), meta["name"]
        fqdn = f"{name}.{ns}.svc.{DOMAIN}"
        cluster_ip = spec.get("clusterIP")
        if cluster_ip and cluster_ip != "None":
            records[fqdn] = [cluster_ip]
            continue
        headless[(ns, name)] = spec
        selector = spec.get("selector") or {}
        ips = [
            p["status"]["podIP"]
            for p in pods
            if p["metadata"].get("namespace") == ns
            and _selected(selector, p["metadata"].get("labels") or {})
            and (_ready(p) or spec.get("publishNotReadyAddresses"))
        ]
        if ips:
            records[fqdn] = sorted(ips)
    for pod in pods:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        ns, sub = meta.get("namespace", "default"), spec.get("subdomain")
        svc_spec = headless.get((ns, sub or ""))
        if not sub or svc_spec is None:
            continue
        if not (_ready(pod) or svc_spec.get("publishNotReadyAddresses")):
            continue
        host = spec.get("hostname") or meta["name"]
        records[f"{host}.{sub}.{ns}.svc.{DOMAIN}"] = [pod["status"]["podIP"]]
    return records


def hosts_text(records: dict[str, list[str]]) -> str:
    """The records as an ``/etc/hosts`` file."""
    return "".join(f"{ip}\t{name}\n" for name, ips in sorted(records.items()) for ip in ips)


def search_path(namespace: str) -> str:
    """A pod's DNS search domains (``ClusterFirst`` policy)."""
    return f"{namespace}.svc.{DOMAIN} svc.{DOMAIN} {DOMAIN}"


_SHIM = '''#!{python}
"""{tool} for a simulated pod: cluster names from ${hosts}, every other name from the system's {tool}."""
import os, shutil, sys

def lookup(name):
    candidates = [name.rstrip(".")]
    if not name.endswith(".") and name.count(".") < 5:  # ndots:5: search domains first
        candidates = [name + "." + d for d in os.environ.get("{search}", "").split()] + candidates
    try:
        with open(os.environ["{hosts}"]) as f:
            rows = [line.split() for line in f if line.strip()]
    except (KeyError, OSError):
        return None, []
    for candidate in candidates:
        ips = [r[0] for r in rows if len(r) > 1 and r[1] == candidate]
        if ips:
            return candidate, ips
    return None, []

args = sys.argv[1:]
tool = "{tool}"
names = args[1:] if tool == "getent" and args[:1] in (["hosts"], ["ahosts"], ["ahostsv4"]) else (
    [a for a in args if not a.startswith("-")][:1] if tool == "nslookup" else [])
if names:
    name, ips = lookup(names[0])
    if ips:
        if tool == "getent":
            print(ips[0] + "\\t" + name)
        else:
            print("Server:\\t\\t10.96.0.10\\nAddress:\\t10.96.0.10#53\\n")
            for ip in ips:
                print("Name:\\t" + name + "\\nAddress: " + ip)
        sys.exit(0)
    if names[0].rstrip(".").endswith((".svc", ".{domain}")):
        if tool == "nslookup":
            print("** server can't find " + names[0] + ": NXDOMAIN")
            sys.exit(1)
        sys.exit(2)
here = os.path.dirname(os.path.abspath(__file__))
path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.abspath(p or ".") != here)
real = shutil.which(tool, path=path)
if real is None:
    sys.exit(2 if tool == "getent" else 1)
os.execv(real, [real] + args)
'''


def write_shims(directory: str) -> str:
    """Write the ``getent`` and ``nslookup`` commands into ``directory``; returns it."""
    os.makedirs(directory, exist_ok=True)
    for tool in ("getent", "nslookup"):
        path = os.path.join(directory, tool)
        with open(path, "w") as f:
            f.write(
                _SHIM.format(
                    python=sys.executable, tool=tool, hosts=HOSTS_ENV, search=SEARCH_ENV, domain=DOMAIN
                )
            )
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return directory

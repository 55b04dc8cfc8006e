"""Record what a client observes of a cluster, as plain data, so two clusters compare with one function.

A scenario (``scenarios.py``) is a function of a :class:`Cluster` and a namespace of its own that
drives the cluster through the REST API only and returns an *observation*: a dict of named, plain values
(status codes, error reasons and field paths, condition types and reasons, watch event sequences, pod
STATUS columns, object names and owners). Nothing in an observation depends on which cluster made it:
no uids, timestamps, resourceVersions, node names or generated suffixes, only what a client could rely
on. :func:`differences` compares two observations key by key; the tests run each scenario on the real
plane and on the simulator side by side and want no difference.

Waiting is bounded (every wait has a deadline, and a wait that runs out fails the scenario with what it
saw), never asserted on: no observation records how long anything took.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import urllib3
from kubernetes import client, config

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
JSON = "application/json"
MERGE = "application/merge-patch+json"

Observation = dict[str, Any]


class ScenarioTimeout(AssertionError):
    """A wait ran past its deadline: the scenario could not observe what it waited for."""


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: Any  # the decoded JSON body, or the text when it is not JSON

    def status_summary(self) -> dict:
        """What a client learns from a failed request: code, reason and each cause's field and type."""
        body = self.body if isinstance(self.body, dict) else {}
        details = body.get("details") or {}
        return {
            "code": self.status,
            "kind": body.get("kind"),
            "reason": body.get("reason"),
            "details.kind": details.get("kind"),
            "details.group": details.get("group"),
            "details.name": details.get("name"),
            "causes": sorted((c.get("field", ""), c.get("reason", "")) for c in details.get("causes") or []),
        }


class Cluster:
    """A cluster named by a kubeconfig, spoken to over raw HTTP (the same requests on every cluster)."""

    def __init__(self, kubeconfig: str, label: str, *, serves_accounts: bool) -> None:
        self.label = label
        self.serves_accounts = serves_accounts
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self.host = cfg.host.rstrip("/")
        self.headers: dict[str, str] = {}
        token = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
        if token:
            self.headers["Authorization"] = token if token.startswith("Bearer ") else f"Bearer {token}"
        kwargs: dict[str, Any] = {"num_pools": 4, "maxsize": 8}
        if self.host.startswith("https"):
            kwargs.update(
                cert_reqs="CERT_REQUIRED" if cfg.verify_ssl else "CERT_NONE",
                ca_certs=cfg.ssl_ca_cert,
                cert_file=cfg.cert_file,
                key_file=cfg.key_file,
                assert_hostname=False,
            )
        self.http = urllib3.PoolManager(**kwargs)

    # --- requests ---------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = JSON,
        accept: str = JSON,
        query: dict[str, str] | None = None,
    ) -> Reply:
        headers = {**self.headers, "Accept": accept}
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            headers["Content-Type"] = content_type
        url = self.host + path + ("?" + urlencode(query) if query else "")
        resp = self.http.request(
            method, url, body=data, headers=headers, timeout=urllib3.Timeout(connect=10, read=60)
        )
        ctype = resp.headers.get("Content-Type", "")
        text = resp.data.decode(errors="replace")
        try:
            decoded: Any = json.loads(text) if text else None
        except ValueError:
            decoded = text
        return Reply(resp.status, ctype, decoded)

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> dict:
        """A request that must succeed; its body."""
        reply = self.request(method, path, body, **kwargs)
        if reply.status >= 300:
            raise AssertionError(f"{self.label}: {method} {path} answered {reply.status}: {reply.body}")
        return reply.body

    def get(self, path: str) -> dict | None:
        reply = self.request("GET", path)
        if reply.status == 404:
            return None
        if reply.status >= 300:
            raise AssertionError(f"{self.label}: GET {path} answered {reply.status}: {reply.body}")
        return reply.body

    def namespace(self, scenario: str) -> str:
        """A fresh namespace for one scenario's objects."""
        name = f"d-{scenario.replace('_', '-')[:40]}-{uuid.uuid4().hex[:5]}"
        self.ok("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        # Pods need the namespace's `default` service account, which a real cluster's controller creates
        # (the simulator serves no ServiceAccounts and needs none).
        if self.serves_accounts:
            self.until(f"/api/v1/namespaces/{name}/serviceaccounts/default", lambda sa: sa is not None, 60)
            # The API server's ServiceAccount admission reads accounts from its informer, which may trail
            # the GET above; a Job controller that creates the first pod in that gap records FailedCreate
            # and retries (seen once in CI). A dry-run pod passing admission says pods can be created now.
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "admission-probe"},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
            }
            deadline = time.monotonic() + 60
            while (
                self.request("POST", f"/api/v1/namespaces/{name}/pods", pod, query={"dryRun": "All"}).status
                >= 300
            ):
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"{self.label}: no pod passes admission in namespace {name} after 60 s"
                    )
                time.sleep(0.1)
        return name

    # --- waiting ----------------------------------------------------------------------------------

    def until(self, path: str, predicate: Callable[[dict | None], bool], timeout: float) -> dict | None:
        """Poll ``path`` until ``predicate`` holds of it (None: absent); ScenarioTimeout past ``timeout``."""
        deadline = time.monotonic() + timeout
        last: dict | None = None
        while True:
            last = self.get(path)
            if predicate(last):
                return last
            if time.monotonic() > deadline:
                raise ScenarioTimeout(
                    f"{self.label}: {path} never got there; last seen: {json.dumps(last)[:2000]}"
                )
            time.sleep(0.2)

    def watch(
        self,
        path: str,
        *,
        accept: str = JSON,
        query: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> Iterator[dict]:
        """Open a watch on ``path`` (it is registered when this returns: the server has answered) and
        return its events, one decoded event at a time, until the caller stops or the server-side
        ``timeoutSeconds`` ends it. A watch from no resourceVersion starts with an ADDED event for each
        object that exists, so an object created just before the watch is still seen from its start."""
        params = {"watch": "true", "timeoutSeconds": str(int(timeout)), **(query or {})}
        resp = self.http.request(
            "GET",
            self.host + path + "?" + urlencode(params),
            headers={**self.headers, "Accept": accept},
            preload_content=False,
            timeout=urllib3.Timeout(connect=10, read=timeout + 10),
        )
        if resp.status != 200:
            body = resp.data[:500]
            resp.release_conn()
            raise AssertionError(f"{self.label}: watch {path}: {resp.status} {body!r}")
        return self._events(resp)

    @staticmethod
    def _events(resp: Any) -> Iterator[dict]:
        try:
            buffer = b""
            for chunk in resp.stream(4096):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            resp.release_conn()
            resp.close()


# --- plain-data helpers ----------------------------------------------------------------------------


def conditions(obj: dict | None) -> list[tuple[str, str, str]]:
    """An object's status conditions as (type, status, reason), in the order the object lists them."""
    return [
        (c.get("type", ""), c.get("status", ""), c.get("reason", ""))
        for c in ((obj or {}).get("status") or {}).get("conditions") or []
    ]


def condition_set(obj: dict | None) -> list[tuple[str, str, str]]:
    return sorted(conditions(obj))


def dedupe(seq: list) -> list:
    """``seq`` with runs of equal items folded into one."""
    out: list = []
    for item in seq:
        if not out or out[-1] != item:
            out.append(item)
    return out


SUFFIX = re.compile(r"-[a-z0-9]{5}$")


def shape(name: str, base: str) -> str:
    """A generated name as its pattern: ``train-x7k2q`` -> ``train-*`` (the suffix is random)."""
    return SUFFIX.sub("-*", name) if name.startswith(base) else name


def has_condition(obj: dict | None, ctype: str, status: str = "True") -> bool:
    return any(t == ctype and s == status for t, s, _ in conditions(obj))


def finished(job: dict | None) -> bool:
    return has_condition(job, "Complete") or has_condition(job, "Failed")


# --- the comparison --------------------------------------------------------------------------------


def differences(real: Observation, sim: Observation) -> list[str]:
    """Every key whose value differs between the two observations, as ``key: real=... sim=...``."""
    out = []
    for key in sorted(set(real) | set(sim)):
        if key not in sim:
            out.append(f"{key}: only the real cluster observed it: {real[key]!r}")
        elif key not in real:
            out.append(f"{key}: only the simulator observed it: {sim[key]!r}")
        elif _plain(real[key]) != _plain(sim[key]):
            out.append(f"{key}:\n    real: {_plain(real[key])!r}\n    sim:  {_plain(sim[key])!r}")
    return out


def _plain(value: Any) -> Any:
    """Tuples and lists compare alike (JSON has only lists)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


Scenario = Callable[[Cluster, str], Observation]


def observe_both(scenario: Scenario, real: Cluster, sim: Cluster) -> tuple[Observation, Observation]:
    """Run ``scenario`` on both clusters at once (each in a fresh namespace); their observations."""
    results: dict[str, Observation] = {}
    errors: dict[str, BaseException] = {}

    def run(cluster: Cluster) -> None:
        try:
            results[cluster.label] = scenario(cluster, cluster.namespace(scenario.__name__))
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the test's thread
            errors[cluster.label] = exc

    threads = [threading.Thread(target=run, args=(c,), name=c.label) for c in (real, sim)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for label, exc in errors.items():
        raise AssertionError(f"scenario {scenario.__name__} on the {label} cluster: {exc}") from exc
    return results[real.label], results[sim.label]

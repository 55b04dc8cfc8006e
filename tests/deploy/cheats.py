"""The cheats the shipped RBAC and admission policies refuse, as requests any identity can send: what a
DAG's code (with the worker's or the triggerer's token), the api-server's identity or a platform user's
``kubectl apply`` would try to start or charge a GPU job past the admission controller.

One table for the simulator (tests/reliability/test_rbac_least_privilege.py) and the real control plane
(tests/plane_scenarios/test_rbac_and_admission_policy_on_the_plane.py): each cheat says what it sends,
and which identities RBAC stops before any policy sees the request; for the others the refusal names the
rule (one of ``rules``: where several policies refuse a request, the API server reports one of them).
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from itertools import count

from airflow_jobs_plugin.cluster.kube import CONFIGMAPS, JOBS, KubeClient, KubeError
from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.mpi import MPIJOBS
from airflow_jobs_plugin.jobs.manifests import submitted_body
from airflow_jobs_plugin.jobs.spec import JobSpec, TaskIdentity
from airflow_jobs_plugin.queueing import kueue

# Who sends: the deployment's identities and a cluster admin (system:masters: past RBAC, not past
# admission).
WHO = ("worker", "triggerer", "api-server", "admin")
_serial = count(1)
# Job names follow the task: a run of its own per session, so a cluster that keeps an earlier session's
# jobs (the real plane) takes this one's.
_SESSION = datetime.now(timezone.utc).isoformat()


def honest_body(kind: str = "Job", run: str = "run", group: str = "vision") -> dict:
    """What the worker creates for a fresh task (``submitted_body``: suspended, behind the pool's gate,
    labelled), of a unique task run."""
    task = TaskIdentity("cheats", kind.lower(), f"{run}-{_SESSION}-{next(_serial)}", -1, 1)
    spec = JobSpec.build(
        image="registry.example/trainer:1",
        group=group,
        user="alice",
        gpus=1,
        workers=2 if kind == "MPIJob" else 1,
    )
    return submitted_body(spec, task=task, charge=None, fingerprint="f", queued_at=datetime.now(timezone.utc))


def _suspend(body: dict, value: bool) -> dict:
    holder = body["spec"]["runPolicy"] if body["kind"] == "MPIJob" else body["spec"]
    holder["suspend"] = value
    return body


def _resource(body: dict):
    return MPIJOBS if body["kind"] == "MPIJob" else JOBS


# Every cheat: ``send(client, namespace, honest)`` makes the request, given a job the worker created
# honestly (``honest``, for the updates); the rules that may name its refusal; the identities whose RBAC
# refuses it first.
Send = Callable[[KubeClient, str, dict], Awaitable[object]]


@dataclass(frozen=True)
class Cheat:
    name: str
    send: Send
    rules: frozenset[str]
    rbac_refuses: frozenset[str]
    updates: bool = False  # sent to the honest job (else it creates its own)


async def _raw_unsuspended(client: KubeClient, namespace: str, honest: dict) -> object:
    body = _suspend(honest_body(), False)
    body["spec"]["parallelism"] = 0  # it runs no pod, should it be let through
    return await client.create(JOBS, namespace, body)


async def _team_b_queue(client: KubeClient, namespace: str, honest: dict) -> object:
    body = honest_body()
    body["metadata"]["labels"][kueue.QUEUE_NAME_LABEL] = "team-b"
    return await client.create(JOBS, namespace, body)


async def _apply_without_the_gate(client: KubeClient, namespace: str, honest: dict) -> object:
    """A platform user's ``kubectl apply`` of a job as the product would build it, but without the gate."""
    body = honest_body()
    del body["metadata"]["annotations"][kueue.ADMISSION_GATE_ANNOTATION]
    return await client.create(JOBS, namespace, body)


async def _created_admitted(client: KubeClient, namespace: str, honest: dict) -> object:
    body = honest_body()
    body["metadata"]["labels"][labels.ADMITTED] = labels.ADMITTED_VALUE
    body["metadata"]["annotations"][labels.ADMITTED_AT] = "2026-01-01T00:00:00Z"
    return await client.create(JOBS, namespace, body)


def _patch(patch: dict) -> Send:
    async def send(client: KubeClient, namespace: str, honest: dict) -> object:
        return await client.merge_patch(
            _resource(honest), namespace, honest["metadata"]["name"], copy.deepcopy(patch)
        )

    return send


async def _ledger(client: KubeClient, namespace: str, honest: dict) -> object:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "airflow-jobs-quota-vision"},
        "data": {"forged": "{}"},
    }
    return await client.create(CONFIGMAPS, namespace, body)


SUBMISSION = frozenset({"suspended-submission"})
UPDATES = frozenset({"admission-by-controller", "kill-request-only", "user-actions-only"})
CHEATS = (
    Cheat("a raw unsuspended job", _raw_unsuspended, SUBMISSION, frozenset({"api-server"})),
    Cheat("a job naming team-b's LocalQueue", _team_b_queue, SUBMISSION, frozenset({"api-server"})),
    Cheat("a kubectl apply without the gate", _apply_without_the_gate, SUBMISSION, frozenset({"api-server"})),
    Cheat("a job created admitted", _created_admitted, SUBMISSION, frozenset({"api-server"})),
    Cheat(
        "the pool's gate removed",
        _patch({"metadata": {"annotations": {kueue.ADMISSION_GATE_ANNOTATION: None}}}),
        UPDATES,
        frozenset({"worker"}),
        updates=True,
    ),
    Cheat(
        "an unsuspend",
        _patch({"spec": {"suspend": False}}),
        UPDATES,
        frozenset({"worker"}),
        updates=True,
    ),
    Cheat(
        "a verdict",
        _patch({"metadata": {"annotations": {labels.VERDICT: "Succeeded"}}}),
        frozenset({"kill-request-only"}),
        frozenset({"worker"}),
        updates=True,
    ),
    Cheat(
        "a Kueue queue added",
        _patch({"metadata": {"labels": {kueue.QUEUE_NAME_LABEL: "team-b"}}}),
        UPDATES,
        frozenset({"worker"}),
        updates=True,
    ),
    Cheat(
        "another label than the kill request",
        _patch({"metadata": {"labels": {labels.KILL_REQUESTED: "1", "airflow-jobs.io/role": "x"}}}),
        frozenset({"kill-request-only"}),
        frozenset({"worker"}),
        updates=True,
    ),
    Cheat(
        "a ConfigMap named like a ledger",
        _ledger,
        frozenset({"ledgers-and-boards"}),
        frozenset({"worker", "triggerer", "api-server"}),
    ),
)
# Who each cheat is tried by: the kill-request rule's cheats are the triggerer's (its one patch); the
# others everyone's.
TRIED_BY = {
    "a verdict": ("triggerer",),
    "another label than the kill request": ("triggerer",),
}


def tries() -> list[tuple[Cheat, str]]:
    return [(cheat, who) for cheat in CHEATS for who in TRIED_BY.get(cheat.name, WHO)]


def check_refused(cheat: Cheat, who: str, answer: object) -> None:
    """The API server refused ``cheat`` sent by ``who`` as the shipped manifests say it must."""
    assert isinstance(answer, KubeError) and answer.status == 403, (cheat.name, who, answer)
    said = str(answer)
    if who in cheat.rbac_refuses:
        assert "cannot" in said and "ValidatingAdmissionPolicy" not in said, (cheat.name, who, said)
        return
    assert "ValidatingAdmissionPolicy" in said, (cheat.name, who, said)
    assert any(f"airflow-jobs rule {rule}:" in said for rule in cheat.rules), (cheat.name, who, said)


async def attempt(client: KubeClient, namespace: str, cheat: Cheat, honest: dict) -> object:
    """The API server's answer to ``cheat``: the object it stored (a failure of the policy), or its
    refusal."""
    try:
        return await cheat.send(client, namespace, honest)
    except KubeError as exc:
        return exc

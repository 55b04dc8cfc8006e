"""The pool charges what the pods ask for (jobs/kinds/charge.py): GPUs, device, pod count and queue position
come from the job's spec and the API server, priority and the right to charge from the policy; a pod
spec that could reach GPUs no count charges is refused, naming the field and the fix."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import pytest

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.jobs.kinds.charge import ChargeRefused, job_charge, pod_request
from airflow_jobs_plugin.jobs.manifests import build_manifest
from airflow_jobs_plugin.jobs.spec import TaskIdentity, validate
from airflow_jobs_plugin.queueing.quota.ledger_model import queued_job_of
from airflow_jobs_plugin.queueing.quota.model import CHARGING_KEY, POLICY_KEY, QueuedJob, Verdict
from airflow_jobs_plugin.queueing.quota.parse import parse_policy, policy_from_configmap_data
from airflow_jobs_plugin.queueing.quota.policy import decide

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
TASK = TaskIdentity("nightly", "train", "run-1", -1, 1)


def honest(**args) -> dict:
    """The job JobOperator builds, as the API server returns it (uid, creationTimestamp)."""
    spec = validate(image="trainer:1", group="vision", user="alice", **args)
    job = build_manifest(spec, name="train-a1", task=TASK, attempt=1, queued_at=T0)
    job["metadata"].update(uid="u-1", namespace="ml", creationTimestamp="2026-03-01T09:00:00Z")
    return job


def gpus_of(container: dict, count: int | str, resource: str = labels.GPU_RESOURCE) -> dict:
    container["resources"] = {"limits": {resource: str(count)}}
    return container


def pod(*, containers=(), init=()) -> dict:
    return {"containers": list(containers), "initContainers": list(init)}


def c(name: str, gpus: int = 0, *, sidecar: bool = False) -> dict:
    container: dict = {"name": name, "image": "x"}
    if gpus:
        gpus_of(container, gpus)
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


# --- what is charged -------------------------------------------------------------------------------


def test_the_pool_charges_the_pods_spec_not_the_gpus_annotation():
    """2 pods x 8 GPUs annotated as 1 GPU, priority 1000 and queued in 1970: charged 16, queued at its
    creation, at the policy's highest priority."""
    job = honest(gpus=8, workers=2, framework="torchrun")
    job["metadata"]["annotations"].update(
        {labels.GPUS: "1", labels.PRIORITY: "1000", labels.QUEUED_AT: "1970-01-01T00:00:00Z"}
    )
    queued = queued_job_of(job)
    assert (queued.gpus, queued.queued_at) == (16, T0.replace(microsecond=0))
    policy = parse_policy("groups: {vision: {gpus: 2}}\npriorities: {high: 100, normal: 0}")
    (decision,) = decide(policy, [queued], [], T0)
    assert decision.job.priority == 100
    assert decision.verdict is Verdict.OVER_QUOTA and "needs 16 GPUs" in decision.message


def test_an_honest_job_is_charged_what_its_annotation_says():
    for args in ({"gpus": 2}, {"gpus": 2, "workers": 3}, {"gpus": 4, "workers": 2, "framework": "torchrun"}):
        job = honest(**args)
        assert queued_job_of(job).gpus == int(job["metadata"]["annotations"][labels.GPUS]), args


def test_an_mpijob_is_charged_its_launcher_and_every_worker_replica():
    job = honest(gpus=2, workers=3, launcher_gpus=2)
    assert job_charge(job).gpus == 8
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 5
    assert job_charge(job).gpus == 12


def test_a_job_runs_no_more_pods_at_once_than_its_completions():
    job = honest(gpus=2)
    job["spec"].update(parallelism=8, completions=3)
    assert job_charge(job).gpus == 6


def test_a_gpu_init_container_is_charged_as_kubelet_counts_it():
    """The larger of the init container's GPUs and the app containers' sum (helpers.go)."""
    assert pod_request(pod(containers=[c("main", 2)], init=[c("warm", 4)]), labels.GPU_RESOURCE) == 4
    assert pod_request(pod(containers=[c("main", 4)], init=[c("warm", 2)]), labels.GPU_RESOURCE) == 4


def test_a_gpu_sidecar_is_charged_beside_the_main_container():
    """A restartPolicy: Always init container keeps running: its GPUs add to the app containers'."""
    assert (
        pod_request(pod(containers=[c("main", 2)], init=[c("proxy", 1, sidecar=True)]), "nvidia.com/gpu") == 3
    )


def test_an_init_container_after_a_sidecar_runs_beside_it():
    sidecar_first = pod(containers=[c("main", 1)], init=[c("proxy", 2, sidecar=True), c("warm", 3)])
    sidecar_after = pod(containers=[c("main", 1)], init=[c("warm", 3), c("proxy", 2, sidecar=True)])
    assert pod_request(sidecar_first, labels.GPU_RESOURCE) == 5
    assert pod_request(sidecar_after, labels.GPU_RESOURCE) == 3


def test_a_raw_job_with_a_gpu_init_container_is_charged_per_pod():
    job = honest(gpus=1, workers=2, framework="torchrun")
    job["spec"]["template"]["spec"].setdefault("initContainers", []).append(c("warm", 8))
    assert job_charge(job).gpus == 16


def test_a_request_wins_over_a_limit_and_a_limit_alone_is_the_request():
    container = {
        "name": "main",
        "resources": {"requests": {"nvidia.com/gpu": "3"}, "limits": {"nvidia.com/gpu": "3"}},
    }
    assert pod_request(pod(containers=[container]), labels.GPU_RESOURCE) == 3
    container = {"name": "main", "resources": {"requests": {"nvidia.com/gpu": "2"}}}
    assert pod_request(pod(containers=[container]), labels.GPU_RESOURCE) == 2


def test_a_device_is_read_from_the_spec():
    job = honest(gpus=3, gpu_resource="nvidia.com/mig-1g.10gb")
    del job["metadata"]["annotations"][labels.GPU_DEVICE]
    assert (queued_job_of(job).resource, queued_job_of(job).gpus) == ("nvidia.com/mig-1g.10gb", 3)


# --- what cannot be charged is refused, naming the field and the fix -------------------------------


def refusal(mutate) -> str:
    job = honest(gpus=2)
    mutate(job["spec"]["template"]["spec"])
    with pytest.raises(ChargeRefused) as caught:
        job_charge(job)
    return str(caught.value)


def test_a_dra_claim_is_refused():
    message = refusal(lambda p: p.update(resourceClaims=[{"name": "gpu", "resourceClaimName": "big"}]))
    assert (
        "worker template spec.resourceClaims: a DRA claim" in message and "gpus (and gpu_resource)" in message
    )
    message = refusal(lambda p: p["containers"][0]["resources"].update(claims=[{"name": "gpu"}]))
    assert "containers[0].resources.claims" in message


def test_a_privileged_container_is_refused():
    message = refusal(lambda p: p["containers"][0].update(securityContext={"privileged": True}))
    assert "containers[0].securityContext.privileged: a privileged container sees every GPU" in message


def test_another_accelerator_than_the_charged_one_is_refused():
    message = refusal(lambda p: p["containers"][0]["resources"]["limits"].update({"habana.ai/gaudi": "8"}))
    assert "a job holds one kind of device" in message and "habana.ai/gaudi" in message
    message = refusal(lambda p: p.setdefault("initContainers", []).append(gpus_of(c("w"), 1, "amd.com/gpu")))
    assert "amd.com/gpu" in message


def test_a_node_name_is_refused():
    message = refusal(lambda p: p.update(nodeName="gpu-node-1"))
    assert "spec.nodeName: binds the pod to node 'gpu-node-1' without the scheduler" in message


def test_a_visible_devices_variable_is_refused():
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    message = refusal(
        lambda p: p.setdefault("initContainers", []).append({"name": "x", "image": "x", "env": env})
    )
    assert "initContainers[0].env[0]: NVIDIA_VISIBLE_DEVICES would show GPUs" in message


def test_a_device_count_that_is_not_whole_is_refused_not_charged_zero():
    message = refusal(lambda p: p["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "500m"}))
    assert "resources.limits.nvidia.com/gpu: is not a whole number of devices" in message


def test_a_refused_job_waits_inadmissible_in_the_queue_read():
    job = honest(gpus=2)
    job["spec"]["template"]["spec"]["nodeName"] = "n1"
    with pytest.raises(ValueError, match="cannot be charged by the GPU quota pool"):
        queued_job_of(copy.deepcopy(job))


# --- who is charged: the charging rule, rechecked at admission -------------------------------------


def queued(user: str, group: str = "vision") -> QueuedJob:
    return QueuedJob(
        name=f"j-{group}-{user}", group=group, user=user, gpus=1, queued_at=T0, uid=f"u-{group}-{user}"
    )


def test_a_user_outside_the_groups_members_is_never_admitted():
    policy = parse_policy("groups: {vision: {gpus: 8, members: [alice]}}")
    decisions = {d.job.user: d for d in decide(policy, [queued("alice"), queued("mallory")], [], T0)}
    assert decisions["alice"].verdict is Verdict.ADMIT
    assert decisions["mallory"].verdict is Verdict.INADMISSIBLE
    assert (
        "charging rule groups.vision.members: user 'mallory' is not a member" in decisions["mallory"].message
    )


def test_a_group_and_user_no_dag_folder_may_charge_are_never_admitted():
    policy = policy_from_configmap_data(
        {
            POLICY_KEY: "groups: {vision: {gpus: 8}, big: {gpus: 64}}",
            CHARGING_KEY: "folders: {/dags/vision: {groups: [vision], users: [alice]}}",
        }
    )
    decisions = {d.job.group: d for d in decide(policy, [queued("alice"), queued("alice", "big")], [], T0)}
    assert decisions["vision"].verdict is Verdict.ADMIT
    assert decisions["big"].verdict is Verdict.INADMISSIBLE
    assert (
        f"charging rule {CHARGING_KEY}: no DAG folder may charge group 'big' as user 'alice'"
        in decisions["big"].message
    )


def test_a_malformed_charging_map_is_a_policy_error_naming_its_key():
    with pytest.raises(ValueError, match=f"data.{CHARGING_KEY}: folders"):
        policy_from_configmap_data({POLICY_KEY: "groups: {vision: {gpus: 8}}", CHARGING_KEY: "folders: 3"})


# --- priority from the policy ------------------------------------------------------------------------


def test_a_priority_above_the_groups_ceiling_is_queued_at_the_ceiling():
    policy = parse_policy(
        "groups: {vision: {gpus: 8, max_priority: normal}, nlp: {gpus: 8}}\npriorities: {high: 100, normal: 0}"
    )
    assert policy.charged_priority("vision", 1000) == 0
    assert policy.charged_priority("nlp", 1000) == 100
    assert policy.charged_priority("nlp", -5) == -5
    assert parse_policy("groups: {nlp: {gpus: 8}}").charged_priority("nlp", 1000) == 1000


def test_a_max_priority_naming_no_class_is_refused_with_the_classes():
    with pytest.raises(
        ValueError, match="groups.vision.max_priority: must be a priority class name or an integer"
    ):
        parse_policy("groups: {vision: {gpus: 8, max_priority: hihg}}\npriorities: {high: 100}")


def test_jobs_created_in_turn_queue_in_turn_whatever_their_own_queued_at_claims():
    """A client that built its jobs' bodies before creating them one after the other (their queued-at
    all before their creation, some more than a second before) still sees them queue in that order; a
    job created a second later never passes one created earlier, whatever it claims."""
    from airflow_jobs_plugin.queueing.quota.ledger_model import place_in_second

    built = T0.replace(microsecond=0)
    claims = [built + timedelta(milliseconds=i) for i in range(5)]
    created = [
        built,
        built,
        built + timedelta(seconds=1),
        built + timedelta(seconds=2),
        built + timedelta(seconds=2),
    ]
    places = [place_in_second(c, q) for c, q in zip(created, claims, strict=True)]
    assert places == sorted(places) and len(set(places)) == len(places)
    forged = place_in_second(built + timedelta(seconds=1), datetime(1970, 1, 1, tzinfo=timezone.utc))
    assert forged > places[1]


# --- forged charges: refused, naming what cannot be charged ----------------------------------------


def test_a_negative_pod_count_is_refused_naming_the_role():
    # The API server refuses both (Job parallelism, the MPIJob CRD's minimum); the pool never counts a
    # negative count as none either.
    job = honest(gpus=2, workers=3)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = -3
    with pytest.raises(ChargeRefused, match="worker count: -3 pods; give 0 or more"):
        job_charge(job)


@pytest.mark.parametrize("count", ["-1", "0.5", "1e-3", "lots"])
def test_a_gpu_count_that_is_not_a_whole_device_count_is_refused_naming_the_field(count):
    job = honest(gpus=1)
    gpus_of(job["spec"]["template"]["spec"]["containers"][0], count)
    with pytest.raises(ChargeRefused, match=r"resources\.limits\.nvidia\.com/gpu"):
        job_charge(job)


def test_an_absurd_gpu_count_is_charged_as_asked_and_ended_over_quota():
    job = honest(gpus=1)
    gpus_of(job["spec"]["template"]["spec"]["containers"][0], "1k")
    queued = queued_job_of(job)
    assert queued.gpus == 1000
    (decision,) = decide(parse_policy("groups: {vision: {gpus: 8}}"), [queued], [], T0)
    assert decision.verdict is Verdict.OVER_QUOTA and decision.verdict.terminal
    assert "needs 1000 GPUs" in decision.message

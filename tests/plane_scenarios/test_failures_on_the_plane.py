"""Jobs that can never start fail fast, and their task says why in the words of whoever refused: the
image registry's answer ("not found", "authorization failed") from the kubelet's ``Failed`` events, and
the API server's refusal of a pod its Job controller tried to create (a ``FailedCreate`` event on the
Job: a PriorityClass that does not exist). On the plane the pods play the scenario annotation through
kwok and the player posts the kubelet's events; on the simulator its kubelet does.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from airflow.sdk.exceptions import AirflowFailException
from task_doubles import task_context

from airflow_jobs_plugin.airflow.operators import JobOperator

from .plane import defer, ensure_namespace, follow, on_cluster, scenario

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(900)]

NAMESPACE = "plane-failures"
RUN_ID = f"manual__{datetime.now(timezone.utc).isoformat()}"


@pytest.fixture(scope="module", autouse=True)
def namespace(cluster):
    on_cluster(cluster.kubeconfig_path, lambda client: ensure_namespace(client, NAMESPACE))


def job(task_id: str, main: dict, **kwargs) -> tuple[JobOperator, dict]:
    op = JobOperator(
        task_id=task_id,
        image=f"registry.example/trainer:{task_id}",
        group="vision",
        user="alice",
        namespace=NAMESPACE,
        job_annotations=scenario(main=main),
        **kwargs,
    )
    return op, task_context("plane_failures", task_id, run_id=RUN_ID)


@pytest.mark.parametrize(
    ("pull_error", "registry_says"),
    [("not-found", ": not found"), ("unauthorized", "pull access denied")],
)
def test_an_image_the_registry_refuses_fails_the_task_with_the_registrys_answer(pull_error, registry_says):
    op, context = job(f"pull-{pull_error}", {"pull": 0.5, "pull_error": pull_error})

    event = follow(defer(op, context))

    assert event["status"] == "failed" and event["reason"] == "ImagePull", event
    with pytest.raises(AirflowFailException) as failed:
        op.execute_complete(context, event)
    assert registry_says in str(failed.value), str(failed.value)


def test_a_mistyped_priority_class_fails_the_task_fast_with_the_api_servers_refusal():
    op, context = job("typo-priority", {"run": 5}, priority_class_name="hihg-priority")

    event = follow(defer(op, context))

    assert event["status"] == "failed" and event["reason"] == "PodRefused", event
    with pytest.raises(AirflowFailException) as failed:
        op.execute_complete(context, event)
    # kubernetes v1.36 plugin/pkg/admission/priority/admission.go, admitPod; the Job controller's
    # FailedCreate event carries it (pkg/controller/controller_utils.go, createPods).
    assert "is forbidden: no PriorityClass with name hihg-priority was found" in str(failed.value), str(
        failed.value
    )

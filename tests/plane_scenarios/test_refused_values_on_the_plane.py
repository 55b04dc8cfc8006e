"""Values the API server refuses: a 422 on create fails the task at once, naming the field path the
API server named (kubernetes v1.36 pkg/apis/core/validation/validation.go, the ``details.causes`` of the
Status), and nothing is created; names that would change a request's path never reach the API server.

The parse-time checks (spec.py) catch these values first; here they are put into a validated spec
behind the checks' back, as a value the checks do not know would reach the cluster.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid

import pytest

from airflow_jobs_plugin.cluster.kube import JOBS, KubeClient
from airflow_jobs_plugin.jobs.spec import TaskIdentity, freeze, validate
from airflow_jobs_plugin.queueing.quota_source import QuotaSource
from airflow_jobs_plugin.usecases.submission import SubmissionRefused, submit

from .plane import ensure_namespace, on_cluster

pytestmark = [pytest.mark.real_cluster, pytest.mark.timeout(300)]

NAMESPACE = "plane-refused"
WEIGHT_ZERO = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 0,
                "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            }
        ]
    }
}


class _Store(dict):
    def set(self, key, value):  # the task_state_store's writer
        self[key] = value


def _submit(cluster, **unchecked) -> str:
    spec = validate(
        image="registry.example/trainer:1", group="refused", user="ann", gpus=1, namespace=NAMESPACE
    )
    spec = dataclasses.replace(spec, **{k: freeze(v) for k, v in unchecked.items()})
    identity = TaskIdentity("refused", "train", f"run-{uuid.uuid4().hex[:8]}", -1, 1)

    async def go(client: KubeClient) -> str:
        await ensure_namespace(client, NAMESPACE)
        with pytest.raises(SubmissionRefused) as refused:
            await submit(
                spec,
                identity,
                _Store(),
                delivered=None,
                conn_id="kubernetes_default",
                pool=QuotaSource(None, None),
                log=logging.getLogger("refused"),
            )
        # Nothing was created, and no retry will create it.
        assert await client.get_or_none(JOBS, NAMESPACE, identity.job_name(1)) is None
        return str(refused.value)

    return on_cluster(cluster.kubeconfig_path, go)


def test_a_422_on_create_fails_the_task_at_once_naming_the_field_and_the_argument(cluster):
    message = _submit(cluster, affinity=WEIGHT_ZERO)

    assert (
        "refused Job plane-refused/" in message and "as invalid (422), which no retry can change" in message
    )
    assert (
        "spec.template.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight"
        in message
    )
    assert "must be in the range 1-100" in message
    assert message.endswith("fix affinity in the task's arguments (or pod_template, where it sets them)")


def test_a_bogus_dns_policy_is_refused_naming_the_field_and_pod_template(cluster):
    message = _submit(cluster, pod_template={"spec": {"dnsPolicy": "Bogus"}})

    assert "spec.template.spec.dnsPolicy" in message and "Bogus" in message
    assert message.endswith("fix pod_template in the task's arguments")


def test_a_volume_with_two_sources_is_refused_naming_the_volume(cluster):
    # volumes[0] is the product's own /dev/shm. One with no source is not refused: the API server defaults it to an emptyDir (SetDefaults_Volume).
    message = _submit(
        cluster,
        pod_template={"spec": {"volumes": [{"name": "scratch", "emptyDir": {}, "hostPath": {"path": "/x"}}]}},
    )

    assert (
        "spec.template.spec.volumes[1].hostPath" in message
        and "may not specify more than 1 volume type" in message
    )
    assert "fix volumes in the task's arguments (or pod_template, where it sets them)" in message

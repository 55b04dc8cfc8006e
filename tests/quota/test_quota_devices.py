"""Quotas per GPU device: a group's quota of whole GPUs (``gpus``) and of every other device by its
resource name (``devices``: MIG profiles, AMD GPUs); a job is charged against the device it asks for."""

from __future__ import annotations

from datetime import timedelta

import pytest
from test_quota_admission import NOW, T0, held, job, outcome

from airflow_jobs_plugin.queueing.quota.ledger_model import (
    Ledger,
    decode,
    encode,
    queued_job_from_metadata,
)
from airflow_jobs_plugin.queueing.quota.parse import PolicyError, parse_policy
from airflow_jobs_plugin.queueing.quota.policy import decide, usage

MIG = "nvidia.com/mig-1g.10gb"
POLICY = parse_policy(f"groups: {{vision: {{gpus: 4, user_gpus: 4, devices: {{{MIG}: 7, amd.com/gpu: 2}}}}}}")


def test_a_group_has_a_quota_of_each_device_it_names_and_none_of_others():
    vision = POLICY.groups["vision"]
    assert vision.quota_of() == 4 and vision.quota_of(MIG) == 7 and vision.quota_of("amd.com/gpu") == 2
    assert vision.quota_of("nvidia.com/mig-3g.40gb") == 0
    # The per-user limit applies to each device, within the group's quota of it.
    assert vision.user_limit("alice", MIG) == 4 and vision.user_limit("alice", "amd.com/gpu") == 2


def test_a_job_is_charged_against_the_device_it_asks_for():
    queue = [
        job("whole", 4, "alice", group="vision"),
        job("slices", 4, "bob", group="vision", minute=1, resource=MIG),
    ]
    assert outcome(decide(POLICY, queue, [], NOW)) == {
        "whole": ("Admitted", None),
        "slices": ("Admitted", None),
    }


def test_a_job_waiting_for_one_devices_quota_does_not_hold_back_another_devices_jobs():
    # MIG slices are all taken; the next MIG job waits for them, the whole-GPU job behind it does not.
    reservations = [held("mig-running", 4, "carol", group="vision", resource=MIG)]
    reservations.append(held("mig-running-2", 3, "dave", group="vision", resource=MIG))
    queue = [
        job("mig-next", 2, "alice", group="vision", resource=MIG),
        job("whole", 2, "bob", group="vision", minute=1),
        job("mig-after", 1, "erin", group="vision", minute=2, resource=MIG),
    ]
    assert outcome(decide(POLICY, queue, reservations, NOW)) == {
        "mig-next": ("GroupQuota", 1),
        "whole": ("Admitted", None),
        "mig-after": ("BehindHead", 2),  # FIFO still holds among the jobs of one device
    }


def test_a_device_the_group_has_no_quota_of_can_never_be_admitted_and_says_what_to_ask_for():
    (decision,) = decide(
        POLICY, [job("big-slice", 1, "alice", group="vision", resource="nvidia.com/mig-3g.40gb")], [], NOW
    )
    assert decision.verdict.reason == "OverQuota"
    assert "group vision's whole quota is 0 nvidia.com/mig-3g.40gb" in decision.message
    assert "groups.vision.devices.nvidia.com/mig-3g.40gb" in decision.message


def test_usage_shows_each_device_beside_the_whole_gpus():
    (vision,) = usage(
        POLICY, [held("a", 2, "alice", group="vision"), held("b", 3, "bob", group="vision", resource=MIG)]
    )
    assert (vision.quota, vision.used) == (4, 2)
    assert [(d.resource, d.quota, d.used) for d in vision.devices] == [("amd.com/gpu", 2, 0), (MIG, 7, 3)]


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ("{nvidia.com/gpu: 4}", "nvidia.com/gpu is the group's gpus: set gpus instead"),
        ("{cpu: 4}", "'cpu' is not a GPU resource name"),
        (f"{{{MIG}: -1}}", "must be a non-negative integer"),
    ],
)
def test_a_wrong_device_quota_is_named_in_the_policy_error(devices, message):
    with pytest.raises(PolicyError, match="groups.vision.devices") as info:
        parse_policy(f"groups: {{vision: {{gpus: 4, devices: {devices}}}}}")
    assert message in str(info.value)


def test_the_ledger_keeps_a_reservations_device_and_reads_old_entries_as_whole_gpus():
    reservation = held("b", 3, "bob", group="vision", resource=MIG)
    data = encode(Ledger(group="vision", reservations=(reservation, held("a", 1, "alice", group="vision"))))
    decoded = decode("vision", data)
    assert {r.job: r.resource for r in decoded.reservations} == {"b": MIG, "a": "nvidia.com/gpu"}
    assert all('"resource"' not in v for k, v in data.items() if "alice" in v)


def test_a_queued_job_reads_its_device_from_its_annotation():
    metadata = {
        "name": "j",
        "uid": "u",
        "annotations": {
            "airflow-jobs.io/group-name": "vision",
            "airflow-jobs.io/user-name": "alice",
            "airflow-jobs.io/gpus": "2",
            "airflow-jobs.io/gpu-resource": MIG,
            "airflow-jobs.io/queued-at": (T0 + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }
    assert queued_job_from_metadata(metadata).resource == MIG
    del metadata["annotations"]["airflow-jobs.io/gpu-resource"]
    assert queued_job_from_metadata(metadata).resource == "nvidia.com/gpu"

"""A pod whose containers cannot be created (CreateContainerConfigError / CreateContainerError) is
retried by the kubelet forever: after a short grace the product rules the start impossible, naming the
missing Secret or ConfigMap; the runtime's own transient refusals are waited out."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_jobs_plugin.lifecycle import (
    START_GRACE,
    missing_object,
    snapshot,
    start_cannot_succeed,
)

from .factories import at, batch_job, job_pod, waiting

MISSING_KEY = "couldn't find key password in Secret ml-team/db-creds"
MISSING_CONFIGMAP = 'configmap "train-config" not found'
NAME_RESERVED = (
    'failed to reserve container name "main_train-x7k2p_ml-team_0": name "main_train-x7k2p_ml-team_0" '
    'is reserved for "4f1c"'
)


def stuck(reason: str, message: str, *, seconds_after_ready: float):
    # The pod became ready to start its containers at +5 s (the factories' condition time).
    job = batch_job(active=1)
    pod = job_pod(statuses=[waiting("main", reason, message)])
    return snapshot(job, [pod], now=at(5 + seconds_after_ready))


def test_a_missing_secret_key_is_tolerated_for_the_grace_then_ruled_naming_the_secret():
    assert (
        start_cannot_succeed(stuck("CreateContainerConfigError", MISSING_KEY, seconds_after_ready=30)) is None
    )
    why = start_cannot_succeed(
        stuck("CreateContainerConfigError", MISSING_KEY, seconds_after_ready=START_GRACE.total_seconds() + 1)
    )
    assert why is not None
    assert "missing key password of Secret ml-team/db-creds" in why and "CreateContainerConfigError" in why


def test_a_missing_configmap_is_named():
    why = start_cannot_succeed(
        stuck("CreateContainerConfigError", MISSING_CONFIGMAP, seconds_after_ready=120)
    )
    assert why is not None and "missing ConfigMap train-config" in why


def test_a_container_the_runtime_cannot_create_is_ruled_after_the_grace():
    message = (
        'Error: failed to create containerd container: error mounting "/data" to rootfs: not a directory'
    )
    assert start_cannot_succeed(stuck("CreateContainerError", message, seconds_after_ready=10)) is None
    why = start_cannot_succeed(stuck("CreateContainerError", message, seconds_after_ready=120))
    assert why is not None and "not a directory" in why


@pytest.mark.parametrize(
    "message", [NAME_RESERVED, "context deadline exceeded"], ids=["name-reserved", "runtime-deadline"]
)
def test_a_runtime_refusal_the_kubelets_next_sync_cures_is_never_ruled(message):
    assert start_cannot_succeed(stuck("CreateContainerError", message, seconds_after_ready=3600)) is None


def test_a_pod_still_creating_its_containers_is_not_stuck():
    assert start_cannot_succeed(stuck("ContainerCreating", "", seconds_after_ready=3600)) is None


@pytest.mark.parametrize(
    ("message", "named"),
    [
        (MISSING_KEY, "key password of Secret ml-team/db-creds"),
        ("couldn't find key url in ConfigMap ml-team/settings", "key url of ConfigMap ml-team/settings"),
        ('secret "db-creds" not found', "Secret db-creds"),
        ('Error: configmap "train-config" not found', "ConfigMap train-config"),
        ("no command specified", None),
    ],
)
def test_the_missing_object_is_read_from_the_kubelets_words(message, named):
    assert missing_object(message) == named


def test_the_grace_is_short():
    assert START_GRACE <= timedelta(minutes=2)

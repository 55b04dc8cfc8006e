"""A leader cut off from the API server stops leading before its Lease expires for anyone else, and the
standby, still able to reach it, takes over only after that (the simulator fails the leader's own
requests: an error rule with its ``user``, ``sim/faults.py``)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from airflow_jobs_sim import ClusterConfig, SimCluster
from airflow_jobs_sim.config import Identity
from airflow_jobs_sim.kubeconfig import write_kubeconfig

from airflow_jobs_plugin.cluster.resources import LEASES
from airflow_jobs_plugin.controller.lease import JITTER_FACTOR

from .candidates import LATENCY, TIMINGS, election, overlapping, until

D, RD, R = TIMINGS["lease_duration"], TIMINGS["renew_deadline"], TIMINGS["retry_period"]
CUT_OFF = "system:serviceaccount:airflow-jobs-system:controller-a"

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.fault_injection("fails one caller's requests with the simulator's fault injection"),
]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    config = ClusterConfig(
        nodes=1,
        token="admin-token",
        identities=(
            Identity.service_account("airflow-jobs-system", "controller-a", "a-token"),
            Identity.service_account("airflow-jobs-system", "controller-b", "b-token"),
        ),
    )
    with SimCluster(config, controllers=False) as cluster:
        folder = tmp_path_factory.mktemp("kubeconfigs")
        cluster.kubeconfigs = {  # type: ignore[attr-defined]
            who: write_kubeconfig(str(folder / f"{who}.yaml"), cluster.url, f"{who}-token")
            for who in ("a", "b")
        }
        yield cluster


@pytest.fixture(autouse=True)
def no_faults_left(sim):
    yield
    sim.faults.clear()


async def test_a_leader_that_cannot_renew_stops_before_its_lease_expires_for_others(sim):
    async with election(sim.kubeconfig_path) as vote:
        a = (await vote.candidate("controller-a", sim.kubeconfigs["a"])).start()
        await until(lambda: a.leading, 10 * D, "a leads")
        b = (await vote.candidate("controller-b", sim.kubeconfigs["b"])).start()
        await until(lambda: b.elector.holder == "controller-a", 10 * D, "b sees a lead")

        sim.faults.add_error(rate=1.0, code=500, resource="leases", user=CUT_OFF)
        cut = time.monotonic()
        await until(lambda: not a.elector.is_leader, RD + 2 * R + LATENCY, "a gives up")
        await until(lambda: a.terms[0].stopped is not None, LATENCY, "a's lead stops")
        last_renewal = a.elector.renewed_at
        a_stopped = a.terms[0].stopped
        await until(lambda: b.leading, D + R * (1 + JITTER_FACTOR) + 2 * LATENCY, "b takes over")

        # a stopped within a retry period and the renew deadline of being cut off; b started a term
        # after a's last renewal, on the same clock; their terms never overlapped.
        assert a_stopped - cut <= R + RD + LATENCY
        b_term = b.terms[0]
        assert b_term.started_wall >= last_renewal + timedelta(seconds=D)
        assert b_term.started > a_stopped
        assert overlapping(a, b) == []
        assert (await vote.lease())["spec"]["holderIdentity"] == "controller-b"

        # Reachable again, a campaigns and waits: b holds the Lease.
        sim.faults.clear()
        await until(lambda: a.elector.holder == "controller-b", 10 * D, "a sees b lead")
        await asyncio.sleep(D)
        assert len(a.terms) == 1 and not a.elector.is_leader and b.elector.is_leader
        assert overlapping(a, b) == []


async def test_a_leader_that_reads_another_holder_stops_at_once(sim):
    """Someone else's write on the Lease (here an administrator's) ends the term at the next renewal,
    not at the renew deadline: another candidate may be leading already."""
    async with election(sim.kubeconfig_path) as vote:
        a = (await vote.candidate("controller-a", sim.kubeconfigs["a"])).start()
        await until(lambda: a.leading, 10 * D, "a leads")
        taken = await vote.lease()
        taken["spec"]["holderIdentity"] = "someone-else"
        await vote.admin.replace(LEASES, vote.namespace, taken)
        written = time.monotonic()
        await until(lambda: a.terms[0].stopped is not None, RD + 2 * R + LATENCY, "a stops")
        # At its next renewal (a retry period away), not at the renew deadline.
        assert a.terms[0].stopped - written < R + LATENCY < RD
        assert a.elector.holder == "someone-else"

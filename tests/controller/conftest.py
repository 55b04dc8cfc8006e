"""The cluster of the leader election's tests: the real control plane when AIRFLOW_JOBS_TEST_KUBECONFIG
names it, else a simulated one (the elector needs only the API server)."""

from __future__ import annotations

from sim_fixtures import cluster_fixture

cluster = cluster_fixture(nodes=1, time_scale=0.05)

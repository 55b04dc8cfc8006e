"""The cluster of the scenario tests: the real control plane when AIRFLOW_JOBS_TEST_KUBECONFIG names
it (``scripts/cluster up --with mpi-operator,kueue``: 3 kwok nodes of 8 GPUs), else a simulated cluster
of the same shape."""

from __future__ import annotations

from sim_fixtures import cluster_fixture, connection_fixture

cluster = cluster_fixture(nodes=3, time_scale=0.05)
connection = connection_fixture()

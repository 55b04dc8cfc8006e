"""The cluster of the scenario tests: the real control plane when AIRFLOW_JOBS_TEST_KUBECONFIG names
it (``scripts/cluster up --with mpi-operator,kueue``: 3 kwok nodes of 8 GPUs), else a simulated cluster
of the same shape."""

from __future__ import annotations

from sim_fixtures import cluster_fixture, connection_fixture

from tests.patience import stretch

# The simulated clock slows as the machine is loaded: the states these scenarios must see (an MPIJob's
# init phases last a simulated second or two) then last long enough for a trigger's look on a busy
# machine. The real plane keeps its own time.
cluster = cluster_fixture(nodes=3, time_scale=0.05 * stretch())
connection = connection_fixture()

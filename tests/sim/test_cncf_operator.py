"""The cncf provider's own ``KubernetesJobOperator``, unmodified, runs its Jobs on the simulated cluster.

The operator gets nothing but an Airflow connection: ``kubernetes_default`` with the cluster's
kubeconfig, as a DAG author would configure it for a real cluster. Each DAG is a real DAG file in the
DAGs folder, run by ``DAG.test()``: the task runner executes the tasks in-process, and a deferred task
is resumed by ``DAG.test()``'s in-process triggerer. A container that exits 0 must end its task in
success, one that exits 1 (the ``:exit-1`` image shorthand) must fail it.
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

DAG_FILE = """
import pendulum

from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator
from airflow.sdk import DAG

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    for task_id, image in (("exits-0", "busybox:1.36"), ("exits-1", "busybox:exit-1")):
        KubernetesJobOperator(
            task_id=task_id,
            namespace={namespace!r},
            image=image,
            cmds=["sh", "-c", "echo training"],
            backoff_limit=0,
            wait_until_job_complete=True,
            job_poll_interval=0.2,
            deferrable={deferrable!r},
        )
"""


@pytest.fixture(scope="module")
def airflow_db():
    """The metadata database of the suite's throw-away AIRFLOW_HOME, created once (it may exist)."""
    from airflow.utils.db import initdb

    initdb()


@pytest.fixture
def connected(live_sim, airflow_db, monkeypatch):
    """``kubernetes_default`` pointing at the simulated cluster, through the environment only."""
    extra = {"kube_config_path": live_sim.kubeconfig_path}
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes", "extra": extra})
    )
    namespace = f"cncf-{uuid.uuid4().hex[:8]}"
    live_sim.store.create("namespaces", {"metadata": {"name": namespace}})
    return live_sim, namespace


def dag_in_dags_folder(dag_id: str, namespace: str, deferrable: bool):
    """Write the DAG file where ``DAG.test()`` syncs DAGs from, and load its DAG."""
    from airflow.configuration import conf

    folder = Path(conf.get("core", "dags_folder"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dag_id}.py"
    path.write_text(
        textwrap.dedent(DAG_FILE.format(dag_id=dag_id, namespace=namespace, deferrable=deferrable))
    )
    spec = importlib.util.spec_from_file_location(dag_id, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def job_outcomes(cluster, namespace: str) -> dict[str, tuple[str, ...]]:
    """Each Job's task (the operator labels its pod template) and its terminal conditions."""
    outcomes = {}
    for job in cluster.store.list("jobs", namespace=namespace):
        task = job["spec"]["template"]["metadata"]["labels"]["task_id"]
        conditions = job.get("status", {}).get("conditions") or []
        outcomes[task] = tuple(
            f"{c['type']}:{c.get('reason')}"
            for c in conditions
            if c["status"] == "True" and c["type"] in ("Complete", "Failed")
        )
    return outcomes


@pytest.mark.parametrize("deferrable", [False, True], ids=["polling", "deferred"])
def test_a_job_whose_pod_exits_0_succeeds_and_one_whose_pod_exits_1_fails(connected, deferrable):
    cluster, namespace = connected
    dag = dag_in_dags_folder(f"cncf_job_{namespace.replace('-', '_')}", namespace, deferrable)

    run = dag.test()

    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states == {"exits-0": "success", "exits-1": "failed"}
    assert str(run.state) == "failed"
    assert job_outcomes(cluster, namespace) == {
        "exits-0": ("Complete:CompletionsReached",),
        "exits-1": ("Failed:BackoffLimitExceeded",),
    }


POD_DAG_FILE = """
import pendulum

from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.sdk import DAG

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    KubernetesPodOperator(
        task_id="answer",
        namespace={namespace!r},
        image="busybox:1.36",
        cmds=["sh", "-c", "echo computing; mkdir -p /airflow/xcom; echo '{{\\"answer\\": 42}}' > /airflow/xcom/return.json"],
        do_xcom_push=True,
        get_logs=True,
        deferrable=True,
        poll_interval=0.5,
    )
"""


@pytest.fixture(scope="module")
def exec_sim():
    """A cluster in exec mode: the pod's containers, the XCom sidecar included, are local processes."""
    from airflow_jobs_sim.cluster import SimCluster
    from airflow_jobs_sim.config import ClusterConfig

    with SimCluster(ClusterConfig(nodes=1, time_scale=0.01, exec_commands=True)) as cluster:
        yield cluster


def test_a_deferrable_pod_operator_pushes_its_xcom_through_the_sidecar_and_succeeds(
    exec_sim, airflow_db, monkeypatch
):
    extra = {"kube_config_path": exec_sim.kubeconfig_path}
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps({"conn_type": "kubernetes", "extra": extra})
    )
    namespace = f"kpo-{uuid.uuid4().hex[:8]}"
    exec_sim.store.create("namespaces", {"metadata": {"name": namespace}})
    from airflow.configuration import conf

    dag_id = f"cncf_pod_{namespace.replace('-', '_')}"
    folder = Path(conf.get("core", "dags_folder"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dag_id}.py"
    path.write_text(textwrap.dedent(POD_DAG_FILE.format(dag_id=dag_id, namespace=namespace)))
    spec = importlib.util.spec_from_file_location(dag_id, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    run = module.dag.test()

    (ti,) = run.get_task_instances()
    assert str(ti.state) == "success"
    assert ti.xcom_pull(task_ids="answer") == {"answer": 42}

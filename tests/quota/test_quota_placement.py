"""A pod larger than any node it may run on can never be scheduled: the job fails before it queues."""

from __future__ import annotations

from airflow_jobs_plugin.queueing.quota.placement import NodeCapacity, never_fits, pod_shapes


def node(name: str, gpus: int, **node_labels: str) -> NodeCapacity:
    return NodeCapacity(name=name, gpus=gpus, node_labels=node_labels)


def job(gpus: int, *, node_selector: dict | None = None, init_gpus: int = 0) -> dict:
    spec: dict = {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if init_gpus:
        spec["initContainers"] = [{"name": "prep", "resources": {"limits": {"nvidia.com/gpu": init_gpus}}}]
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"kind": "Job", "spec": {"template": {"spec": spec}}}


def mpi_job(worker_gpus: int, launcher_gpus: int = 0) -> dict:
    def template(gpus: int) -> dict:
        limits = {"nvidia.com/gpu": gpus} if gpus else {}
        return {"spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}

    return {
        "kind": "MPIJob",
        "spec": {
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template(launcher_gpus)},
                "Worker": {"replicas": 4, "template": template(worker_gpus)},
            }
        },
    }


EIGHT_GPU_NODES = [node("gpu-1", 8), node("gpu-2", 8), node("cpu-1", 0)]


def test_sixteen_gpus_on_eight_gpu_nodes_never_fits_and_says_why():
    why = never_fits(job(16), EIGHT_GPU_NODES)
    assert why is not None
    assert "asks for 16 GPUs but any node offers at most 8 (largest node: gpu-1)" in why
    assert "more workers with fewer GPUs each" in why


def test_a_pod_as_large_as_the_largest_node_fits():
    assert never_fits(job(8), EIGHT_GPU_NODES) is None


def test_only_the_nodes_its_selector_allows_count():
    nodes = [node("a100", 8, pool="a100"), node("t4", 4, pool="t4")]
    assert never_fits(job(8, node_selector={"pool": "a100"}), nodes) is None
    why = never_fits(job(8, node_selector={"pool": "t4"}), nodes)
    assert why is not None and "matching its nodeSelector {'pool': 't4'} offers at most 4" in why


def test_a_selector_no_node_matches_yet_is_not_ruled_on():
    # Nodes with those labels may still join (an autoscaled pool): nothing is known.
    assert never_fits(job(8, node_selector={"pool": "h100"}), EIGHT_GPU_NODES) is None


def test_every_mpi_pod_is_judged_on_its_own_not_the_job_total():
    assert never_fits(mpi_job(8), EIGHT_GPU_NODES) is None  # 32 GPUs in all, 8 per pod
    why = never_fits(mpi_job(2, launcher_gpus=9), EIGHT_GPU_NODES)
    assert why is not None and "its launcher pod asks for 9 GPUs" in why


def test_an_init_container_larger_than_the_main_ones_sets_the_pods_request():
    assert [s.gpus for s in pod_shapes(job(2, init_gpus=12))] == [12]
    assert never_fits(job(2, init_gpus=12), EIGHT_GPU_NODES) is not None


def test_without_known_nodes_nothing_is_ruled():
    assert never_fits(job(1000), []) is None


def test_a_node_offers_what_is_allocatable():
    read = NodeCapacity.of(
        {
            "metadata": {"name": "gpu-1", "labels": {"pool": "a100"}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"}},
        }
    )
    assert (read.name, read.gpus, dict(read.node_labels)) == ("gpu-1", 7, {"pool": "a100"})


def mig_job(slices: int) -> dict:
    limits = {"nvidia.com/mig-1g.10gb": str(slices)}
    return {
        "kind": "Job",
        "spec": {"template": {"spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}},
    }


def test_a_pod_is_placed_by_the_count_of_the_gpu_resource_it_asks_for():
    # A node with 8 whole GPUs cut into 7 MIG slices of one profile: 7 slices fit, 8 never do, whatever
    # its nvidia.com/gpu count says.
    mig_node = NodeCapacity.of(
        {
            "metadata": {"name": "a100-mig"},
            "status": {"allocatable": {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"}},
        }
    )
    assert mig_node.offers("nvidia.com/mig-1g.10gb") == 7
    assert pod_shapes(mig_job(2))[0].resource == "nvidia.com/mig-1g.10gb"
    assert never_fits(mig_job(7), [mig_node]) is None
    why = never_fits(mig_job(8), [mig_node])
    assert why is not None and "asks for 8 nvidia.com/mig-1g.10gb" in why and "at most 7" in why
    assert never_fits(mig_job(1), [node("gpu-1", 8)]) is not None  # whole GPUs are not MIG slices

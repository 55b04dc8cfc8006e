"""The fake GPU nodes kwok plays: N nodes of whole GPUs and one node of MIG slices."""

from __future__ import annotations

# kwok manages only the nodes that carry this annotation (--manage-nodes-with-annotation-selector).
MANAGED_ANNOTATION = "kwok.x-k8s.io/node"
GPU = "nvidia.com/gpu"
MIG_PROFILE = "nvidia.com/mig-1g.10gb"
MIG_SLICES = 7  # an A100 80GB in MIG mode "all-1g.10gb" (NVIDIA's MIG user guide, profile table)


def _node(name: str, resources: dict[str, str], labels: dict[str, str]) -> dict:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti", **resources}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {MANAGED_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **labels,
            },
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def gpu_nodes(count: int, gpus_per_node: int) -> list[dict]:
    """``count`` nodes of ``gpus_per_node`` whole GPUs, then one MIG node (no whole GPU, 7 slices)."""
    labels = {  # as NVIDIA's GPU Feature Discovery labels a GPU node
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": str(gpus_per_node),
    }
    out = [_node(f"gpu-node-{i}", {GPU: str(gpus_per_node)}, labels) for i in range(count)]
    mig_labels = {**labels, "nvidia.com/gpu.count": "1", "nvidia.com/mig.strategy": "mixed"}
    out.append(_node("mig-node-0", {MIG_PROFILE: str(MIG_SLICES)}, mig_labels))
    return out

"""kwok's configuration: the node stages kwok ships and the pod stages that play a pod's scenario."""

from __future__ import annotations

from pathlib import Path

import yaml

# Node stages as kwok ships them (kustomize/stage/node/...): nodes become Ready and keep their
# capacity, then renew their lease every 40 s (heartbeats through leases, as kubelet does).
# Volumes as kwok ships them (kustomize/stage/volume/fast): a claim of the default StorageClass
# `kwok-volume` gets a PersistentVolume and is Bound, so pods that mount a claim are scheduled.
VOLUME_STAGES = ("pvc-provision.yaml", "pv-bind.yaml", "pvc-delete.yaml", "pv-delete.yaml")
STORAGE_CLASS = "storage-class.yaml"
NODE_STAGES = ("fast/node-initialize.yaml", "heartbeat-with-lease/node-heartbeat-with-lease.yaml")
# The pods' own lifecycle is the plane's (stages/scenario.yaml): kwok's general pod stages run every init
# container at once and complete only pods owned by a Job (kustomize/stage/pod/general, "WIP").
SCENARIO_STAGES = Path(__file__).with_name("stages") / "scenario.yaml"


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kwok_configuration(kwok_module: Path) -> str:
    docs: list[dict] = [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            # kwok's own defaults (pkg/apis/config/v1alpha1/zz_generated.defaults.go), spelled out: a
            # configuration file read by the bare binary is not defaulted, and a zero parallelism refuses
            # to start ("node leases parallelism must be greater than 0").
            "options": {
                "nodeLeaseDurationSeconds": 40,
                "nodeLeaseParallelism": 4,
                "podPlayStageParallelism": 4,
                "nodePlayStageParallelism": 4,
                "podsOnNodeSyncParallelism": 1,
                # Serves containerLogs through the API server (kubectl logs, the product's log streams).
                "enableDebuggingHandlers": True,
                "enablePodsOnNodeSyncListPager": True,
                "enablePodsOnNodeSyncStreamWatch": True,
            },
        }
    ]
    stage_dir = kwok_module / "kustomize" / "stage"
    for rel in NODE_STAGES:
        docs += _documents(stage_dir / "node" / rel)
    for rel in VOLUME_STAGES:
        docs += _documents(stage_dir / "volume" / "fast" / rel)
    docs += _documents(SCENARIO_STAGES)
    return yaml.safe_dump_all(docs, sort_keys=False)


def storage_class(kwok_module: Path) -> list[dict]:
    return _documents(kwok_module / "kustomize" / "stage" / "volume" / "fast" / STORAGE_CLASS)

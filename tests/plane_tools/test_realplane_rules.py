"""The pure parts of scripts/cluster: the pins, a pod's timeline and the patches the Stages write."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from realplane import timeline  # noqa: E402
from realplane.pins import Pins  # noqa: E402

START = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)


def pod(scenario: dict, *, init: tuple[str, ...] = (), restart: str = "Never") -> dict:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "uid": "u1",
            "annotations": {timeline_annotation(): json.dumps(scenario)},
        },
        "spec": {
            "nodeName": "gpu-node-0",
            "restartPolicy": restart,
            "initContainers": [{"name": n, "image": "busybox:1.36"} for n in init],
            "containers": [{"name": "main", "image": "ghcr.io/acme/trainer:1"}],
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
    }


def timeline_annotation() -> str:
    from airflow_jobs_sim.scenarios import ANNOTATION

    return ANNOTATION


def kubectl_status(status: dict) -> str:
    """The STATUS column kubectl prints for a pod status (the cases these scenarios reach)."""
    inits = status.get("initContainerStatuses") or []
    done = sum(1 for s in inits if (s["state"].get("terminated") or {}).get("exitCode") == 0)
    if inits and done < len(inits):
        return f"Init:{done}/{len(inits)}"
    main = status["containerStatuses"][0]["state"]
    if "waiting" in main:
        return main["waiting"]["reason"]
    if "terminated" in main:
        return main["terminated"]["reason"]
    return "Running"


def test_every_component_is_pinned_to_one_exact_release():
    pins = Pins.load()
    assert set(pins) == {"kubernetes", "etcd", "kwok", "mpi-operator", "kueue"}
    assert all(p.version.count(".") == 2 and p.version.startswith("v") for p in pins.values())


def test_init_containers_run_one_at_a_time_as_kubelet_runs_them():
    plan = timeline.compute(
        pod({"fetch": {"run": 2}, "fetch2": {"run": 2}, "main": {"run": 3}}, init=("fetch", "fetch2")),
        START,
        host_ip="127.0.0.1",
        pod_ip="10.244.0.2",
    )
    seen = []
    for frame in plan.frames:
        status = kubectl_status(frame.status)
        if not seen or seen[-1] != status:
            seen.append(status)
    assert seen == ["Init:0/2", "Init:1/2", "PodInitializing", "Running", "Completed"]
    assert plan.frames[-1].status["phase"] == "Succeeded"


def test_a_crash_loop_restarts_in_place_with_a_growing_restart_count():
    plan = timeline.compute(
        pod({"main": {"run": 1, "exit": [1, 1, 0]}}, restart="OnFailure"),
        START,
        host_ip="127.0.0.1",
        pod_ip="10.244.0.2",
    )
    counts = [f.status["containerStatuses"][0]["restartCount"] for f in plan.frames]
    assert max(counts) == 2
    assert any(kubectl_status(f.status) == "CrashLoopBackOff" for f in plan.frames)
    assert plan.frames[-1].status["phase"] == "Succeeded"


def test_frames_are_strategic_merge_patches_that_leave_nothing_stale():
    plan = timeline.compute(
        pod({"main": {"pull_error": "not-found"}}), START, host_ip="127.0.0.1", pod_ip="10.244.0.2"
    )
    patches = json.loads(plan.annotation())["f"]
    states = [p["s"]["containerStatuses"][0]["state"] for p in patches]
    # The first frame adds the container whole; each later state names every state and field it lacks
    # as null, so ErrImagePull's message never lingers under another reason.
    assert "$patch" not in json.dumps(patches)
    for state in states[1:]:
        assert set(state) == {"waiting", "running", "terminated"}
        waiting = state["waiting"]
        assert waiting is None or set(waiting) == {"reason", "message"}
    reasons = [s["waiting"]["reason"] for s in states if s.get("waiting")]
    assert "ErrImagePull" in reasons and "ImagePullBackOff" in reasons


def test_a_frame_applied_to_a_pod_that_missed_the_frames_before_it_still_reads_running():
    # kwok writes the latest frame due, so under load a pod goes from no container status straight to
    # its Running frame: the merge adds the container's item whole, where a `$patch: replace` inside it
    # is dropped with its map and the state reads {} (kube-apiserver v1.36.3, measured on the plane).
    # Nulls are dropped when the pod is decoded, and the running state stays.
    creating = {
        "containerStatuses": [{"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    }
    running = {"containerStatuses": [{"name": "main", "state": {"running": {"startedAt": "t"}}}]}
    state = timeline.smp_status(running, creating)["containerStatuses"][0]["state"]
    assert state == {"waiting": None, "running": {"startedAt": "t"}, "terminated": None}


def test_a_dropped_field_is_removed_by_the_next_frame():
    before = {
        "conditions": [
            {"type": "Ready", "status": "False", "message": "containers with unready status: [main]"}
        ]
    }
    after = {"conditions": [{"type": "Ready", "status": "True"}]}
    patch = timeline.smp_status(after, before)
    assert patch["conditions"] == [{"type": "Ready", "status": "True", "message": None}]


@pytest.mark.parametrize("kind", ["init", "main"])
def test_the_timeline_ends_with_the_pods_final_phase(kind):
    scenario = {"main": {"run": 1, "exit": 3}} if kind == "main" else {"fetch": {"run": 1, "exit": 2}}
    init = ("fetch",) if kind == "init" else ()
    plan = timeline.compute(pod(scenario, init=init), START, host_ip="127.0.0.1", pod_ip="10.244.0.2")
    assert plan.frames[-1].status["phase"] == "Failed"


def test_cluster_up_raises_the_inotify_instances_kwok_follows_need(tmp_path):
    from realplane import inotify

    setting = tmp_path / "max_user_instances"
    setting.write_text("128\n")
    outcome = inotify.ensure(setting)
    assert (outcome.before, outcome.after) == (128, inotify.WANTED)
    assert setting.read_text().strip() == str(inotify.WANTED)
    assert "raised from 128 to 1024" in outcome.message


def test_cluster_up_never_lowers_the_inotify_instances(tmp_path):
    from realplane import inotify

    setting = tmp_path / "max_user_instances"
    setting.write_text("8192\n")
    assert inotify.ensure(setting).after == 8192
    assert setting.read_text().strip() == "8192"


def test_cluster_up_starts_anyway_when_the_inotify_instances_cannot_be_raised():
    from realplane import inotify

    class NotRoot:  # what /proc/sys gives a user who may read the setting and not write it
        def read_text(self) -> str:
            return "128\n"

        def write_text(self, text: str) -> None:
            raise PermissionError(13, "Permission denied")

    outcome = inotify.ensure(NotRoot())  # type: ignore[arg-type]
    assert (outcome.before, outcome.after) == (128, 128)
    assert "cannot be raised to 1024 (Permission denied)" in outcome.message
    assert "sysctl -w fs.inotify.max_user_instances=1024" in outcome.message


def test_down_without_a_kubeconfig_stops_only_this_checkouts_planes(tmp_path):
    """The machine's plane registry is shared by every checkout and test run: `scripts/cluster down`
    with no kubeconfig must find this checkout's planes and never another's."""
    from realplane import plane

    reg = plane.registry_dir(tmp_path)
    reg.mkdir(parents=True)
    ours, theirs, unmarked = tmp_path / "ours.plane", tmp_path / "theirs.plane", tmp_path / "old.plane"
    (reg / "a.json").write_text(json.dumps({"state_dir": str(ours), "checkout": str(plane.CHECKOUT)}))
    (reg / "b.json").write_text(json.dumps({"state_dir": str(theirs), "checkout": "/elsewhere/checkout"}))
    (reg / "c.json").write_text(json.dumps({"state_dir": str(unmarked)}))
    assert plane.known_planes(tmp_path, plane.CHECKOUT) == [ours]
    assert sorted(plane.known_planes(tmp_path)) == sorted([ours, theirs, unmarked])


def test_a_supervised_component_that_exits_is_started_again_and_counted(tmp_path):
    """The plane restarts its controllers as a Deployment would: a component that exits after it had
    started comes back after a back-off, and its restarts are recorded for `scripts/cluster status`."""
    import subprocess

    from realplane import plane

    runs = tmp_path / "runs"
    log = tmp_path / "ctl.log"
    # Each run appends a line, and the first two exit 3 after a moment; the third stays up.
    script = (
        f"import pathlib, sys, time; p = pathlib.Path({str(runs)!r}); "
        "n = len(p.read_text().splitlines()) if p.exists() else 0; "
        "p.write_text(p.read_text() + 'run\\n' if p.exists() else 'run\\n'); "
        "time.sleep(0.3) if n < 2 else time.sleep(60); sys.exit(3)"
    )
    record = plane.restarts_record(log)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(plane.SUPERVISOR),
            "--name",
            "ctl",
            "--record",
            str(record),
            "--settle",
            "0.1",
            "--",
            sys.executable,
            "-c",
            script,
        ],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and plane.restarts(str(log))[0] < 2:
            time.sleep(0.1)
        assert plane.restarts(str(log)) == (2, 3)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(runs.read_text().splitlines()) < 3:
            time.sleep(0.1)
        assert len(runs.read_text().splitlines()) == 3
        assert proc.poll() is None  # still supervising the third run
    finally:
        plane.stop_group(proc.pid)
    assert proc.wait(10) is not None


def test_a_component_that_cannot_start_is_not_restarted(tmp_path):
    """A first run that ends at once (a bad flag, a taken port) ends the supervisor with its code, so
    `scripts/cluster up` fails naming the component instead of looping."""
    import subprocess

    from realplane import plane

    done = subprocess.run(
        [
            sys.executable,
            str(plane.SUPERVISOR),
            "--name",
            "bad",
            "--record",
            str(tmp_path / "r.json"),
            "--",
            sys.executable,
            "-c",
            "import sys; sys.exit(2)",
        ],
        timeout=60,
    )
    assert done.returncode == 2
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("current", "ran_for", "expected"), [(1, 5, 2), (16, 5, 30), (30, 5, 30), (30, 61, 1)]
)
def test_the_restart_back_off_doubles_to_its_cap_and_resets_after_a_steady_run(current, ran_for, expected):
    from realplane.supervise import next_backoff

    assert next_backoff(current, ran_for) == expected

"""The simulated kubelet's decisions, driven through simulated time without a store."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from airflow_jobs_sim.controllers.kubelet import node_lost, node_lost_pod_status, node_restored
from airflow_jobs_sim.kubelet_model import (
    LogClose,
    LogLine,
    Step,
    crash_backoff,
    go_duration,
    new_pod_run,
    pull_backoff,
    step_pod,
)
from airflow_jobs_sim.scenarios import ANNOTATION

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def make_pod(
    scenario: dict | str | None = None,
    *,
    init: bool = False,
    sidecar: bool = False,
    restart: str = "Never",
    image: str = "trainer:1.0",
    **container,
) -> dict:
    meta: dict = {"name": "p", "namespace": "default", "uid": "uid-1"}
    if scenario is not None:
        meta["annotations"] = {ANNOTATION: scenario if isinstance(scenario, str) else json.dumps(scenario)}
    spec: dict = {
        "nodeName": "sim-node-0",
        "restartPolicy": restart,
        "containers": [{"name": "main", "image": image, "imagePullPolicy": "IfNotPresent", **container}],
    }
    if init:
        spec["initContainers"] = [
            {"name": "setup", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent"}
        ]
    if sidecar:
        spec.setdefault("initContainers", []).append(
            {
                "name": "proxy",
                "image": "proxy:1.0",
                "imagePullPolicy": "IfNotPresent",
                "restartPolicy": "Always",
            }
        )
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


@dataclass
class Moment:
    at: float  # simulated seconds since start
    step: Step

    @property
    def phase(self) -> str:
        return self.step.status["phase"]

    def state(self, name: str = "main", init: bool = False) -> dict:
        key = "initContainerStatuses" if init else "containerStatuses"
        return next(c for c in self.step.status[key] if c["name"] == name)

    def shown(self, name: str = "main", init: bool = False) -> str:
        """The state as one word: the waiting/terminated reason or "Running"."""
        state = self.state(name, init)["state"]
        if "running" in state:
            return "Running"
        return (state.get("waiting") or state.get("terminated"))["reason"]


def drive(
    pod: dict,
    horizon: float = 600,
    images: frozenset[str] = frozenset(),
    evict_at: float | None = None,
    delete_at: float | None = None,
) -> list[Moment]:
    """Sync the pod at every wake-up the kubelet asks for, until it is done or ``horizon`` passes."""
    run = new_pod_run(pod, "sim-node-0", "10.0.0.2", "10.244.0.2", T0, exec_commands=False)
    now, moments = T0, []
    while now <= T0 + timedelta(seconds=horizon):
        at = (now - T0).total_seconds()
        evict = ("Evicted", "low on memory") if evict_at is not None and at >= evict_at else None
        if delete_at is not None and at >= delete_at:
            pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
        step = step_pod(pod, run, now, 1.0, images=images, evict=evict)
        images = images | frozenset(step.pulled)
        pod["status"], run = step.status, step.run
        moments.append(Moment(at, step))
        if run.done or evict:
            break
        candidates = [t for t in (step.wake_at,) if t is not None]
        if delete_at is not None and at < delete_at:
            candidates.append(T0 + timedelta(seconds=delete_at))
        if evict_at is not None and at < evict_at:
            candidates.append(T0 + timedelta(seconds=evict_at))
        if not candidates:
            break
        now = max(min(candidates), now + timedelta(microseconds=1))
    return moments


def events(moments: list[Moment]) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for m in moments for e in m.step.events]


def distinct(values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        if not out or out[-1] != v:
            out.append(v)
    return out


def test_a_default_container_is_created_then_runs_then_completes():
    moments = drive(make_pod())
    assert distinct([m.shown() for m in moments]) == ["ContainerCreating", "Running", "Completed"]
    assert distinct([m.phase for m in moments]) == ["Pending", "Running", "Succeeded"]
    assert [r for r, _ in events(moments)] == ["Pulling", "Pulled", "Created", "Started"]
    final = moments[-1].state()["state"]["terminated"]
    assert final["exitCode"] == 0 and final["containerID"].startswith("containerd://")
    assert moments[-1].at == pytest.approx(6.0)  # 1 s pull + 5 s run


def test_status_fields_have_the_real_shapes():
    status = drive(make_pod())[1].step.status
    assert status["hostIP"] == "10.0.0.2" and status["podIP"] == "10.244.0.2"
    assert status["startTime"] == "2026-01-01T00:00:00Z"
    main = status["containerStatuses"][0]
    assert set(main) >= {
        "name",
        "state",
        "lastState",
        "ready",
        "restartCount",
        "image",
        "imageID",
        "started",
        "containerID",
    }
    assert main["image"] == "docker.io/library/trainer:1.0"
    assert main["imageID"].startswith("docker.io/library/trainer@sha256:")
    assert [c["type"] for c in status["conditions"]] == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
    ]


def test_log_lines_are_spread_over_the_run_and_the_log_is_closed_at_exit():
    moments = drive(make_pod({"main": {"run": 10, "logs": ["a", "b", "c"]}}))
    lines = [(m.at, e.line) for m in moments for e in m.step.logs if isinstance(e, LogLine)]
    assert [line for _, line in lines] == ["a", "b", "c"]
    assert len({at for at, _ in lines}) == 3
    assert isinstance(moments[-1].step.logs[-1], LogClose)


def test_a_failing_container_reports_its_exit_code_and_the_pod_fails():
    moments = drive(make_pod({"main": {"exit": 3}}))
    term = moments[-1].state()["state"]["terminated"]
    assert (term["exitCode"], term["reason"], moments[-1].phase) == (3, "Error", "Failed")


def test_fallback_to_logs_on_error_puts_the_log_tail_in_the_termination_message():
    pod = make_pod(
        {"main": {"exit": 1, "logs": ["loading", "CUDA error: out of memory"]}},
        terminationMessagePolicy="FallbackToLogsOnError",
    )
    term = drive(pod)[-1].state()["state"]["terminated"]
    assert term["message"] == "loading\nCUDA error: out of memory"


def test_an_oom_killed_container_exits_137_with_reason_oomkilled():
    term = drive(make_pod({"main": {"oom": True}}))[-1].state()["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (137, "OOMKilled")


def test_a_container_that_cannot_run_exits_128_with_reason_containercannotrun():
    moments = drive(make_pod(image="trainer:cannot-run"))
    term = moments[-1].state()["state"]["terminated"]
    assert (term["exitCode"], term["reason"], moments[-1].phase) == (128, "ContainerCannotRun", "Failed")
    assert "executable file not found" in term["message"]


def test_an_unavailable_image_goes_errimagepull_then_imagepullbackoff_with_a_growing_back_off():
    moments = drive(make_pod(image="trainer:not-found"), horizon=100)
    shown = distinct([m.shown() for m in moments])
    assert shown[:4] == ["ContainerCreating", "ErrImagePull", "ImagePullBackOff", "ErrImagePull"]
    assert {m.phase for m in moments} == {"Pending"}
    pulls = [m.at for m in moments for e in m.step.events if e.reason == "Pulling"]
    gaps = [b - a for a, b in zip(pulls, pulls[1:], strict=False)]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0]
    waiting = next(m for m in moments if m.shown() == "ImagePullBackOff").state()["state"]["waiting"]
    assert waiting["message"].startswith(
        'Back-off pulling image "trainer:not-found": ErrImagePull: rpc error: code = NotFound'
    )
    reasons = [r for r, msg in events(moments)]
    assert "BackOff" in reasons and ("Failed", "Error: ImagePullBackOff") in events(moments)
    assert any(
        msg.startswith('Failed to pull image "trainer:not-found": rpc error') for _, msg in events(moments)
    )


def test_a_rate_limited_pull_fails_a_few_times_then_succeeds():
    moments = drive(make_pod({"main": {"pull_error": "rate-limited", "pull_failures": 2}}))
    assert [m.shown() for m in moments].count("ErrImagePull") == 2
    assert moments[-1].phase == "Succeeded"


def test_a_malformed_image_name_is_invalidimagename_and_never_starts():
    moments = drive(make_pod(image="Trainer:Latest!"))
    assert moments[-1].shown() == "InvalidImageName" and moments[-1].phase == "Pending"
    assert ("Failed", "Error: InvalidImageName") in events(moments)


def test_an_image_already_on_the_node_is_not_pulled_again():
    moments = drive(make_pod(), images=frozenset({"trainer:1.0"}))
    assert ("Pulled", 'Container image "trainer:1.0" already present on machine') in events(moments)
    assert "Pulling" not in [r for r, _ in events(moments)]


def test_restart_policy_onfailure_restarts_a_crashing_container_with_crashloopbackoff():
    moments = drive(make_pod({"main": {"run": 1, "exit": 1}}, restart="OnFailure"), horizon=120)
    assert "CrashLoopBackOff" in [m.shown() for m in moments]
    assert {m.phase for m in moments if m.at > 2} == {"Running"}
    backoff = next(m for m in moments if m.shown() == "CrashLoopBackOff").state()
    assert backoff["lastState"] == {} or backoff["lastState"]["terminated"]["exitCode"] == 1
    later = [m.state() for m in moments if m.state()["restartCount"] >= 2]
    assert later and later[0]["lastState"]["terminated"]["exitCode"] == 1
    assert ("BackOff", "Back-off restarting failed container main in pod p_default(uid-1)") in events(moments)
    starts = [m.at for m in moments for e in m.step.events if e.reason == "Started"]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert len(gaps) >= 2 and gaps[1] > gaps[0]


def test_a_crash_looping_container_that_finally_succeeds_completes_the_pod():
    moments = drive(make_pod({"main": {"run": 0, "exit": [1, 0]}}, restart="OnFailure"))
    assert moments[-1].phase == "Succeeded" and moments[-1].state()["restartCount"] == 1


def test_init_containers_run_first_and_the_main_container_waits_in_podinitializing():
    moments = drive(make_pod(init=True))
    before = [m for m in moments if m.state("setup", init=True)["state"].get("terminated") is None]
    assert before and all(m.shown() == "PodInitializing" for m in before)
    assert all(m.step.status["conditions"][1]["status"] == "False" for m in before)
    assert before[0].step.status["conditions"][1]["message"] == "containers with incomplete status: [setup]"
    assert distinct([m.shown() for m in moments])[-2:] == ["Running", "Completed"]
    assert moments[-1].state("setup", init=True)["state"]["terminated"]["reason"] == "Completed"


def test_a_failed_init_container_fails_the_pod_when_it_is_never_restarted():
    moments = drive(make_pod({"setup": {"exit": 2}}, init=True))
    assert moments[-1].phase == "Failed"
    assert moments[-1].shown("setup", init=True) == "Error"
    assert moments[-1].shown() == "PodInitializing"


def test_a_failing_init_container_of_an_onfailure_pod_crash_loops():
    moments = drive(make_pod({"setup": {"exit": 2}}, init=True, restart="OnFailure"), horizon=60)
    assert "CrashLoopBackOff" in [m.shown("setup", init=True) for m in moments]
    assert {m.phase for m in moments} == {"Pending"}


def test_a_sidecar_keeps_running_beside_the_main_container_which_starts_once_the_sidecar_started():
    moments = drive(make_pod({"main": {"run": 20}}, sidecar=True))
    both = [m for m in moments if m.shown("proxy", init=True) == "Running" and m.shown() == "Running"]
    assert both and both[0].phase == "Running"
    conditions = {c["type"]: c["status"] for c in both[0].step.status["conditions"]}
    assert (conditions["Initialized"], conditions["ContainersReady"]) == ("True", "True")
    before = moments[: moments.index(next(m for m in moments if m.shown("proxy", init=True) == "Running"))]
    assert before and all(m.shown() == "PodInitializing" for m in before)


def test_an_unready_sidecar_keeps_the_pod_unready():
    moments = drive(make_pod({"main": {"run": 20}, "proxy": {"ready": 10}}, sidecar=True))
    early = next(m for m in moments if m.shown() == "Running")
    ready = next(c for c in early.step.status["conditions"] if c["type"] == "ContainersReady")
    assert (ready["status"], ready["message"]) == ("False", "containers with unready status: [proxy]")


def test_a_sidecar_is_stopped_once_the_main_container_finished_and_does_not_decide_the_phase():
    moments = drive(make_pod({"main": {"run": 5}}, sidecar=True))
    last = moments[-1]
    assert last.phase == "Succeeded"
    assert last.state("proxy", init=True)["state"]["terminated"]["exitCode"] == 143
    assert ("Killing", "Stopping container proxy") in events(moments)


def test_a_crashing_sidecar_is_restarted_even_in_a_never_restarted_pod():
    moments = drive(make_pod({"main": {"run": 60}, "proxy": {"run": 5, "exit": 0}}, sidecar=True), horizon=50)
    assert "CrashLoopBackOff" in [m.shown("proxy", init=True) for m in moments]
    assert moments[-1].state("proxy", init=True)["restartCount"] >= 1
    assert {m.phase for m in moments if m.shown() == "Running"} == {"Running"}


def test_a_container_is_ready_only_after_its_ready_delay():
    moments = drive(make_pod({"main": {"run": 10, "ready": 4}}))
    running = [m for m in moments if m.shown() == "Running"]
    assert not running[0].state()["ready"]
    ready = [m for m in running if m.state()["ready"]]
    assert ready and ready[0].at == pytest.approx(5.0)
    assert next(c for c in ready[0].step.status["conditions"] if c["type"] == "Ready")["status"] == "True"


@pytest.mark.parametrize(
    ("term_exit", "reason", "phase"), [(143, "Error", "Failed"), (0, "Completed", "Succeeded")]
)
def test_deleting_a_running_pod_stops_its_containers_and_finishes_the_deletion(term_exit, reason, phase):
    moments = drive(make_pod({"main": {"run": None, "term_exit": term_exit}}), delete_at=3)
    last = moments[-1]
    assert last.step.delete
    term = last.state()["state"]["terminated"]
    assert (term["exitCode"], term["reason"], last.phase) == (term_exit, reason, phase)
    assert ("Killing", "Stopping container main") in events(moments)


def test_an_evicted_pod_fails_with_reason_evicted_and_a_disruptiontarget_condition():
    moments = drive(make_pod({"main": {"run": None}}), evict_at=3)
    status = moments[-1].step.status
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", "Evicted", "low on memory")
    target = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "TerminationByKubelet")
    assert moments[-1].state()["state"]["terminated"]["exitCode"] == 137
    assert not moments[-1].step.delete


def test_a_malformed_scenario_annotation_blocks_the_container_with_a_clear_error():
    moments = drive(make_pod({"main": {"rnu": 5}}))
    waiting = moments[-1].state()["state"]["waiting"]
    assert waiting["reason"] == "CreateContainerConfigError"
    assert "unknown key 'rnu'" in waiting["message"]
    assert any(r == "Failed" and "unknown key 'rnu'" in msg for r, msg in events(moments))


def test_back_offs_double_and_are_capped():
    assert [crash_backoff(n) for n in (0, 1, 2, 5, 10)] == [10, 20, 40, 300, 300]
    assert [pull_backoff(n) for n in (1, 2, 3, 9)] == [10, 20, 40, 300]


@pytest.mark.parametrize(("seconds", "text"), [(0.25, "250ms"), (1, "1s"), (1.5, "1.5s"), (125, "2m5s")])
def test_durations_are_printed_like_go(seconds, text):
    assert go_duration(seconds) == text


def test_a_lost_node_is_unknown_and_tainted_unreachable_until_restored():
    node = {
        "metadata": {"name": "sim-node-0"},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    lost = node_lost(node, T0)
    assert lost["status"]["conditions"][0]["status"] == "Unknown"
    assert {(t["key"], t["effect"]) for t in lost["spec"]["taints"]} == {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    back = node_restored(lost, T0)
    assert back["status"]["conditions"][0]["status"] == "True" and "taints" not in back["spec"]


def test_a_pod_on_a_lost_node_gets_reason_nodelost_and_is_not_ready():
    pod = make_pod()
    status = node_lost_pod_status(pod, "sim-node-0", T0)
    assert status["reason"] == "NodeLost"
    assert status["message"] == "Node sim-node-0 which was running pod p is unresponsive"
    assert next(c for c in status["conditions"] if c["type"] == "Ready")["status"] == "False"

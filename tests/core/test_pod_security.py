"""The rule pod-security at parse time (jobs/pod_security.py, through spec_checks): what the Pod Security
Standards' baseline level refuses, as kubernetes v1.36.3 writes it in
``staging/src/k8s.io/pod-security-admission/policy/check_*.go``, refused in every JobOperator argument
that can ask for it, naming the argument's field, the check and the fix. The same table over the admission
policy's CEL is tests/deploy/test_admission_policy.py's."""

from __future__ import annotations

import pytest

from airflow_jobs_plugin.jobs import pod_security
from airflow_jobs_plugin.jobs.spec import JobSpecError, validate

BASE = {"image": "trainer:1", "group": "vision", "user": "alice", "gpus": 1}


def problems(runtime_classes: tuple[str, ...] = (), **args) -> dict[str, str]:
    with pytest.raises(JobSpecError) as caught:
        validate(**BASE, runtime_classes=runtime_classes, **args)
    return dict(caught.value.errors)


# --- each check, on a pod spec: (what the pod spec holds, the field refused, the check) ---

REFUSED = [
    ({"hostNetwork": True}, "s.hostNetwork", "hostNamespaces"),
    ({"hostPID": True}, "s.hostPID", "hostNamespaces"),
    ({"hostIPC": True}, "s.hostIPC", "hostNamespaces"),
    (
        {"volumes": [{"name": "dev", "hostPath": {"path": "/dev"}}]},
        "s.volumes[0].hostPath",
        "hostPathVolumes",
    ),
    (
        {"containers": [{"name": "m", "securityContext": {"privileged": True}}]},
        "s.containers[0].securityContext.privileged",
        "privileged",
    ),
    (
        {"initContainers": [{"name": "i", "securityContext": {"capabilities": {"add": ["NET_RAW"]}}}]},
        "s.initContainers[0].securityContext.capabilities.add",
        "capabilities_baseline",
    ),
    (
        {"containers": [{"name": "m", "securityContext": {"capabilities": {"add": ["ALL"]}}}]},
        "s.containers[0].securityContext.capabilities.add",
        "capabilities_baseline",
    ),
    (
        {"containers": [{"name": "m", "ports": [{"containerPort": 22, "hostPort": 22}]}]},
        "s.containers[0].ports[0].hostPort",
        "hostPorts",
    ),
    (
        {"containers": [{"name": "m", "securityContext": {"procMount": "Unmasked"}}]},
        "s.containers[0].securityContext.procMount",
        "procMount",
    ),
    (
        {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}},
        "s.securityContext.sysctls[0].name",
        "sysctls",
    ),
    (
        {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}},
        "s.securityContext.seLinuxOptions.type",
        "seLinuxOptions",
    ),
    (
        {"containers": [{"name": "m", "securityContext": {"seLinuxOptions": {"role": "sysadm_r"}}}]},
        "s.containers[0].securityContext.seLinuxOptions.role",
        "seLinuxOptions",
    ),
    (
        {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
        "s.securityContext.seccompProfile.type",
        "seccompProfile",
    ),
    (
        {"containers": [{"name": "m", "securityContext": {"seccompProfile": {}}}]},
        "s.containers[0].securityContext.seccompProfile.type",
        "seccompProfile",
    ),
    (
        {"containers": [{"name": "m", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]},
        "s.containers[0].securityContext.appArmorProfile.type",
        "appArmorProfile",
    ),
    (
        {"securityContext": {"windowsOptions": {"hostProcess": True}}},
        "s.securityContext.windowsOptions.hostProcess",
        "windowsHostProcess",
    ),
    (
        {"containers": [{"name": "m", "startupProbe": {"tcpSocket": {"host": "10.0.0.1", "port": 1}}}]},
        "s.containers[0].startupProbe.tcpSocket.host",
        "hostProbesAndHostLifecycle",
    ),
    (
        {"containers": [{"name": "m", "lifecycle": {"postStart": {"httpGet": {"host": "x", "port": 1}}}}]},
        "s.containers[0].lifecycle.postStart.httpGet.host",
        "hostProbesAndHostLifecycle",
    ),
    (
        {"ephemeralContainers": [{"name": "e", "securityContext": {"privileged": True}}]},
        "s.ephemeralContainers[0].securityContext.privileged",
        "privileged",
    ),
    ({"runtimeClassName": "kata"}, "s.runtimeClassName", "runtimeClass"),
]


@pytest.mark.parametrize(("pod", "field", "check"), REFUSED, ids=[f for _, f, _ in REFUSED])
def test_pod_security_refuses_what_baseline_refuses_naming_the_field_and_the_check(pod, field, check):
    (refusal,) = pod_security.pod_spec_refusals(pod, "s", ("nvidia",))
    assert (refusal.field, refusal.check) == (field, check)
    assert " -- " in refusal.message  # the fix
    if check != "runtimeClass":
        assert f"is refused by the cluster's pod security (baseline, {check}): " in refusal.message


ALLOWED = {
    "host namespaces false": {"hostNetwork": False, "hostPID": False, "hostIPC": False},
    "the runtime's default capabilities": {
        "containers": [
            {
                "name": "m",
                "securityContext": {"capabilities": {"add": list(pod_security.BASELINE_CAPABILITIES)}},
            }
        ]
    },
    # allowPrivilegeEscalation, runAsNonRoot, dropping ALL and volume kinds are restricted's checks.
    "restricted's business": {
        "containers": [{"name": "m", "securityContext": {"allowPrivilegeEscalation": True, "runAsUser": 0}}],
        "volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}],
    },
    "hostPort 0": {"containers": [{"name": "m", "ports": [{"containerPort": 80, "hostPort": 0}]}]},
    "procMount in a user namespace": {
        "hostUsers": False,
        "containers": [{"name": "m", "securityContext": {"procMount": "Unmasked"}}],
    },
    "procMount Default": {"containers": [{"name": "m", "securityContext": {"procMount": "Default"}}]},
    "safe sysctls": {
        "securityContext": {"sysctls": [{"name": n, "value": "1"} for n in pod_security.SAFE_SYSCTLS]}
    },
    "container SELinux types": {
        "securityContext": {"seLinuxOptions": {"type": "container_engine_t", "level": "s0:c1"}},
        "containers": [{"name": "m", "securityContext": {"seLinuxOptions": {"type": ""}}}],
    },
    "runtime and localhost profiles": {
        "securityContext": {
            "seccompProfile": {"type": "RuntimeDefault"},
            "appArmorProfile": {"type": "Localhost"},
        },
        "containers": [{"name": "m", "securityContext": {"seccompProfile": {"type": "Localhost"}}}],
    },
    "probes on the pod's address": {
        "containers": [{"name": "m", "livenessProbe": {"httpGet": {"host": "", "port": 8080}}}]
    },
    "an allowed RuntimeClass": {"runtimeClassName": "nvidia"},
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_pod_security_allows_what_baseline_allows(name):
    assert pod_security.pod_spec_refusals(ALLOWED[name], "s", ("nvidia",)) == []


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ("unconfined", True),
        ("docker/default", True),
        ("runtime/default", False),
        ("localhost/k8s", False),
        ("", False),
    ],
)
def test_pod_security_reads_the_apparmor_annotations_baseline_still_reads(value, refused):
    annotations = {"container.apparmor.security.beta.kubernetes.io/main": value, "other": "unconfined"}
    found = pod_security.annotation_refusals(annotations, "a")
    assert [r.check for r in found] == (["appArmorProfile"] if refused else [])


def test_pod_security_tolerates_any_shape():
    """A wrong type is the checker's or the API server's to name; the rule neither raises nor refuses it."""
    for junk in (None, "x", 3, [1], {"containers": "x", "volumes": [None, 3], "securityContext": []}):
        assert pod_security.pod_spec_refusals(junk, "s", ()) == []


# --- at parse time, in every argument that can carry it ---

ARGUMENTS = [
    (
        {"volumes": [{"name": "dev", "hostPath": {"path": "/dev"}}]},
        "volumes[0].hostPath",
        "hostPath volume 'dev' (/dev) is refused by the cluster's pod security (baseline, hostPathVolumes)",
    ),
    (
        {"security_context": {"sysctls": [{"name": "kernel.core_pattern", "value": "|/x"}]}},
        "security_context.sysctls[0].name",
        "sysctl 'kernel.core_pattern' is refused",
    ),
    (
        {"container_security_context": {"capabilities": {"add": ["ALL"]}, "allowPrivilegeEscalation": True}},
        "container_security_context.capabilities.add",
        "adding ALL is refused by the cluster's pod security (baseline, capabilities_baseline)",
    ),
    (
        {"container_security_context": {"seccompProfile": {"type": "Unconfined"}}},
        "container_security_context.seccompProfile.type",
        "seccompProfile type Unconfined is refused",
    ),
    (
        {
            "init_containers": [
                {"name": "i", "image": "x", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
            ]
        },
        "init_containers[0].securityContext.capabilities.add",
        "adding SYS_ADMIN is refused",
    ),
    (
        {"pod_template": {"spec": {"hostPID": True}}},
        "pod_template.spec.hostPID",
        "hostPID true is refused by the cluster's pod security (baseline, hostNamespaces)",
    ),
    (
        {
            "pod_template": {
                "spec": {"volumes": [{"name": "pods", "hostPath": {"path": "/var/lib/kubelet/pods"}}]}
            }
        },
        "pod_template.spec.volumes[0].hostPath",
        "hostPath volume 'pods' (/var/lib/kubelet/pods) is refused",
    ),
    (
        {
            "pod_template": {
                "spec": {
                    "containers": [
                        {"name": "proxy", "image": "p", "ports": [{"containerPort": 1, "hostPort": 1}]}
                    ]
                }
            }
        },
        "pod_template.spec.containers[0].ports[0].hostPort",
        "hostPort 1 is refused",
    ),
    (
        {
            "pod_template": {
                "spec": {
                    "initContainers": [
                        {
                            "name": "s",
                            "image": "p",
                            "restartPolicy": "Always",
                            "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}},
                        }
                    ]
                }
            }
        },
        "pod_template.spec.initContainers[0].securityContext.capabilities.add",
        "adding SYS_PTRACE is refused",
    ),
    (
        {
            "pod_template": {
                "metadata": {
                    "annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}
                }
            }
        },
        "pod_template.metadata.annotations.container.apparmor.security.beta.kubernetes.io/main",
        "AppArmor profile 'unconfined' is refused",
    ),
    (
        {"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}},
        "annotations.container.apparmor.security.beta.kubernetes.io/main",
        "use 'runtime/default' or remove it",
    ),
    (
        {"pod_template": {"spec": {"runtimeClassName": "kata"}}},
        "pod_template.spec.runtimeClassName",
        "RuntimeClass 'kata' is not one the platform allows jobs (allowed: 'nvidia'; [airflow_jobs] job_runtime_classes",
    ),
]


@pytest.mark.parametrize(("args", "field", "message"), ARGUMENTS, ids=[f for _, f, _ in ARGUMENTS])
def test_pod_security_refuses_each_argument_at_parse_time_naming_the_field_and_the_fix(args, field, message):
    found = problems(runtime_classes=("nvidia",), **args)
    assert message in found[field], found
    assert " -- " in found[field]  # the fix


def test_pod_security_leaves_the_gpu_rules_message_on_a_privileged_container():
    """A privileged container is the GPU rules' refusal first (it sees every GPU): one message a field."""
    found = problems(container_security_context={"privileged": True})
    assert "sees every GPU of its node" in found["container_security_context.privileged"]


def test_pod_security_allows_a_procmount_where_the_pod_template_runs_in_a_user_namespace():
    unmasked = {"procMount": "Unmasked"}
    assert "container_security_context.procMount" in problems(container_security_context=unmasked)
    validate(**BASE, container_security_context=unmasked, pod_template={"spec": {"hostUsers": False}})


def test_pod_security_waits_for_a_template_and_refuses_it_once_rendered():
    """Parse time sets a template aside (and, for a pod_template still to render, a procMount: its hostUsers
    is not known yet); the rendered values are refused with the same words."""
    templated = {
        "pod_template": "{{ params.pod }}",
        "volumes": [{"name": "dev", "hostPath": {"path": "{{ params.path }}"}}],
        "container_security_context": {"procMount": "Unmasked"},
    }
    validate(**BASE, templated=True, **templated)
    rendered = {
        "pod_template": {"spec": {"hostNetwork": True}},
        "volumes": [{"name": "dev", "hostPath": {"path": "/dev"}}],
        "container_security_context": {"procMount": "Unmasked"},
    }
    with pytest.raises(JobSpecError) as caught:
        validate(**BASE, rendered={"pod_template", "volumes"}, **rendered)
    assert {f for f, _ in caught.value.errors} == {
        "pod_template.spec.hostNetwork",
        "volumes[0].hostPath",
        "container_security_context.procMount",
    }


def test_pod_security_lets_an_honest_task_through():
    validate(
        **BASE,
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "vision"}}],
        security_context={"runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        container_security_context={"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]}},
        init_containers=[{"name": "fetch", "image": "x"}],
        pod_template={
            "spec": {"containers": [{"name": "exporter", "image": "e", "ports": [{"containerPort": 9100}]}]}
        },
    )

"""The provider's configuration: every ``[airflow_jobs]`` option, declared once.

The declarations are plain data (no Airflow import) so ``get_provider_info()`` can publish them to
Airflow's configuration system (``airflow config get-value airflow_jobs namespace`` then works and the
defaults show in ``airflow config list``), and every reader (operator, trigger, UI, CLI, cluster policy)
asks :func:`get` for the same option by the same name. Environment variables follow Airflow's rule:
``AIRFLOW__AIRFLOW_JOBS__<OPTION>``.
"""

from __future__ import annotations

import configparser
import contextlib
import functools
import os
import sys
from dataclasses import dataclass

SECTION = "airflow_jobs"


@dataclass(frozen=True)
class Option:
    """One ``[airflow_jobs]`` option as Airflow's provider ``config`` schema describes it."""

    name: str
    description: str
    type: str  # "string", "integer", "boolean", "float" (Airflow's provider config types)
    default: str | None
    example: str | None = None

    def as_provider_info(self) -> dict[str, str | None]:
        return {
            "description": self.description,
            "version_added": "0.1.0",
            "type": self.type,
            "example": self.example,
            "default": self.default,
        }


OPTIONS: tuple[Option, ...] = (
    Option(
        "kubernetes_conn_id",
        "The cncf provider's Kubernetes connection the UI and CLI read the cluster through (operators "
        "take their own ``kubernetes_conn_id`` argument, defaulting to the same connection).",
        "string",
        "kubernetes_default",
        "kubernetes_gpu_cluster",
    ),
    Option(
        "namespace",
        "Namespace the GPU Jobs page and the CLI read jobs from; set it to the namespace your jobs run "
        "in (with the shipped Helm values, the release namespace).",
        "string",
        "default",
        "airflow",
    ),
    Option(
        "namespaces",
        "More namespaces the GPU Jobs page and the CLI show jobs from, comma-separated, besides "
        "``namespace`` (the first one shown). Each needs the read rights of the shipped Role.",
        "string",
        "",
        "gpu-team-a,gpu-team-b",
    ),
    Option(
        "quota_configmap",
        "Name of the ConfigMap holding the quota policy (key ``policy.yaml``). Empty: no quota pool.",
        "string",
        "airflow-jobs-quota-policy",
        "airflow-jobs-quota-policy",
    ),
    Option(
        "quota_namespace",
        "Namespace of the quota policy ConfigMap and of the ledgers. Empty: the jobs' namespace.",
        "string",
        "",
        "gpu-quota",
    ),
    Option(
        "job_service_accounts",
        "The ServiceAccounts a job's pods may run as (JobOperator's ``service_account``), comma-separated; "
        "a task that names none runs as the first. Each must exist in the jobs' namespace, and the "
        "admission policy's parameter (the ConfigMap ``airflow-jobs-job-accounts`` of that namespace) must "
        "list the same accounts. The default, the namespace's own ``default`` account, runs with its token "
        "never mounted (docs/deploying.md).",
        "string",
        "default",
        "default,trainer-s3-reader",
    ),
    Option(
        "job_runtime_classes",
        "The RuntimeClasses a job's pods may name (a ``pod_template``'s ``runtimeClassName``, JobOperator's "
        "``runtime_class_name``), comma-separated. Empty: none, the pods run with the nodes' default "
        "runtime. The admission policy's parameter (the keys of the ConfigMap "
        "``airflow-jobs-runtime-classes`` of the jobs' namespace) must list the same classes "
        "(docs/deploying.md).",
        "string",
        "",
        "nvidia",
    ),
    Option(
        "quota_policy_file",
        "Path of the quota policy YAML on the DAG processor, read by the opt-in cluster policy "
        "(``airflow_jobs_plugin.airflow.cluster_policy``) to check DAGs at parse time.",
        "string",
        "",
        "/opt/airflow/quota/policy.yaml",
    ),
    Option(
        "orphan_sweep_interval",
        "Seconds between two orphan sweeps of the API server (jobs whose task instance ended or no "
        "longer exists are cancelled, see docs/ui.md). 0 turns the sweep off.",
        "integer",
        "60",
        "300",
    ),
    Option(
        "orphan_grace_period",
        "Seconds a job, and a task instance that ended, are left alone before the orphan sweep judges "
        "them: longer than a worker needs between creating a job and deferring.",
        "integer",
        "600",
        "900",
    ),
    Option(
        "resume_settle_seconds",
        "Seconds after a JobOperator task deferred before its trigger reports the job's end, for a job that "
        "ends sooner: Airflow 3.3.2's scheduler can fail a task resumed before it has drained the deferring "
        "worker's exit (docs/operator.md). 0 reports at once.",
        "float",
        "15",
        "30",
    ),
    Option(
        "cancel_record_ttl",
        "Seconds the record a cancel leaves for its task try is kept (a Lease in the job's namespace, "
        "removed by the orphan sweep once expired): while it is kept, no later try of that run of the task "
        "submits the job again, even if the cancelled try died before recording the cancel. Keep it longer "
        "than the longest retry delay of your DAGs (Airflow's [core] max_task_retry_delay: 24 h).",
        "integer",
        "604800",
        "1209600",
    ),
    Option(
        "charging_file",
        "Path of the platform's charging map on the DAG processor: which groups and users the DAGs of "
        "each DAG folder may charge (format: docs/deploying.md). Read by the opt-in cluster policy; "
        "empty: a task may charge only its owner, in a group the owner is a member of.",
        "string",
        "",
        "/opt/airflow/quota/charging.yaml",
    ),
    Option(
        "kueue_queue",
        "Kueue LocalQueue every JobOperator that names no ``kueue_queue`` submits to, on a cluster whose Kueue "
        "admits GPU jobs. Empty: the product's own quota pool admits them (docs/kueue.md).",
        "string",
        "",
        "team-a",
    ),
    Option(
        "kueue_manages_all_jobs",
        "Set to True where the cluster's Kueue runs with manageJobsWithoutQueueName: every job is then "
        "Kueue's, and a job naming no queue goes to Kueue's default LocalQueue ``default`` (as Kueue's own "
        "webhook would send it), never through the product's pool.",
        "boolean",
        "False",
        "True",
    ),
)

OPTIONS = (
    *OPTIONS,
    Option(
        "autoscaled_node_shapes",
        "The nodes the cluster's autoscaler can add (a GPU node pool scaled to zero: EKS managed node "
        "groups, GKE node pools of minimum 0), as a YAML or JSON list of their labels and GPUs. A job "
        "that fits one of them waits for the node instead of failing as larger than any node. Empty: "
        "learnt from Karpenter's NodePools' limits where Karpenter runs; where a cluster-autoscaler runs "
        "(kube-system/cluster-autoscaler-status), no job is ruled larger than any node.",
        "string",
        "",
        "[{labels: {eks.amazonaws.com/nodegroup: gpu}, resources: {nvidia.com/gpu: 8}}]",
    ),
)

BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}


def provider_config() -> dict[str, dict]:
    """The ``config`` entry of ``get_provider_info()``."""
    return {
        SECTION: {
            "description": "GPU jobs on Kubernetes: the cluster, the namespace and the quota pool.",
            "options": {option.name: option.as_provider_info() for option in OPTIONS},
        }
    }


def namespaces(primary: str, extra: str) -> tuple[str, ...]:
    """The namespaces to watch: ``primary`` first, then the comma-separated ``extra``, each once."""
    seen: list[str] = []
    for name in (primary, *extra.split(",")):
        name = name.strip()
        if name and name not in seen:
            seen.append(name)
    return tuple(seen)


def job_service_accounts() -> tuple[str, ...]:
    """``job_service_accounts`` as a list, each once, in order (the default account when it names none)."""
    accounts = namespaces("", get("job_service_accounts"))
    return accounts or (BY_NAME["job_service_accounts"].default or "",)


def job_runtime_classes() -> tuple[str, ...]:
    """``job_runtime_classes`` as a list, each once, in order (empty: jobs name no RuntimeClass)."""
    return namespaces("", get("job_runtime_classes"))


def get_bool(name: str) -> bool:
    """A boolean option, spelled as Airflow's configuration spells booleans (``AirflowConfigParser.getboolean``,
    airflow-core ``configuration.py``, Airflow 3): ``t``/``true``/``1`` or ``f``/``false``/``0``."""
    value = get(name).strip().lower()
    if value in ("t", "true", "1"):
        return True
    if value in ("f", "false", "0", ""):
        return False
    raise ValueError(f"[{SECTION}] {name}: must be True or False, got {value!r}")


def get(name: str) -> str:
    """The option's value from Airflow's configuration, or its declared default ("" when none).

    In a process that has loaded Airflow's configuration (the API server, a worker, a triggerer, a test
    that overrides options in memory) that configuration answers. Elsewhere (the CLI) the option is read
    as that configuration would read it, without importing Airflow: importing its configuration costs
    seconds of CPU, more than the command it would serve.
    """
    option = BY_NAME[name]  # a KeyError here is a typo in the product, not a user error
    fallback = option.default or ""
    # Airflow's unit-test mode reads another file (unit_tests.cfg): only Airflow knows that one.
    own = "airflow.configuration" in sys.modules or os.environ.get("AIRFLOW__CORE__UNIT_TEST_MODE")
    if not own:
        try:
            found = _configured(name)
        except (OSError, configparser.Error):
            pass  # a config file this reader cannot parse: Airflow's own reader says what is wrong
        else:
            return fallback if found is None else found
    # The first import loads and may log Airflow's configuration on stdout, which belongs to the caller
    # (the CLI's tables and JSON).
    with contextlib.redirect_stdout(sys.stderr):
        from airflow.configuration import conf
    value = conf.get(SECTION, name, fallback=fallback)
    return fallback if value is None else str(value)


def _configured(name: str) -> str | None:
    """``[airflow_jobs] name`` where Airflow 3.3's configuration finds a provider option, in its order
    (``AirflowConfigParser.get``, ``airflow/_shared/configuration/parser.py``): the environment variable
    ``AIRFLOW__AIRFLOW_JOBS__<NAME>``, then the config file (``$AIRFLOW_CONFIG``, else
    ``$AIRFLOW_HOME/airflow.cfg`` with ``AIRFLOW_HOME`` defaulting to ``~/airflow``:
    ``get_airflow_home``, ``get_airflow_config`` in ``airflow/configuration.py``), each value with
    environment variables and ``~`` expanded. Airflow reads ``_CMD`` and ``_SECRET`` variants only for
    the options it lists as sensitive, which none of these is. None: not set, the default applies."""
    env = os.environ.get(f"AIRFLOW__{SECTION.upper()}__{name.upper()}")
    if env is not None:
        return _expanded(env)
    home = _expanded(os.environ.get("AIRFLOW_HOME", "~/airflow"))
    path = os.environ.get("AIRFLOW_CONFIG")
    parser = _config_file(_expanded(path) if path is not None else os.path.join(home, "airflow.cfg"))
    if parser is not None and parser.has_option(SECTION, name):
        return _expanded(parser.get(SECTION, name))
    return None


def _expanded(value: str) -> str:
    """Environment variables and ``~`` expanded until nothing changes, as Airflow's ``expand_env_var``."""
    while True:
        once = os.path.expanduser(os.path.expandvars(value))
        if once == value:
            return once
        value = once


@functools.lru_cache(maxsize=4)
def _config_file(path: str) -> configparser.ConfigParser | None:
    """The parsed config file (Airflow's parser is a ConfigParser with its default interpolation);
    None when there is none. Read once per process: the CLI asks for several options."""
    parser = configparser.ConfigParser()
    try:
        with open(path, encoding="utf-8") as handle:
            parser.read_file(handle)
    except FileNotFoundError:
        return None
    return parser

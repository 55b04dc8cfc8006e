"""Plain-text rendering of the GPU Jobs views for the terminal (``airflow-jobs status``, ``describe``).

Tables follow kubectl's look: upper-case headers, left-aligned columns three spaces apart, ``<none>``
for an empty cell. Pure: strings in, strings out.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_jobs_plugin.jobs.labels import GPU_RESOURCE
from airflow_jobs_plugin.readmodel import display
from airflow_jobs_plugin.readmodel.nodes import NodeView, totals_line
from airflow_jobs_plugin.readmodel.views import JobDetail, JobRow, Overview

NONE = "<none>"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; ``None`` and empty cells print as ``<none>``."""
    cells = [[str(h).upper() for h in headers]] + [
        [NONE if c is None or c == "" else str(c) for c in row] for row in rows
    ]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def pools_table(ov: Overview) -> str:
    """A line per group, then one per device and one per user. The cohort columns (COHORT, MOST,
    BORROWED, LENT) appear only when a group is in a cohort, RECENT only for a fair_share group: a
    policy without them reads as before."""
    cohorts = any(p.cohort for p in ov.pools)
    fair = any(u.recent_gpus is not None for p in ov.pools for u in p.users)
    columns = ["group", "user", "device", "quota"]
    columns += ["most"] if cohorts else []
    columns += ["used"] + (["recent"] if fair else []) + ["free"]
    columns += ["cohort", "borrowed", "lent"] if cohorts else []
    columns += ["queued", "queued gpus"]
    rows: list[dict[str, object]] = []
    for pool in ov.pools:
        rows.append(
            {
                "group": pool.group,
                "device": GPU_RESOURCE,
                "quota": _limit(pool.quota),
                "most": _limit(pool.most),
                "used": pool.used,
                "free": _limit(pool.free),
                "cohort": pool.cohort,
                "borrowed": pool.borrowed if pool.cohort else "",
                "lent": pool.lent if pool.cohort else "",
                "queued": pool.queued_jobs,
                "queued gpus": pool.queued_gpus,
            }
        )
        # Every line names its group: a line read on its own (grep, a pager's middle) says whose it is.
        for device in pool.devices:
            rows.append(
                {
                    "group": pool.group,
                    "device": device.resource,
                    "quota": device.quota,
                    "used": device.used,
                    "free": device.free,
                }
            )
        for user in pool.users:
            rows.append(
                {
                    "group": pool.group,
                    "user": user.user,
                    "quota": _limit(user.limit),
                    "used": user.gpus,
                    "recent": display.recent_gpus(user.recent_gpus),
                    "queued": user.queued_jobs,
                    "queued gpus": user.queued_gpus,
                }
            )
        if pool.more_users:
            rows.append({"group": pool.group, "user": f"(+{pool.more_users} more)"})
    return table(columns, [[row.get(c, "") for c in columns] for row in rows])


def status_text(ov: Overview) -> str:
    """Pools, queues and jobs as three tables."""
    out = ["POOLS"]
    if ov.pools:
        out.append(pools_table(ov))
    else:
        out.append("no quota pools")
    out.append("")
    out.append("QUEUES")
    entries = [
        [
            q.group,
            e.position,
            f"{e.namespace}/{e.name}",
            e.user,
            e.gpus,
            e.reason,
            display.age(e.waiting_seconds),
            e.message,
        ]
        for q in ov.queues
        for e in q.entries
    ]
    out.append(
        table(["group", "pos", "job", "user", "gpus", "reason", "waiting", "message"], entries)
        if entries
        else "no job is waiting"
    )
    for q in ov.queues:
        if q.more:
            out.append(
                f"{q.group}: {q.more} more waiting "
                f"(--group {q.group} --state QUEUED --sort position lists them; --queue-rows shows more here)"
            )
    out.append("")
    out.append("JOBS")
    jobs = [
        [
            j.name,
            j.state,
            j.reason,
            j.group,
            j.user,
            queue_of(j),
            j.gpus,
            j.device,
            j.attempt,
            display.age(j.age_seconds),
            j.dag_id,
            j.task_id,
        ]
        for j in ov.jobs
    ]
    out.append(
        table(
            [
                "name",
                "state",
                "reason",
                "group",
                "user",
                "queue",
                "gpus",
                "device",
                "attempt",
                "age",
                "dag",
                "task",
            ],
            jobs,
        )
        if jobs
        else "no jobs"
    )
    for problem in ov.problems:
        out.append(f"warning: {problem}")
    return "\n".join(out)


def queue_of(j: JobRow) -> str:
    """``pool``, or ``kueue:<LocalQueue>[/<ClusterQueue>]`` for a job Kueue admits."""
    if not j.kueue_queue:
        return "pool"
    return f"kueue:{j.kueue_queue}" + (f"/{j.cluster_queue}" if j.cluster_queue else "")


def _time(moment) -> str | None:
    return moment.strftime("%Y-%m-%d %H:%M:%S") + "Z" if moment is not None else None


def describe_text(d: JobDetail) -> str:
    """``kubectl describe``-like: fields, timeline, replicas, events, then the log tails."""
    j = d.job
    fields = [
        ("Name", j.name),
        ("Namespace", j.namespace),
        ("Kind", j.kind),
        ("State", j.state),
        ("Reason", j.reason),
        ("Message", j.message),
        ("Group", j.group),
        ("User", j.user),
        ("Queue", queue_of(j)),
        ("GPUs", j.gpus),
        ("Attempt", j.attempt),
        ("Requeues", j.requeue_count),
        ("Pod failures", j.pod_failures),
        ("Queue position", j.queue_position),
        ("Age", display.age(j.age_seconds)),
        ("DAG", j.dag_id),
        ("Task", j.task_id),
        ("Run", j.run_id),
        ("Map index", j.map_index),
    ]
    width = max(len(k) for k, _ in fields) + 2
    out = [f"{k + ':':<{width}}{NONE if v is None or v == '' else v}" for k, v in fields]
    out.append("")
    out.append("Attempts:")
    out.append(
        _indent(
            table(
                ["attempt", "job", "state", "reason", "started", "finished", "exit codes", "nodes", "gpu-s"],
                [
                    [
                        a.attempt,
                        a.name,
                        a.state,
                        a.reason,
                        _time(a.started_at),
                        _time(a.finished_at),
                        ",".join(f"{k}={v}" for k, v in sorted(a.exit_codes.items())),
                        ",".join(a.nodes),
                        f"{a.gpu_seconds:.0f}",
                    ]
                    for a in d.attempts
                ],
            )
        )
    )
    out.append("")
    out.append("Timeline:")
    out.extend(
        f"  {e.at.strftime('%Y-%m-%d %H:%M:%S')}Z  {e.label}" + (f"  {e.detail}" if e.detail else "")
        for e in d.timeline
    )
    out.append("")
    out.append("Replicas:")
    rows = [
        [
            r.replica,
            r.rank,
            r.pod,
            display.ready(r),
            r.status,
            r.restarts_column,
            display.replica_age(r),
            r.node,
        ]
        for r in d.replicas
    ]
    out.append(_indent(table(["replica", "rank", "pod", "ready", "status", "restarts", "age", "node"], rows)))
    out.append("")
    out.append("Events:")
    if d.events:
        rows = [[e.type, e.reason, display.age(e.age_seconds), e.object, e.message] for e in d.events]
        out.append(_indent(table(["type", "reason", "age", "from", "message"], rows)))
    else:
        out.append("  <none>")
    for tail in d.logs:
        out.append("")
        out.append(f"Log of {tail.replica} (rank {tail.rank}, pod {tail.pod}):")
        if tail.error:
            out.append(f"  cannot read the log: {tail.error}")
        out.extend(f"  {line}" for line in tail.lines)
    return "\n".join(out)


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def nodes_text(view: NodeView) -> str:
    """The node view: a line per device of each node, then one per job holding it (``mcli util``'s
    layout, with the device named)."""
    rows: list[list[object]] = []
    for node in view.nodes:
        state = "Ready" if node.ready else "NotReady"
        if not node.schedulable:
            state += ",SchedulingDisabled"
        rows.append(
            [node.name, state, node.product or "", node.device, node.gpus, node.used, node.free, "", "", ""]
        )
        for holder in node.holders:
            who = (
                f"{holder.namespace}/{holder.job}"
                if holder.product
                else f"{holder.namespace}/{holder.job} (not a GPU job of this product)"
            )
            rows.append(["", "", "", "", "", holder.gpus, "", who, holder.user or "", holder.group or ""])
    out = [
        table(["node", "status", "product", "device", "gpus", "used", "free", "job", "user", "group"], rows)
        if rows
        else "no node offers GPUs",
        "",
        totals_line(view),
    ]
    if view.problem:
        out.append(f"note: {view.problem}")
    return "\n".join(out)

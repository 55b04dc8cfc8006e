"""One typed, read-only view of a job object: the product's own labels and annotations on it, read once
here instead of by a walk of ``(job.get("metadata") or {})`` in every reader.

Why a module of its own, just above ``kinds/`` and below everything else: every layer reads a job's
group, user, verdict and admission time (the quota pool, admission, the trigger, the read model and the
pages), and the rule for each (an exact annotation before the label's slug, a time that reads as absent
when it does not parse) must be one rule. It asks the job's kind adapter what differs by kind (suspended,
finished by its controller) and nothing else, so the adapters stay free of the product's bookkeeping.
Modelled on kopf's ``bodies.Meta`` / ``Body`` (nolar/kopf ``kopf/_cogs/structs/bodies.py``): a thin
view over the API's plain JSON, which it never copies or changes; absent fields read as ``None``.

    >>> view = JobView({"metadata": {"name": "t", "labels": {"airflow-jobs.io/group": "vision"}}})
    >>> view.name, view.group, view.verdict
    ('t', 'vision', None)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from airflow_jobs_plugin.cluster.objects import Meta, mapping, parse_time
from airflow_jobs_plugin.jobs import kinds, labels


@dataclass(frozen=True, slots=True)
class JobView(Meta):
    """What the product reads of one job (a Job, MPIJob or torchrun Job, whole or metadata only): its
    metadata as :class:`~airflow_jobs_plugin.cluster.objects.Meta` reads any object's, and more."""

    @property
    def kind(self) -> kinds.JobKind:
        """The job's kind adapter (``kinds.kind_of``)."""
        return kinds.kind_of(self.obj or {})

    # --- who it runs for ------------------------------------------------------------------------------

    @property
    def group(self) -> str | None:
        """The exact quota group (annotation), else the label's slug of it (labels are limited to 63
        characters of a restricted alphabet, so the annotation is the exact name)."""
        return self.annotations.get(labels.GROUP_NAME) or self.labels.get(labels.GROUP) or None

    @property
    def user(self) -> str | None:
        """The exact user (annotation), else the label's slug of it."""
        return self.annotations.get(labels.USER_NAME) or self.labels.get(labels.USER) or None

    # --- the product's rulings and times --------------------------------------------------------------

    @property
    def verdict(self) -> str | None:
        """The reason the product itself ended the job with (QueueTimeout, NodeLost, Cancelled, ...)."""
        return self.annotations.get(labels.VERDICT) or None

    @property
    def verdict_message(self) -> str | None:
        return self.annotations.get(labels.VERDICT_MESSAGE) or None

    @property
    def admitted_at(self) -> datetime | None:
        """When the pool (or Kueue's handoff) admitted the job; ``None`` while queued."""
        return parse_time(self.annotations.get(labels.ADMITTED_AT))

    @property
    def stopped_at(self) -> datetime | None:
        """When a person stopped it (``None``: not stopped, or resumed since)."""
        return parse_time(self.annotations.get(labels.STOPPED_AT))

    @property
    def stopped(self) -> bool:
        """A person stopped it: no admission may release it until a resume (the mark, even unparsed)."""
        return bool(self.annotations.get(labels.STOPPED_AT))

    # --- what its kind says ----------------------------------------------------------------------------

    @property
    def suspended(self) -> bool:
        return self.kind.is_suspended(self.obj or {})

    @property
    def finished(self) -> bool:
        """The controller's final word (Complete / Succeeded / Failed) or a verdict of the product."""
        return self.verdict is not None or self.kind.is_finished(self.obj or {})

    @property
    def finished_at(self) -> datetime | None:
        """When its controller recorded the end (``status.completionTime``; a failed Job has none, so the
        transition time of its final condition), ``None`` while it runs."""
        status = mapping(self.obj, "status")
        completed = parse_time(status.get("completionTime"))
        if completed is not None:
            return completed
        for condition in status.get("conditions") or ():
            if (
                isinstance(condition, Mapping)
                and condition.get("type") in kinds.TERMINAL_CONDITIONS
                and condition.get("status") == "True"
            ):
                return parse_time(condition.get("lastTransitionTime"))
        return None

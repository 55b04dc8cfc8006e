"""What a trigger asks of whoever queues its job: the engine protocol.

Three engines implement it: the quota pool (``engines.pool.Admission``), Kueue (``engines.kueue``) and,
without either, the unmanaged engine (``engines.unmanaged``), which lets a job go at once. The trigger
picks one for its job and asks it, and only it: to admit the job or say why it waits, how long it may
sleep, to give back what the job held once it ended, and to write or finish the product's verdict.
"""

from __future__ import annotations

from typing import Protocol

from airflow_jobs_plugin.lifecycle import QueueStatus


class QueueEngine(Protocol):
    """Whoever queues a suspended job until it may run."""

    # Whether ``ensure``'s None means the job left the queue by that very call (let go or ruled),
    # rather than that no decision about it is known yet.
    direct: bool

    async def ensure(self, job: dict) -> QueueStatus | None:
        """Called while ``job`` is suspended: admit it if it may run, else say why it waits; a job that
        can never run is ruled on here (its verdict written, ``None`` returned)."""
        ...

    def wake_after(self, job: dict, default: float) -> float:
        """How long the trigger may sleep before it must look again even without a watch event."""
        ...

    async def release(self, job: dict) -> None:
        """``job`` reached its end: give back what it held so the next jobs may start."""
        ...

    def reserved_gpus(self, uid: str) -> int | None:
        """The GPUs the engine reserved for job ``uid`` while it is being admitted (``None``: none)."""
        ...

    async def fail(self, job: dict, reason: str, message: str) -> None:
        """Fail a job whose pods can never start with the product's verdict, and end it."""
        ...

    def ruled_unended(self, job: dict, *, running_too: bool) -> bool:
        """Whether a verdict on ``job`` was written but the job not ended (the ruling process stopped
        between its writes): its Failed condition missing while queued, or (``running_too``) an
        MPIJob's launcher still running."""
        ...

    async def end_ruled(self, job: dict) -> None:
        """Finish ending a job ruled on."""
        ...

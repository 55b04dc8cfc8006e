"""What a task or a person does to a job that both the job's rules and the queue's have a say in.

Submitting a task try's job (``submission``: build it, check it against the pool that will judge it,
create it suspended or reattach to an earlier try's) and acting on a job (``actions``: cancel, stop,
resume, which release or requeue what the queue holds for it). They sit above ``jobs``, ``lifecycle``
and ``queueing`` and import all three, so that none of those imports another's shell
(docs/architecture.md, the ``layers`` contract in pyproject.toml).
"""

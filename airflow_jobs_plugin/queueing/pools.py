"""Which quota pool judges a job: decided from the cluster's policies and the job's group, never from
anything the job's author chose. Pure: no I/O.

The platform installs its pools as policy ConfigMaps in the jobs' namespace: the one named
``airflow-jobs-quota-policy``, and any other labelled ``airflow-jobs.io/quota-policy: "true"``. Only a
platform admin may write ConfigMaps there (helm-values/rbac.yaml grants the deployment's components no
create or update on them but the controller's ledgers and boards), so a pool is the platform's word.
A group belongs to the one policy that lists it. The admission controller routes each job it finds
(:func:`route`), first match wins:

1. the namespace holds no policy: the platform installed no pool there, the job is let go at once
   (after the rulings every engine makes: docs/quota.md, "Jobs outside any pool");
2. the job names no group: it is held, since no pool can place it;
3. its group is listed by two policies, or its ledger unit (the group's, or its cohort's) is used by
   two policies: held until an admin removes the clash (either reading would be a guess);
4. its group is listed by one policy: that pool judges it, or, where the policy sets ``opt_out: true``
   for the group, it is let go at once (the platform, not the job, chose that);
5. some policy cannot be read: the job is held with that policy's problem (its group may be in it);
6. otherwise its group is in no pool of the namespace: held, saying which policies there are.

What a DAG writes (its task's ``quota_configmap``, a trigger's arguments) plays no part: a task that
names a pool only has its submit checked against this answer (usecases/submission.py).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from airflow_jobs_plugin.jobs import labels
from airflow_jobs_plugin.queueing.quota.model import (
    DEFAULT_POLICY_CONFIGMAP,
    QuotaPolicy,
    did_you_mean,
    excerpt,
    known_names,
)

POLICY_LABEL = f"{labels.PREFIX}/quota-policy"
POLICY_LABEL_VALUE = "true"
# The labels a platform puts on a policy ConfigMap that is not the default one.
POLICY_LABELS = {POLICY_LABEL: POLICY_LABEL_VALUE}


def is_policy(name: str, object_labels: Mapping[str, str]) -> bool:
    """Whether a ConfigMap of the jobs' namespace is one of its quota policies."""
    return name == DEFAULT_POLICY_CONFIGMAP or object_labels.get(POLICY_LABEL) == POLICY_LABEL_VALUE


@dataclass(frozen=True)
class PolicyDoc:
    """One policy ConfigMap as last read: its name and the parsed policy, or why it cannot be read."""

    name: str
    policy: QuotaPolicy | None
    problem: str | None = None


class Way(enum.Enum):
    POOL = "pool"  # the quota pool of ``Route.policy`` judges it
    LET_GO = "let-go"  # no pool: released at once (rulings first)
    HOLD = "hold"  # kept suspended: ``Route.message`` says why


@dataclass(frozen=True)
class Route:
    way: Way
    policy: str | None = None
    message: str = ""
    # Held because its group is in no pool of a namespace that has pools: it can never run as it is.
    unknown_group: bool = False


@dataclass(frozen=True)
class NamespacePools:
    """The pools of one namespace, indexed for routing."""

    namespace: str
    docs: tuple[PolicyDoc, ...] = ()
    by_group: Mapping[str, str] = field(default_factory=dict)  # group -> its policy's name
    clashes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # group -> the policies naming it

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(doc.name for doc in self.docs)

    def doc(self, name: str) -> PolicyDoc | None:
        for doc in self.docs:
            if doc.name == name:
                return doc
        return None


def index(namespace: str, docs: Iterable[PolicyDoc]) -> NamespacePools:
    """Index the policies of ``namespace`` by group, finding the groups (or ledger units) two name."""
    ordered = tuple(sorted(docs, key=lambda d: d.name))
    claims: dict[str, list[str]] = {}
    units: dict[str, set[str]] = {}
    for doc in ordered:
        if doc.policy is None:
            continue
        for group in doc.policy.groups:
            claims.setdefault(group, []).append(doc.name)
            units.setdefault(doc.policy.ledger_of(group), set()).add(doc.name)
    by_group: dict[str, str] = {}
    clashes: dict[str, tuple[str, ...]] = {}
    for group, names in claims.items():
        doc = next(d for d in ordered if d.name == names[0])
        assert doc.policy is not None
        unit_owners = units.get(doc.policy.ledger_of(group), set())
        if len(names) > 1 or len(unit_owners) > 1:
            clashes[group] = tuple(sorted(set(names) | unit_owners))
        else:
            by_group[group] = names[0]
    return NamespacePools(namespace, ordered, by_group, clashes)


def route(pools: NamespacePools, group: str | None) -> Route:
    """Who judges a job of ``group`` in the namespace of ``pools`` (the module docstring's rules)."""
    where = f"namespace {pools.namespace!r}"
    if not pools.docs:
        return Route(Way.LET_GO, message=f"no quota pool in {where}: released at once")
    if not group:
        return Route(
            Way.HOLD,
            message=(
                f"the job has no {labels.GROUP_NAME} annotation: no quota pool of {where} can place it; "
                "submit it with a group (JobOperator's group)"
            ),
        )
    clash = pools.clashes.get(group)
    if clash:
        return Route(
            Way.HOLD,
            message=(
                f"group {group!r} (or its cohort's ledger) is named by more than one quota policy of {where} "
                f"({', '.join(clash)}): a platform admin must keep it in one; the job waits until then"
            ),
        )
    name = pools.by_group.get(group)
    if name is not None:
        doc = pools.doc(name)
        quota = doc.policy.groups.get(group) if doc is not None and doc.policy is not None else None
        if quota is not None and quota.opt_out:
            return Route(
                Way.LET_GO, name, f"group {group!r} runs outside the quota pool {name!r} (opt_out: true)"
            )
        return Route(Way.POOL, name)
    broken = [doc for doc in pools.docs if doc.policy is None]
    if broken:
        doc = broken[0]
        return Route(
            Way.HOLD,
            doc.name,
            f"the quota policy ConfigMap {pools.namespace}/{doc.name} cannot be read ({doc.problem}); "
            f"group {group!r} may be in it, so the job waits until a platform admin fixes it",
        )
    known = sorted({g for doc in pools.docs if doc.policy is not None for g in doc.policy.groups})
    return Route(
        Way.HOLD,
        message=(
            f"unknown quota group {excerpt(group)}{did_you_mean(group, known)}; known groups in {where}: "
            f"{known_names(known)} (policies: {', '.join(pools.names)}). Pick one of them, or ask a platform "
            "admin to add the group under 'groups:' in a quota policy"
        ),
        unknown_group=True,
    )

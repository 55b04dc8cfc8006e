"""What the pools views show of a group (``quota.usage``): its cohort, the GPUs it borrowed from it and
lent to it, the most it may hold and what it may take now; and, in a fair_share group, each user's
recent usage in GPUs."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_jobs_plugin.queueing.quota import cohort as cohorts
from airflow_jobs_plugin.queueing.quota.cohort import Limits
from airflow_jobs_plugin.queueing.quota.fair_share import UsageHistory
from airflow_jobs_plugin.queueing.quota.model import Reservation
from airflow_jobs_plugin.queueing.quota.parse import parse_policy
from airflow_jobs_plugin.queueing.quota.policy import usage

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(days=2)
HOUR = timedelta(hours=1)

RESEARCH = parse_policy(
    """
groups:
  vision: {gpus: 8, cohort: research}
  nlp: {gpus: 8, cohort: research}
  infra: {gpus: 4}
"""
)


def held(
    name: str, group: str, gpus: int, *, user: str = "bob", since: datetime = T0, **extra
) -> Reservation:
    return Reservation(
        job=name,
        group=group,
        user=user,
        gpus=gpus,
        uid=f"uid-{name}",
        admitted_at=since,
        namespace="ml",
        **extra,
    )


def approx(value: float):
    return pytest.approx(value, rel=1e-6)


def by_group(groups):
    return {g.group: g for g in groups}


# --- cohorts ---------------------------------------------------------------------------------------------


def test_a_borrowing_group_shows_what_it_borrowed_and_its_lender_what_it_lent():
    groups = by_group(usage(RESEARCH, [held("big", "vision", 12)]))
    vision, nlp = groups["vision"], groups["nlp"]
    assert (vision.cohort, vision.quota, vision.used, vision.borrowed, vision.lent) == (
        "research",
        8,
        12,
        4,
        0,
    )
    assert (nlp.cohort, nlp.quota, nlp.used, nlp.borrowed, nlp.lent) == ("research", 8, 0, 0, 4)


def test_a_group_in_a_cohort_may_hold_every_gpu_the_cohort_lends():
    groups = by_group(usage(RESEARCH, []))
    assert (groups["vision"].most, groups["nlp"].most) == (16, 16)


def test_the_most_a_group_may_hold_stops_at_its_borrowing_limit_and_counts_what_it_keeps():
    policy = parse_policy(
        """
groups:
  vision: {gpus: 8, cohort: research, borrowing_limit: 2}
  nlp: {gpus: 8, cohort: research, lending_limit: 4}
"""
    )
    groups = by_group(usage(policy, []))
    # vision: 8 + at most 2 borrowed; nlp: the 4 it keeps plus everything lent (8 + 4).
    assert (groups["vision"].most, groups["nlp"].most) == (10, 16)


def test_a_lender_whose_quota_is_lent_out_has_nothing_free_until_it_comes_back():
    groups = by_group(usage(RESEARCH, [held("all", "vision", 16)]))
    assert (groups["nlp"].used, groups["nlp"].lent, groups["nlp"].free) == (0, 8, 0)
    assert groups["vision"].free == 0


def test_a_borrower_may_take_what_the_cohort_has_left_to_lend():
    groups = by_group(usage(RESEARCH, [held("big", "vision", 12)]))
    assert (groups["vision"].free, groups["nlp"].free) == (4, 4)


def test_a_group_outside_any_cohort_reads_as_before():
    infra = by_group(usage(RESEARCH, [held("small", "infra", 3)]))["infra"]
    assert (infra.cohort, infra.borrowed, infra.lent, infra.most, infra.free) == (None, 0, 0, None, 1)


def test_kueue_jobs_and_other_devices_neither_borrow_nor_lend():
    reservations = [
        held("handed", "vision", 12, kueue=True),
        held("slices", "vision", 12, resource="nvidia.com/mig-1g.10gb"),
    ]
    groups = by_group(usage(RESEARCH, reservations))
    assert (groups["vision"].borrowed, groups["nlp"].lent) == (0, 0)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 8),
            st.one_of(st.none(), st.integers(0, 8)),
            st.one_of(st.none(), st.integers(0, 8)),
            st.integers(0, 16),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_what_a_group_may_take_now_is_the_most_admission_would_let_it_take(groups):
    limits = {
        f"g{i}": Limits(nominal, None if lend is None else min(lend, nominal), borrow)
        for i, (nominal, lend, borrow, _used) in enumerate(groups)
    }
    used = {f"g{i}": u for i, (*_limits, u) in enumerate(groups)}
    for group in limits:
        if not cohorts.fits(group, 0, limits, used):
            continue  # already over a limit (a lowered quota): nothing to take, nothing to check
        room = cohorts.room(group, limits, used)
        assert cohorts.fits(group, room, limits, used)
        assert not cohorts.fits(group, room + 1, limits, used)


# --- fair share ------------------------------------------------------------------------------------------

FAIR = parse_policy(
    """
groups:
  nlp: {gpus: 8, ordering: fair_share, fair_share_half_life: 1h}
  infra: {gpus: 4}
"""
)


def gpu_seconds(gpus: float) -> float:
    """Decayed GPU-seconds that read as ``gpus`` recent GPUs with a one-hour half-life."""
    return gpus * HOUR.total_seconds() / math.log(2)


def test_a_fair_share_groups_users_show_history_plus_what_they_hold_now_in_gpus():
    history = UsageHistory(at=NOW, gpu_seconds={"alice": gpu_seconds(2.0)}, half_life=HOUR)
    # bob has held 4 GPUs for two days, many half-lives: he reads 4.
    groups = by_group(usage(FAIR, [held("long", "nlp", 4, user="bob")], NOW, {"nlp": history}))
    recent = groups["nlp"].recent
    assert recent is not None
    assert recent.keys() == {"alice", "bob"}
    assert recent["alice"] == approx(2.0)
    assert recent["bob"] == approx(4.0)


def test_recent_usage_halves_each_half_life():
    history = UsageHistory(at=NOW - HOUR, gpu_seconds={"alice": gpu_seconds(2.0)}, half_life=HOUR)
    recent = by_group(usage(FAIR, [], NOW, {"nlp": history}))["nlp"].recent
    assert recent == {"alice": approx(1.0)}


def test_a_fifo_group_shows_no_recent_usage():
    groups = by_group(usage(FAIR, [held("small", "infra", 2)], NOW, {}))
    assert groups["infra"].recent is None


def test_without_a_time_no_recent_usage_is_computed():
    assert by_group(usage(FAIR, [held("long", "nlp", 4)]))["nlp"].recent is None


def test_a_cohorts_fair_share_groups_read_the_cohorts_one_history():
    policy = parse_policy(
        """
groups:
  vision: {gpus: 8, cohort: research, ordering: fair_share, fair_share_half_life: 1h}
  nlp: {gpus: 8, cohort: research, ordering: fair_share, fair_share_half_life: 1h}
"""
    )
    history = UsageHistory(at=NOW, gpu_seconds={"alice": gpu_seconds(3.0)}, half_life=HOUR)
    groups = by_group(usage(policy, [], NOW, {"research": history}))
    assert groups["vision"].recent == groups["nlp"].recent == {"alice": approx(3.0)}

"""The cost model against the real post offices on a timed network (issue 20)."""

from __future__ import annotations

import pytest

from sgcs.services.mailboxes.costmodel import (
    Costs,
    expected_time,
    expected_traffic,
    migration_cost,
    one_communication,
    simulate,
    simulate_migration,
)


def test_the_paper_worked_example() -> None:
    assert expected_time(0.1, 0.1, 0.0) == pytest.approx(5.70)
    assert expected_traffic(0.1, 0.1, 0.0) == pytest.approx(10.2)


def test_traffic_grows_with_migration() -> None:
    assert expected_traffic(0.1, 0.1, 0.5) > expected_traffic(0.1, 0.1, 0.0)


@pytest.mark.parametrize("case, migrating, time, traffic", [
    (1, False, 0.5, 5.0), (2, False, 4.5, 9.0), (3, False, 6.5, 11.0),
    (1, True, 4.5, 9.0), (2, True, 8.5, 13.0), (3, True, 10.5, 15.0),
])
def test_each_path_costs_what_the_model_says(case: int, migrating: bool, time: float, traffic: float) -> None:
    measured_time, measured_traffic, _ = one_communication(case, migrating, Costs(), 0)
    assert (measured_time, measured_traffic) == pytest.approx((time, traffic))


@pytest.mark.parametrize("rho1", [0.1, 0.5])
@pytest.mark.parametrize("rho2", [0.1, 0.4])
@pytest.mark.parametrize("q", [0.0, 0.3])
def test_simulated_means_within_five_percent(rho1: float, rho2: float, q: float) -> None:
    measured = simulate(rho1, rho2, q, trials=600, seed=7)
    assert measured.time == pytest.approx(expected_time(rho1, rho2, q), rel=0.05), \
        f"replay: simulate({rho1}, {rho2}, {q}, trials=600, seed=7)"
    assert measured.traffic == pytest.approx(expected_traffic(rho1, rho2, q), rel=0.05)


@pytest.mark.parametrize("friends", [0, 1, 3, 5])
def test_migration_cost_is_friends_plus_two_controls(friends: int) -> None:
    result = simulate_migration(friends)
    assert result["control_kb"] == migration_cost(friends)
    assert result.get("update", 0) == friends and result["dereg"] == 1 and result["home_update"] == 1

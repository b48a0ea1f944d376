"""The mailbox paper's cost model (section 4.2, equations (1) to (3)), and
the real post offices on a timed network against it."""

from __future__ import annotations

import math

import pytest

from sgcs.services.mailboxes.costmodel import (
    Costs,
    Home,
    compare_home_relay,
    dispersion,
    draw_communications,
    expected_time,
    expected_time_home_relay,
    expected_time_with_local_forwards,
    expected_total_migration_cost,
    expected_traffic,
    expected_traffic_as_printed,
    expected_traffic_home_relay,
    expected_traffic_with_local_forwards,
    friend_domains_from_dispersion,
    inter_domain_rate,
    measure,
    migrating_probability,
    migration_cost,
    migration_cost_home_relay,
    one_communication,
    simulate,
    simulate_figure5,
    simulate_migration,
    total_migration_cost,
)

# The paper's experiment: C_ctl = 1 KB, C_mail = 4 KB, delta_intra = 10 delta_inter;
# in units of 1 KB / delta_inter: t_ctl = 1, t_ml = 4, t_intra = (1 + 4) / 10 = 0.5.


def test_reference_values_at_q_zero() -> None:
    # rho1 = rho2 = 0.1, rho3 = 0.8, q = 0: T = 0.1*0.5 + 0.1*4.5 + 0.8*6.5 = 0.05 + 0.45 + 5.2 = 5.70;
    # C_dly = 0.1*5 + 0.1*9 + 0.8*11 = 0.5 + 0.9 + 8.8 = 10.2
    assert expected_time(0.1, 0.1, 0.0) == pytest.approx(5.70)
    assert expected_traffic(0.1, 0.1, 0.0) == pytest.approx(10.2)


def test_equation_1_at_rho1_08_q_half() -> None:
    # rho1 = 0.8, rho2 = 0.1, rho3 = 0.1, q = 0.5:
    #   rho1 t_intra                                   = 0.8 * 0.5                        = 0.40
    #   rho2 [(1-q)(t_ml + t_intra) + q(2 t_ml + t_intra)] = 0.1 * (0.5*4.5 + 0.5*8.5)    = 0.65
    #   rho3 [(1-q)(2t_ctl + t_ml + t_intra) + q(2t_ctl + 2t_ml + t_intra)]
    #                                                  = 0.1 * (0.5*6.5 + 0.5*10.5)       = 0.85
    #   T = 1.90; a local receiver that leaves the domain adds rho1 q (t_ctl + t_ml) = 0.8 * 0.5 * 5 = 2.0
    assert expected_time(0.8, 0.1, 0.5) == pytest.approx(1.90)
    assert expected_time_with_local_forwards(0.8, 0.1, 0.5) == pytest.approx(3.90)


def test_equation_1_at_rho1_01_q_03() -> None:
    # rho1 = rho2 = 0.1, rho3 = 0.8, q = 0.3:
    #   0.1 * 0.5 = 0.05;  0.1 * (0.7*4.5 + 0.3*8.5) = 0.1 * 5.7 = 0.57;
    #   0.8 * (0.7*6.5 + 0.3*10.5) = 0.8 * 7.7 = 6.16;  T = 6.78
    assert expected_time(0.1, 0.1, 0.3) == pytest.approx(6.78)


def test_equation_2_corrected_at_q_above_zero() -> None:
    # rho1 = 0.8, rho2 = 0.1, rho3 = 0.1, q = 0.5:
    #   rho1 (C_ctl + C_mail)                                  = 0.8 * 5                 = 4.0
    #   rho2 [(1-q)(C_ctl + 2C_mail) + q(C_ctl + 3C_mail)]     = 0.1 * (0.5*9 + 0.5*13)  = 1.1
    #   rho3 [(1-q)(3C_ctl + 2C_mail) + q(3C_ctl + 3C_mail)]   = 0.1 * (0.5*11 + 0.5*15) = 1.3
    #   C_dly = 6.4 (the variant with q C_mail on every communication gave 8.0)
    assert expected_traffic(0.8, 0.1, 0.5) == pytest.approx(6.4)
    assert expected_traffic_with_local_forwards(0.8, 0.1, 0.5) == pytest.approx(8.0)
    # rho1 = rho2 = 0.1, rho3 = 0.8, q = 0.3:
    #   0.1 * 5 = 0.5;  0.1 * (0.7*9 + 0.3*13) = 1.02;  0.8 * (0.7*11 + 0.3*15) = 0.8 * 12.2 = 9.76;  11.28
    assert expected_traffic(0.1, 0.1, 0.3) == pytest.approx(11.28)


def test_equation_2_as_printed_lacks_q_on_its_last_term() -> None:
    # As printed, the last bracket is (1-q)(3C_ctl + 2C_mail) + (3C_ctl + 3C_mail):
    #   rho1 = 0.8, rho2 = 0.1, q = 0.5: 4.0 + 1.1 + 0.1 * (0.5*11 + 15) = 4.0 + 1.1 + 2.05 = 7.15
    #   rho1 = rho2 = 0.1, q = 0: 0.5 + 0.9 + 0.8 * (11 + 15) = 22.2 (corrected: 10.2)
    assert expected_traffic_as_printed(0.8, 0.1, 0.5) == pytest.approx(7.15)
    assert expected_traffic_as_printed(0.1, 0.1, 0.0) == pytest.approx(22.2)
    # ... and it falls as q rises (by rho3 * 11 KB per unit of q, less rho2 * 4 KB).
    assert expected_traffic_as_printed(0.1, 0.1, 0.5) < expected_traffic_as_printed(0.1, 0.1, 0.0)
    # Without rho3 the defect is invisible: both forms agree.
    assert expected_traffic_as_printed(0.6, 0.4, 0.3) == pytest.approx(expected_traffic(0.6, 0.4, 0.3))


def test_equations_with_other_sizes() -> None:
    # C_ctl = 2, C_mail = 3, ratio 5: t_ctl = 2, t_ml = 3, t_intra = (2 + 3) / 5 = 1.
    # rho1 = 0.5, rho2 = 0.25, rho3 = 0.25, q = 0.2:
    #   T = 0.5*1 + 0.25*(0.8*(3+1) + 0.2*(6+1)) + 0.25*(0.8*(4+3+1) + 0.2*(4+6+1))
    #     = 0.5 + 0.25*4.6 + 0.25*8.6 = 0.5 + 1.15 + 2.15 = 3.8
    #   C_dly = 0.5*5 + 0.25*(0.8*(2+6) + 0.2*(2+9)) + 0.25*(0.8*(6+6) + 0.2*(6+9))
    #         = 2.5 + 0.25*8.6 + 0.25*12.6 = 2.5 + 2.15 + 3.15 = 7.8
    costs = Costs(c_ctl=2.0, c_mail=3.0, ratio=5.0)
    assert expected_time(0.5, 0.25, 0.2, costs) == pytest.approx(3.8)
    assert expected_traffic(0.5, 0.25, 0.2, costs) == pytest.approx(7.8)


def _old_time(rho1: float, rho2: float, q: float) -> float:
    """The form this module had before: q C_mail added to every communication."""
    intra, rho3 = 0.5, 1.0 - rho1 - rho2
    return rho1 * intra + rho2 * (4 + intra) + rho3 * (2 + 4 + intra) + q * 4


def _old_traffic(rho1: float, rho2: float, q: float) -> float:
    rho3 = 1.0 - rho1 - rho2
    return rho1 * 5 + rho2 * 9 + rho3 * 11 + q * 4


@pytest.mark.parametrize("rho1, rho2", [(0.1, 0.1), (0.3, 0.3), (0.5, 0.4), (0.8, 0.1), (0.0, 0.0), (1.0, 0.0)])
def test_at_q_zero_the_paper_equals_the_old_form(rho1: float, rho2: float) -> None:
    assert expected_time(rho1, rho2, 0.0) == pytest.approx(_old_time(rho1, rho2, 0.0))
    assert expected_traffic(rho1, rho2, 0.0) == pytest.approx(_old_traffic(rho1, rho2, 0.0))


@pytest.mark.parametrize("rho1, rho2, q", [(0.8, 0.1, 0.5), (0.3, 0.3, 0.1), (0.5, 0.4, 1.0)])
def test_the_old_form_is_the_paper_plus_a_forward_of_every_local_mail(rho1: float, rho2: float, q: float) -> None:
    # The old form charged q C_mail on every communication, i.e. rho1 q C_mail more than the paper: the
    # local-forwards variant's traffic. Its time, measured from send to arrival, also waits for the
    # new PO's DEREG before the old PO forwards: rho1 q t_ctl more than the old form.
    assert expected_traffic_with_local_forwards(rho1, rho2, q) == pytest.approx(_old_traffic(rho1, rho2, q))
    assert expected_time_with_local_forwards(rho1, rho2, q) == pytest.approx(_old_time(rho1, rho2, q) + rho1 * q)
    assert expected_time(rho1, rho2, q) < _old_time(rho1, rho2, q)


def test_with_every_receiver_local_migration_costs_nothing() -> None:
    assert expected_time(1.0, 0.0, 0.7) == pytest.approx(0.5)
    assert expected_traffic(1.0, 0.0, 0.7) == pytest.approx(5.0)


def test_traffic_and_time_grow_with_migration() -> None:
    assert expected_traffic(0.1, 0.1, 0.5) > expected_traffic(0.1, 0.1, 0.0)
    assert expected_time(0.1, 0.1, 0.5) > expected_time(0.1, 0.1, 0.0)


def test_q_from_stay_and_migration_times() -> None:
    assert migrating_probability(t_stay=9.0, t_mgt=1.0) == pytest.approx(0.1)   # 1 / (9 + 1)
    assert migrating_probability(t_stay=3.0, t_mgt=1.0) == pytest.approx(0.25)  # 1 / (3 + 1)
    assert migrating_probability(t_stay=0.0, t_mgt=2.0) == 1.0
    # Read literally, "t_mgt/t_stay + t_mgt" would give 1/9 + 1 = 1.11: not a probability.
    assert migrating_probability(9.0, 1.0) < 1.0
    q = migrating_probability(t_stay=4.0, t_mgt=1.0)  # 0.2
    # 0.1*0.5 + 0.1*(0.8*4.5 + 0.2*8.5) + 0.8*(0.8*6.5 + 0.2*10.5) = 0.05 + 0.53 + 5.84 = 6.42
    assert expected_time(0.1, 0.1, q) == pytest.approx(6.42)
    with pytest.raises(ValueError):
        migrating_probability(0.0, 0.0)
    with pytest.raises(ValueError):
        migrating_probability(-1.0, 1.0)


@pytest.mark.parametrize("rho1, rho2, q", [(-0.1, 0.5, 0.1), (0.7, 0.4, 0.1), (0.1, 0.1, 1.5), (0.1, 0.1, -0.1)])
def test_probabilities_are_checked(rho1: float, rho2: float, q: float) -> None:
    with pytest.raises(ValueError):
        expected_time(rho1, rho2, q)
    with pytest.raises(ValueError):
        expected_traffic(rho1, rho2, q)


def test_equation_3_and_the_total_migration_cost() -> None:
    assert migration_cost(3) == 5.0                               # (3 + 2) * 1 KB
    assert migration_cost(3, Costs(c_ctl=2.0)) == 10.0            # (3 + 2) * 2 KB
    assert total_migration_cost(10, 3) == 50.0                    # 10 * (3 + 2) * 1 KB
    assert inter_domain_rate(5, 100) == 0.05                      # eta: one inter-domain move in 20
    assert dispersion(3, 30) == 0.1                               # xi: 3 domains over 30 communications
    assert friend_domains_from_dispersion(0.1, 30) == 3
    # eta = 0.2, xi = 0.1, 30 communications: N_inter = 20, D_fri = 3, C = 20 * 5 = 100 KB
    assert expected_total_migration_cost(100, 0.2, 0.1, 30) == pytest.approx(100.0)
    # eta = 0.05, xi = 0.2, 30 communications: N_inter = 5, D_fri = 6, C = 5 * 8 = 40 KB
    assert expected_total_migration_cost(100, 0.05, 0.2, 30) == pytest.approx(40.0)
    with pytest.raises(ValueError):
        inter_domain_rate(5, 0)


def test_figure5_on_the_real_post_offices() -> None:
    run = simulate_figure5(eta=0.2, xi=0.1, communications=30, migrations=100, seed=3)
    assert run.friend_domains == 3
    assert run.messages == run.inter_domain * 5 and run.cost_kb == run.inter_domain * 5.0
    assert 8 <= run.inter_domain <= 32  # Binomial(100, 0.2): mean 20, sd 4
    mean = sum(simulate_figure5(0.1, 0.1, 30, seed=s).cost_kb for s in range(40)) / 40
    assert mean == pytest.approx(expected_total_migration_cost(100, 0.1, 0.1, 30), rel=0.15)  # 50 KB
    assert simulate_figure5(0.0, 0.2, 30).messages == 0




def test_figure5_counts_every_migration_message() -> None:
    # eta = 1: every one of 10 migrations is inter-domain; D_fri = round(0.1 * 40) = 4 friend domains,
    # each told of every move: 10 * (4 + 2) = 60 DEREG, HOME_UPDATE and UPDATE messages.
    run = simulate_figure5(eta=1.0, xi=0.1, communications=40, migrations=10)
    assert (run.inter_domain, run.friend_domains, run.messages, run.cost_kb) == (10, 4, 60, 60.0)


def test_home_relay_equations() -> None:
    # rho1 = 0.1, q = 0.3, home a third domain:
    #   T = 0.1 * 0.5 + 0.9 * (0.7 * (2*4 + 0.5) + 0.3 * (3*4 + 0.5)) = 0.05 + 0.9 * 9.7 = 8.78
    #   D = 0.1 * 5 + 0.9 * (0.7 * (1 + 3*4) + 0.3 * (1 + 4*4)) = 0.5 + 0.9 * 14.2 = 13.28
    assert expected_time_home_relay(0.1, 0.3) == pytest.approx(8.78)
    assert expected_traffic_home_relay(0.1, 0.3) == pytest.approx(13.28)
    assert migration_cost_home_relay() == 2.0
    # the paper's scheme at rho2 = 0.1 of the same workload: 6.78 and 11.28, 2 units and 2 KB less
    assert expected_time(0.1, 0.1, 0.3) == pytest.approx(8.78 - 2.0)
    assert expected_traffic(0.1, 0.1, 0.3) == pytest.approx(13.28 - 2.0)


# --- the simulator: the real post offices on a timed network -------------------------------------

PAPER_PATHS = [
    # case, migrating, time, traffic: equation (1)'s and (2)'s brackets
    (1, False, 0.5, 5.0), (2, False, 4.5, 9.0), (3, False, 6.5, 11.0),
    (1, True, 0.5, 5.0),  # a move between hosts of the sender's domain: nothing to forward
    (2, True, 8.5, 13.0), (3, True, 10.5, 15.0),
]


@pytest.mark.parametrize("case, migrating, time, traffic", PAPER_PATHS)
def test_each_path_costs_what_the_paper_says(case: int, migrating: bool, time: float, traffic: float) -> None:
    trip = one_communication(case, migrating, Costs(), 0, "paper")
    assert (trip.time, trip.traffic) == pytest.approx((time, traffic))


def test_a_local_receiver_that_leaves_the_domain_costs_a_dereg_and_a_forward() -> None:
    # Not in the paper: the mail is stored in S, the receiver leaves for NEW; S forwards it once NEW's
    # DEREG arrives: t_ctl + t_ml + t_intra = 1 + 4 + 0.5, and C_mail more traffic.
    trip = one_communication(1, True, Costs(), 0, "local_forwards")
    assert (trip.time, trip.traffic) == pytest.approx((5.5, 9.0))
    # every other path is the same in both modes
    for case, migrating, time, traffic in PAPER_PATHS:
        if case != 1 or not migrating:
            other = one_communication(case, migrating, Costs(), 0, "local_forwards")
            assert (other.time, other.traffic) == pytest.approx((time, traffic))


@pytest.mark.parametrize("case, migrating, home, time, traffic", [
    (1, False, "apart", 0.5, 5.0), (1, True, "apart", 0.5, 5.0),
    (2, False, "apart", 8.5, 13.0), (3, False, "apart", 8.5, 13.0),    # S -> home -> R: two mails
    (2, True, "apart", 12.5, 17.0), (3, True, "apart", 12.5, 17.0),    # ... and R's forward
    (3, False, "sender", 4.5, 9.0), (3, False, "receiver", 4.5, 9.0),  # no triangle when the home is an end
])
def test_each_home_relay_path(case: int, migrating: bool, home: Home, time: float, traffic: float) -> None:
    trip = one_communication(case, migrating, Costs(), 0, "paper", "home_relay", home)
    assert (trip.time, trip.traffic) == pytest.approx((time, traffic))


def test_the_paper_scheme_needs_no_query_when_the_sender_is_the_home() -> None:
    trip = one_communication(3, False, Costs(), 0, "paper", "mailboxes", "sender")
    assert (trip.time, trip.traffic) == pytest.approx((4.5, 9.0))


def test_the_two_modes_differ_exactly_by_the_local_receivers_that_leave() -> None:
    """Both modes measure the same drawn communications; only the trials
    where a receiver in the sender's domain migrates differ, each by
    t_ctl + t_ml in time and C_mail in traffic: the whole of the old gap
    between the simulator and the paper's equations."""
    draws = draw_communications(0.5, 0.2, 0.4, 300, seed=11)
    leaving = sum(d.case == 1 and d.migrating for d in draws)
    assert 30 < leaving < 90  # 300 * 0.5 * 0.4 = 60 expected
    paper, local = measure(draws, mode="paper"), measure(draws, mode="local_forwards")
    assert local.time - paper.time == pytest.approx(leaving / 300 * 5.0)
    assert local.traffic - paper.traffic == pytest.approx(leaving / 300 * 4.0)


def test_draws_place_the_home() -> None:
    draws = draw_communications(0.2, 0.3, 0.1, 4000, seed=5, domains=4)
    remote = [d for d in draws if d.case != 1]
    at_sender = sum(d.home == "sender" for d in draws) / len(draws)
    at_receiver = sum(d.home == "receiver" for d in remote) / len(remote)
    assert at_sender == pytest.approx(0.25, abs=0.03) and at_receiver == pytest.approx(0.25, abs=0.03)
    assert all(d.home == "apart" for d in draw_communications(0.2, 0.3, 0.1, 200, seed=5))
    assert [d.case for d in draws[:50]] == [d.case for d in draw_communications(0.2, 0.3, 0.1, 50, seed=5)]
    with pytest.raises(ValueError):
        draw_communications(0.2, 0.3, 0.1, 10, seed=5, domains=2)
    with pytest.raises(ValueError):
        draw_communications(0.7, 0.4, 0.1, 10, seed=5)


def _trials_for(rho1: float, rho2: float, q: float, tolerance: float, sigmas: float) -> int:
    """Communications for which ``tolerance`` is ``sigmas`` standard errors of
    the simulated means, from the spread of the paper's own paths (C_ctl = 1,
    C_mail = 4, t_intra = 0.5)."""
    rho3 = 1.0 - rho1 - rho2
    paths = [(rho1, 0.5, 5.0), (rho2 * (1 - q), 4.5, 9.0), (rho2 * q, 8.5, 13.0),
             (rho3 * (1 - q), 6.5, 11.0), (rho3 * q, 10.5, 15.0)]
    worst = 0.0
    for index, model in ((1, expected_time(rho1, rho2, q)), (2, expected_traffic(rho1, rho2, q))):
        assert sum(p[0] * p[index] for p in paths) == pytest.approx(model)  # the paths are the equation's
        variance = sum(p[0] * (p[index] - model) ** 2 for p in paths)
        worst = max(worst, variance / model ** 2)
    return math.ceil(worst * (sigmas / tolerance) ** 2)


@pytest.mark.parametrize("rho1, rho2, q", [(0.1, 0.1, 0.3), (0.5, 0.2, 0.5), (0.8, 0.1, 0.3)])
def test_simulated_means_within_five_percent_of_equations_1_and_2(rho1: float, rho2: float, q: float,
                                                                  request: pytest.FixtureRequest) -> None:
    """A fresh seed each pytest run (the seed tests/conftest.py prints in the
    header), and enough communications that 5% is 4 standard errors of the
    mean: a correct simulator fails a check with probability about 6e-5."""
    seed = getattr(request.config.option, "hypothesis_seed", None) or 1
    trials = _trials_for(rho1, rho2, q, 0.05, 4.0)
    measured = simulate(rho1, rho2, q, trials, seed)
    replay = (f"replay: pytest --hypothesis-seed={seed} '{request.node.nodeid}', or "
              f"costmodel.simulate({rho1}, {rho2}, {q}, {trials}, {seed})")
    assert measured.time == pytest.approx(expected_time(rho1, rho2, q), rel=0.05), f"time {measured}; {replay}"
    assert measured.traffic == pytest.approx(expected_traffic(rho1, rho2, q), rel=0.05), f"traffic {measured}; {replay}"


def test_the_local_forwards_mode_misses_the_paper_by_far(pytestconfig: pytest.Config) -> None:
    """The negative control of the test above: the same check, in the mode
    that forwards local mail, fails (about +61% in time, +20% in traffic)."""
    seed = getattr(pytestconfig.option, "hypothesis_seed", None) or 1
    measured = simulate(0.8, 0.1, 0.3, 2000, seed, mode="local_forwards")
    replay = f"replay: costmodel.simulate(0.8, 0.1, 0.3, 2000, {seed}, mode='local_forwards')"
    assert measured.time > 1.3 * expected_time(0.8, 0.1, 0.3), replay
    assert measured.traffic > 1.1 * expected_traffic(0.8, 0.1, 0.3), replay
    assert measured.time == pytest.approx(expected_time_with_local_forwards(0.8, 0.1, 0.3), rel=0.15), replay
    assert measured.traffic == pytest.approx(expected_traffic_with_local_forwards(0.8, 0.1, 0.3), rel=0.1), replay


def test_home_relay_costs_more_on_the_same_draws(pytestconfig: pytest.Config) -> None:
    seed = getattr(pytestconfig.option, "hypothesis_seed", None) or 1
    ours, relay = compare_home_relay(0.1, 0.1, 0.3, trials=600, seed=seed)
    replay = f"replay: costmodel.compare_home_relay(0.1, 0.1, 0.3, 600, {seed})"
    # on every draw the relay costs at least as much; here 2 units and 2 KB more per communication
    assert relay.time - ours.time == pytest.approx(expected_time_home_relay(0.1, 0.3) - expected_time(0.1, 0.1, 0.3),
                                                   rel=0.1), replay
    assert relay.traffic > ours.traffic and relay.time > ours.time, replay
    assert relay.traffic == pytest.approx(expected_traffic_home_relay(0.1, 0.3), rel=0.05), replay


@pytest.mark.parametrize("friends", [0, 1, 3, 5])
def test_migration_cost_is_friends_plus_two_controls(friends: int) -> None:
    result = simulate_migration(friends)
    assert result["control_kb"] == migration_cost(friends)
    assert result.get("update", 0) == friends and result["dereg"] == 1 and result["home_update"] == 1
    relay = simulate_migration(friends, scheme="home_relay")
    assert relay["control_kb"] == migration_cost_home_relay() and relay.get("update", 0) == 0



@pytest.mark.parametrize("case, migrating, corner", [
    (1, False, (1.0, 0.0, 0.0)), (1, True, (1.0, 0.0, 1.0)),
    (2, False, (0.0, 1.0, 0.0)), (2, True, (0.0, 1.0, 1.0)),
    (3, False, (0.0, 0.0, 0.0)), (3, True, (0.0, 0.0, 1.0)),
])
def test_each_path_is_the_equations_at_a_corner_whatever_the_sizes(case: int, migrating: bool,
                                                                    corner: tuple[float, float, float]) -> None:
    # With the paper's sizes time and traffic differ by 4.5 on every path (1 KB takes one unit); other
    # sizes and bandwidths separate them, and each path must still be (1) and (2) at its own corner.
    costs = Costs(c_ctl=2.0, c_mail=3.0, ratio=5.0)
    trip = one_communication(case, migrating, costs, 0, "paper")
    assert trip.time == pytest.approx(expected_time(*corner, costs))
    assert trip.traffic == pytest.approx(expected_traffic(*corner, costs))

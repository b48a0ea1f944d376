"""Transaction codes and the claim table of single-TCD receive, without I/O.

The hypothesis test runs several members' claim tables against one total order
of CLAIM/RELEASE/ABANDON deliveries, with answers arriving in any order, view
changes that drop members, and checks that no two members ever both win a code."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgcs.errors import DecodeError, UsageError
from sgcs.services.handles import tcd as codes
from sgcs.services.handles.claims import ClaimTable, Loss


@pytest.mark.parametrize("code", [1, 59_999, 12])
def test_application_codes_are_accepted(code: int) -> None:
    assert codes.check_app_code(code) == code


@pytest.mark.parametrize("code", [0, -1, 60_000, 60_001, 65_535, 70_000, 1.0, "5", None])
def test_reserved_and_bad_codes_are_one_line_usage_errors(code: object) -> None:
    with pytest.raises(UsageError, match=r"1 to 59,999 \(60,000 and up are reserved") as info:
        codes.check_app_code(code)
    assert "\n" not in str(info.value)


def test_frames_round_trip_and_garbage_raises_only_decode_error() -> None:
    frame = codes.encode_frame(42, b"data", priority=7, target=9)
    assert codes.decode_frame_untrusted(frame) == codes.Frame(42, 7, 9, b"data")
    for bad in (b"", b"\xad\x01", b"\x00" * 20, frame[:1] + b"\x02" + frame[2:],
                codes.encode_frame(42, b"", priority=0)[:4] + b"\x0a" + frame[5:]):
        with pytest.raises(DecodeError):
            codes.decode_frame_untrusted(bad)


@given(st.binary(max_size=40))
def test_any_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    try:
        codes.decode_frame_untrusted(data)
    except DecodeError:
        pass


def test_a_late_joiner_with_an_empty_table_still_loses_to_the_holder() -> None:
    a, b, j = ClaimTable(1), ClaimTable(2), ClaimTable(3)
    a.start_claim(7, 100)
    for table in (a, b):
        table.on_claim(7, 1, 100, (1, 2))
    assert a.own_claim_delivered(7, 100, (1, 2)) is None
    a.on_answer(7, 100, 1, 0)
    won = a.on_answer(7, 100, 2, 0)
    assert won is not None and won.won
    # member 3 joins and claims 7: the holder objects, the joiner's own table does not
    j.start_claim(7, 200)
    answers = {m: t.on_claim(7, 3, 200, (1, 2, 3)) for m, t in ((1, a), (2, b), (3, j))}
    assert answers == {1: 1, 2: 1, 3: 0}
    j.own_claim_delivered(7, 200, (1, 2, 3))
    for member, holder in answers.items():
        result = j.on_answer(7, 200, member, holder)
    assert result is not None and not result.won and result.holders == {1}
    # the loser abandons; after the holder releases, a new claim wins
    for t in (a, b, j):
        t.on_release(7, 3, 200)
        t.on_release(7, 1, 100)
    assert all(7 not in t.holders for t in (a, b, j))


def test_a_failed_holder_frees_the_code_and_a_failed_answerer_is_not_awaited() -> None:
    a = ClaimTable(1)
    a.on_claim(5, 9, 1, (1, 9))
    assert a.on_claim(5, 1, 2, (1, 9)) == 9
    a.on_view((1, 2))  # 9 failed
    assert a.on_claim(5, 2, 3, (1, 2)) == 0
    a.start_claim(6, 4)
    a.on_claim(6, 1, 4, (1, 2))
    a.own_claim_delivered(6, 4, (1, 2))
    assert a.on_answer(6, 4, 1, 0) is None  # still waiting for 2
    (decided,) = a.on_view((1,))
    assert decided.won


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_at_most_one_winner_per_code_under_any_answer_order(data: st.DataObject) -> None:
    members = (1, 2, 3, 4)
    tables = {m: ClaimTable(m) for m in members}
    claims = data.draw(st.lists(st.tuples(st.sampled_from(members), st.sampled_from([10, 11])),
                                min_size=1, max_size=6), label="claims in total order")
    view = members
    answers: list[tuple[int, int, int, int, int]] = []  # (claimant, tcd, nonce, from, holder)
    for nonce, (claimant, tcd) in enumerate(claims, start=1):
        tables[claimant].start_claim(tcd, nonce)
    failed = data.draw(st.sets(st.sampled_from(members), max_size=1), label="failed member")
    fail_at = data.draw(st.integers(0, len(claims)), label="fails after this many claims")
    winners: dict[int, set[int]] = {}
    for index, (claimant, tcd) in enumerate(claims):
        nonce = index + 1
        if index == fail_at and failed:
            view = tuple(m for m in view if m not in failed)
            for m in view:
                for claim in tables[m].on_view(view):
                    if claim.won:
                        winners.setdefault(claim.tcd, set()).add(m)
        if claimant not in view:
            continue
        for m in view:
            holder = tables[m].on_claim(tcd, claimant, nonce, view)
            answers.append((claimant, tcd, nonce, m, holder))
        tables[claimant].own_claim_delivered(tcd, nonce, view)
    order = data.draw(st.permutations(answers), label="answer arrival order")
    for claimant, tcd, nonce, sender, holder in order:
        if claimant in view and sender in view:
            claim = tables[claimant].on_answer(tcd, nonce, sender, holder)
            if claim is not None and claim.won:
                winners.setdefault(tcd, set()).add(claimant)
    for tcd, won in winners.items():
        live = {m for m in won if m in view}
        assert len(live) <= 1, (tcd, won, claims)
    if view == members:  # no failure: the first claimant of each code wins, and only it
        for tcd in {t for _, t in claims}:
            first = next(c for c, t in claims if t == tcd)
            assert winners.get(tcd) == {first}, (tcd, winners, claims)


# ---------------------------------------------------------------- merges: the exchange of claim tables


def test_holdings_round_trip_and_garbage_raises_only_decode_error() -> None:
    body = codes.encode_holdings("v3.2-0a1b2c3d4e5f", [(100, 7, 1_700_000_000_000_000)], [(200, 9)])
    assert codes.decode_holdings_untrusted(body) == ("v3.2-0a1b2c3d4e5f", [(100, 7, 1_700_000_000_000_000)],
                                                     [(200, 9)])
    assert codes.decode_holdings_untrusted(codes.encode_holdings("v", [], [])) == ("v", [], [])
    for bad in (b"", body[:-1], body + b"\0", b"\x01\x00\x00\x00\x00\xff",
                codes.encode_holdings("v", [(60_001, 1, 1)], []), codes.encode_holdings("v", [], [(0, 1)])):
        with pytest.raises(DecodeError):
            codes.decode_holdings_untrusted(bad)
    with pytest.raises(UsageError, match="at most 255"):
        codes.encode_holdings("v" * 256, [], [])


@given(st.binary(max_size=60))
def test_any_bytes_decode_as_holdings_or_raise_decode_error(data: bytes) -> None:
    try:
        codes.decode_holdings_untrusted(data)
    except DecodeError:
        pass


def grant(table: ClaimTable, tcd: int, nonce: int, members: tuple[int, ...], at: int) -> None:
    """``table``'s member claims ``tcd`` in view ``members`` (every other member there agrees), and wins at ``at``."""
    table.start_claim(tcd, nonce)
    table.on_claim(tcd, table.me, nonce, members)
    table.own_claim_delivered(tcd, nonce, members)
    decided = None
    for member in members:
        decided = table.on_answer(tcd, nonce, member, 0) or decided
    assert decided is not None and decided.won
    table.granted(decided, at)


def exchange(tables: dict[int, ClaimTable], view_id: str, order: list[int] | None = None) -> dict[int, list[Loss]]:
    """Every member begins the exchange of ``view_id`` and delivers every report,
    in one total ``order``; returns each member's losses."""
    members = tuple(sorted(tables))
    reports = {m: t.begin_exchange(view_id, members) for m, t in tables.items()}
    losses: dict[int, list[Loss]] = {}
    for sender in order or list(members):
        held, pending = reports[sender]
        for m, t in tables.items():
            result = t.on_report(view_id, view_id, sender, list(held), pending)
            if result is not None:
                losses[m] = result
    assert set(losses) == set(tables), "every member completes the exchange at the last report"
    return losses


def test_the_earliest_grant_keeps_a_code_granted_on_both_sides_and_every_member_agrees() -> None:
    a, b, c = ClaimTable(1), ClaimTable(2), ClaimTable(3)
    grant(a, 100, 11, (1,), at=2_000)   # 1 alone
    for t in (b, c):                    # 2 and 3 together, 3 claims first
        t.on_view((2, 3))
    grant(c, 100, 33, (2, 3), at=1_000)
    b.on_claim(100, 3, 33, (2, 3))
    losses = exchange({1: a, 2: b, 3: c}, "merged", order=[3, 1, 2])
    assert losses == {1: [Loss(100, 11, 3)], 2: [], 3: []}
    assert a.holders == b.holders == c.holders == {100: (3, 33)}
    assert 100 not in a.mine and c.mine[100].nonce == 33
    assert all(t.reconciled_view == "merged" for t in (a, b, c))


def test_equal_grant_times_go_to_the_lowest_member_id() -> None:
    low, high = ClaimTable(5), ClaimTable(9)
    grant(high, 100, 1, (9,), at=777)
    grant(low, 100, 2, (5,), at=777)
    assert exchange({5: low, 9: high}, "v") == {5: [], 9: [Loss(100, 1, 5)]}
    assert low.holder(100) == high.holder(100) == 5


def test_reports_of_another_view_a_second_report_and_a_non_member_do_not_count() -> None:
    t = ClaimTable(1)
    t.begin_exchange("v2", (1, 2))
    assert t.on_report("v1", "v2", 2, [(100, 5, 1)], []) is None  # sent for an earlier view
    assert t.on_report("v2", "v3", 2, [(100, 5, 1)], []) is None  # delivered in another view
    assert t.on_report("v2", "v2", 7, [(100, 5, 1)], []) is None  # not a member
    assert t.on_report("v2", "v2", 2, [], []) is None             # counts; 1's is missing
    assert t.on_report("v2", "v2", 2, [(100, 5, 1)], []) is None  # a second report: ignored
    assert t.reconciled_view is None
    assert t.on_report("v2", "v2", 1, [], []) == []
    assert t.holder(100) is None and t.reconciled_view == "v2"


def test_a_code_released_before_the_exchange_ends_is_not_revived_by_its_report() -> None:
    a, b = ClaimTable(1), ClaimTable(2)
    grant(a, 100, 4, (1,), at=10)
    reports = {m: t.begin_exchange("v", (1, 2)) for m, t in ((1, a), (2, b))}
    for t in (a, b):
        t.on_report("v", "v", 1, list(reports[1][0]), reports[1][1])
    a.give_up(100, 4)
    for t in (a, b):
        t.on_release(100, 1, 4)  # delivered before 2's report
        assert t.on_report("v", "v", 2, list(reports[2][0]), reports[2][1]) == []
    assert a.holder(100) is None and b.holder(100) is None


def test_stale_records_go_and_claims_under_way_stay() -> None:
    t = ClaimTable(1)
    t.on_view((1, 2, 3))
    t.on_claim(100, 2, 20, (1, 2, 3))  # 2 took 100, then released it where we could not hear
    t.on_claim(200, 3, 30, (1, 2, 3))  # 3's claim of 200 is under way: 3 reports it
    t.begin_exchange("v", (1, 2, 3))
    t.on_claim(300, 2, 21, (1, 2, 3))  # a claim delivered in this view, after 2 sent its report
    for member, pending in ((1, []), (2, []), (3, [(200, 30)])):
        t.on_report("v", "v", member, [], pending)
    assert t.holders == {200: (3, 30), 300: (2, 21)}


def test_a_claim_put_to_a_view_without_some_new_member_starts_again() -> None:
    t = ClaimTable(1)
    t.start_claim(100, 5)
    t.on_claim(100, 1, 5, (1, 2))
    assert t.own_claim_delivered(100, 5, (1, 2)) is None  # waits for 2
    t.start_claim(200, 6)  # not delivered yet: it will be put to whatever view delivers it
    assert t.stale_claims((1, 2)) == [] and t.stale_claims((1,)) == []  # nobody new
    (stale,) = t.stale_claims((1, 2, 3))  # 3 was never asked
    assert (stale.tcd, stale.nonce) == (100, 5) and (100, 5) not in t.pending
    again = t.restart(stale, 8)
    assert t.pending == {(200, 6): t.pending[(200, 6)], (100, 8): again}
    assert t.on_answer(100, 5, 2, 0) is None  # a late answer to the old nonce: ignored
    t.on_claim(100, 1, 8, (1, 2, 3))
    t.own_claim_delivered(100, 8, (1, 2, 3))
    for member, answer in ((1, 0), (2, 0)):
        assert t.on_answer(100, 8, member, answer) is None
    refused = t.on_answer(100, 8, 3, 3)  # the newcomer holds it
    assert refused is not None and not refused.won and refused.holders == {3}


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_after_any_merge_each_code_has_one_holder_the_rule_names_everywhere(data: st.DataObject) -> None:
    members = list(range(1, data.draw(st.integers(2, 6), label="members") + 1))
    sides: dict[int, list[int]] = {}
    for m in members:
        sides.setdefault(data.draw(st.integers(0, 2), label=f"side of {m}"), []).append(m)
    tables = {m: ClaimTable(m) for m in members}
    granted: dict[int, list[tuple[int, int]]] = {}  # tcd -> [(at, member)]
    nonce = 0
    for side in sides.values():
        view = tuple(side)
        for t in (tables[m] for m in side):
            t.on_view(view)
        for tcd in data.draw(st.sets(st.sampled_from([100, 101, 102])), label=f"codes granted in {view}"):
            holder = data.draw(st.sampled_from(side), label="holder")
            at = data.draw(st.integers(1, 3), label="granted at")  # few values: ties happen
            nonce += 1
            grant(tables[holder], tcd, nonce, view, at)
            for m in side:
                if m != holder:
                    tables[m].on_claim(tcd, holder, nonce, view)
            granted.setdefault(tcd, []).append((at, holder))
    for t in tables.values():
        t.on_view(tuple(members))
    order = data.draw(st.permutations(members), label="reports in total order")
    losses = exchange(tables, "merged", list(order))
    for tcd, grants in granted.items():
        _, winner = min(grants)
        assert {tables[m].holder(tcd) for m in members} == {winner}
        assert [m for m in members if tcd in tables[m].mine] == [winner]
        assert sorted(m for m, lost in losses.items() if any(loss.tcd == tcd for loss in lost)) == \
            sorted(m for _, m in grants if m != winner)

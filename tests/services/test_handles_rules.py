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
from sgcs.services.handles.claims import ClaimTable


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

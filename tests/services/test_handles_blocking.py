"""The ADS handles' blocking facade: two modules driven from plain threads."""

from __future__ import annotations

import time

import pytest

import sgcs
from _net import private_multicast
from sgcs.services.handles import Data, ExclusiveLost, ExclusiveRefused
from sgcs.services.handles.blocking import attach

SECRET = b"blocking handles secret"


def test_blocking_modules_send_receive_and_refuse_a_second_exclusive_claim() -> None:
    net = private_multicast(beacon_interval=0.1)
    with attach(sgcs.Config(name="a", secret=SECRET, **net), "field") as a, \
            attach(sgcs.Config(name="b", secret=SECRET, **net), "field") as b:
        deadline = time.monotonic() + 20
        while len(a.members) < 2 or len(b.members) < 2:
            assert time.monotonic() < deadline, "the two modules never saw each other"
            time.sleep(0.02)
        inbox = b.receive(5)
        a.multicast(5).send(b"hello", priority=4)
        event = inbox.receive(timeout=10)
        assert isinstance(event, Data) and (event.data, event.priority, event.sender) == (b"hello", 4, a.me)
        assert inbox.receive(timeout=0.1) is None
        b.receive_exclusive(9)
        with pytest.raises(ExclusiveRefused, match=f"held by member {b.me}"):
            a.receive_exclusive(9)
        with pytest.raises(sgcs.UsageError, match="reserved"):
            a.multicast(60_000)
    with pytest.raises(sgcs.UsageError, match="detached"):
        a.multicast(5).send(b"late")


def test_a_blocking_newcomer_that_won_a_code_alone_gets_exclusive_lost_from_receive() -> None:
    net = private_multicast(beacon_interval=0.1)
    with attach(sgcs.Config(name="a", secret=SECRET, **net), "field") as a:
        a.receive_exclusive(9)
        with attach(sgcs.Config(name="b", secret=SECRET, **net), "field") as b:
            try:
                newcomer = b.receive_exclusive(9)  # usually granted: b is alone in its first view
            except ExclusiveRefused as refused:
                assert not isinstance(refused, ExclusiveLost)
                newcomer = None  # discovery was quicker: a objected
            deadline = time.monotonic() + 20
            while len(a.members) < 2 or len(b.members) < 2:
                assert time.monotonic() < deadline, "the two modules never saw each other"
                time.sleep(0.02)
            assert a.reconciled(timeout=20) and b.reconciled(timeout=20)
            assert a.holder(9) == b.holder(9) == a.me
            if newcomer is not None:
                with pytest.raises(ExclusiveLost, match=f"lost to member {a.me}"):
                    newcomer.receive(timeout=20)
                assert newcomer.lost is not None and newcomer.lost.holder == a.me

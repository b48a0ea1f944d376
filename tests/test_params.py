"""The protocol's parameters: ``Config`` declares each one, ``Params`` (what the
layers read) repeats them with the same defaults and derives the rest in one
place."""

from __future__ import annotations

import dataclasses

import pytest

from sgcs.config import Config
from sgcs.transport.framing import fragment_size
from sgcs.transport.params import Params

SECRET = b"params-test-secret"
NOT_PROTOCOL = {"name", "secret", "key_derivation", "encrypt", "node_id", "bind_host", "port", "multicast_group", "multicast_port",
                "multicast_ttl", "multicast_loop", "use_multicast", "peers", "app_queue"}
"""``Config`` fields that only the trio driver and the API read: the node's
identity, its sockets and its application queue."""


def test_every_protocol_field_of_config_is_a_field_of_params_with_its_default() -> None:
    params = {f.name: f for f in dataclasses.fields(Params)}
    for field in dataclasses.fields(Config):
        if field.name in NOT_PROTOCOL:
            assert field.name not in params
            continue
        assert field.name in params, f"Params lacks Config.{field.name}"
        assert params[field.name].default == field.default, field.name


def test_defaults_are_the_parameters_of_a_default_config() -> None:
    assert Params() == Params.of(Config(secret=SECRET))


def test_of_copies_every_protocol_field() -> None:
    config = Config(secret=SECRET, gossip_interval=0.25, view_timeout=3.0, rto_min=0.1, rto_max=2.0, fifo_acks=2,
                    leave_copies=3, heartbeat="pairs", suspect_min_rounds=5, push_budget=8)
    params = Params.of(config)
    for field in dataclasses.fields(Config):
        if field.name not in NOT_PROTOCOL:
            assert getattr(params, field.name) == getattr(config, field.name), field.name


@pytest.mark.parametrize("view_timeout, ack_interval, repeats", [(1.0, 0.1, 5), (0.3, 0.02, 3), (10.0, 1.0, 1)])
def test_derived_timers(view_timeout: float, ack_interval: float, repeats: int) -> None:
    p = Params.of(Config(secret=SECRET, view_timeout=view_timeout, ack_interval=ack_interval, view_repeats=repeats))
    assert p.takeover_timeout == 2 * view_timeout and p.cut_timeout == 2 * view_timeout
    assert p.view_repeat_interval == view_timeout / repeats
    assert p.reconsider_interval == view_timeout / 20 and p.verdict_wait == view_timeout / 4
    assert p.promise_retry == 3 * ack_interval


@pytest.mark.parametrize("members, floor, rounds", [(1, 3, 3), (2, 3, 3), (8, 3, 3), (9, 3, 4), (1000, 3, 10),
                                                    (8, 5, 5), (1000, 12, 12)])
def test_suspect_timeout(members: int, floor: int, rounds: int) -> None:
    p = Params(gossip_interval=0.05, suspect_factor=1.5, suspect_min_rounds=floor)
    assert p.suspect_rounds(members) == rounds
    assert p.suspect_timeout(members) == 1.5 * rounds * 0.05


def test_fragment_size_fits_one_datagram_with_the_fifo_acks() -> None:
    assert Params().fragment_size == fragment_size(1_400, 4) == 1_231
    assert Params(max_datagram=512, fifo_acks=16).fragment_size == 512 - 89 - 20 * 16
    assert Params(fragment_size=16).fragment_size == 16, "white-box tests may cut records small"
    assert Params(heartbeat="pairs").roster_heartbeats is False and Params().roster_heartbeats is True


@pytest.mark.parametrize("fields, expected", [
    ({"rto_min": 2.0, "rto_max": 1.0}, r"Config.rto_max \(1.0\) must be at least Config.rto_min \(2.0\)"),
    ({"nack_max_ranges": 65}, r"Config.nack_max_ranges must be in \[1, 64\]"),
    ({"fifo_acks": 0}, r"Config.fifo_acks must be in \[1, 16\]"),
])
def test_new_fields_are_validated(fields: dict[str, object], expected: str) -> None:
    from sgcs.errors import UsageError

    with pytest.raises(UsageError, match=expected):
        Config(secret=SECRET, **fields)  # type: ignore[arg-type]

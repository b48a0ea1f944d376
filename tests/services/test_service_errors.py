"""A user's exception inside a service's block comes out as itself, as it does
out of ``sgcs.open_node``: not wrapped in an ExceptionGroup by the service's
own tasks (``sgcs.services.tasks``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

import sgcs
from sgcs.services.handles import attach
from sgcs.services.queues import open_queue_manager
from sgcs.services.queues.replicated import open_replicated_queue

from _net import private_multicast

WAIT = 20.0


class Mine(Exception):
    pass


SERVICES: dict[str, Callable[[Any], Any]] = {
    "handles": lambda node: attach(node, "field"),
    "queues": lambda node: open_queue_manager(node, "a"),
    "replicated queue": lambda node: open_replicated_queue(node, "rq", replicas=1),
}


@pytest.mark.parametrize("service", sorted(SERVICES))
async def test_a_users_exception_comes_out_of_a_service_unwrapped(service: str) -> None:
    config = sgcs.Config(name="a", secret=b"service-errors-secret", **private_multicast(beacon_interval=0.1))
    with trio.fail_after(WAIT):
        with pytest.raises(Mine):
            async with sgcs.open_node(config) as node, SERVICES[service](node):
                raise Mine("the application's own error")

"""The background tasks of a service, around the user's block.

Each service runs a few trio tasks (receive, transmit, timers) for the
duration of an ``async with``. In a plain nursery, an exception from the
user's block comes out wrapped in an ``ExceptionGroup``, where
``sgcs.open_node`` lets it out as itself. ``background`` keeps that promise
for the services too: the user's exception is re-raised unchanged once the
tasks are gone; a task's own failure still comes out of the nursery.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio


@asynccontextmanager
async def background() -> AsyncIterator[trio.Nursery]:
    """A nursery for a service's tasks; the block's exception comes out as itself."""
    body_error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        try:
            yield nursery
        except GeneratorExit:
            raise
        except BaseException as exc:  # re-raised below, after the tasks are gone
            body_error = exc
            nursery.cancel_scope.cancel()
    if body_error is not None:
        raise body_error

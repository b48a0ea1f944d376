"""The end of a group's event stream, one exception in every API.

``GroupClosed`` ends ``receive`` under trio, under asyncio and in the blocking
facade alike. It subclasses ``trio.EndOfChannel``, so trio code that catches
that (and trio's own ``async for`` over a receive channel) keeps working, and
``sgcs.SgcsError``, so asyncio and blocking programs never need a trio type.
"""

from __future__ import annotations

import trio

from ..errors import SgcsError


class GroupClosed(SgcsError, trio.EndOfChannel):
    """The group's event stream ended: it was left, or its node closed.

    Not a misuse: the normal end of ``receive``; ``async for`` and ``for``
    over a group simply stop."""

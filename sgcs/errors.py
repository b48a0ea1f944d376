"""Exceptions that sgcs lets escape.

Only two kinds exist (docs/architecture.md):

* ``UsageError``: the local program misused the API or gave a bad value. The
  message says what to do, in one line.
* ``DecodeError``: raised only by ``decode_*_untrusted`` functions. The node
  catches it, counts it and traces a ``drop``; it never reaches the user.

Anything else is a bug.
"""

from __future__ import annotations


class SgcsError(Exception):
    """Base class of every exception sgcs raises on purpose."""


class UsageError(SgcsError, ValueError):
    """The local API was misused; the message says how to fix it."""


class DecodeError(SgcsError):
    """An untrusted datagram or body could not be decoded.

    ``reason`` is a short machine-friendly word (``"mac"``, ``"magic"``,
    ``"length"``...) used as the ``drop`` reason in statistics and traces.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class WouldBlock(SgcsError):
    """A non-blocking send found the flow-control window full.

    Not a misuse: wait (``await group.send(...)`` does) and send again once
    messages have become stable.
    """

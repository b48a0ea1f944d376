"""SIGTERM leaves the groups gracefully, as SIGINT (Ctrl-C) does.

``systemctl stop``, ``timeout`` and container runtimes stop a process with
SIGTERM, whose default action ends the process at once: its peers would see
it *fail* (after suspicion and confirmation, seconds) instead of *leave*
(a LEAVE datagram, milliseconds). While a node runs, sgcs therefore turns
SIGTERM into a graceful stop: the code inside ``open_node`` is cancelled (or,
under the blocking facade, gets ``SystemExit``), every joined group says
goodbye, and the process ends with status 143 (128 + SIGTERM), as the
default action reports.

Only a handler nobody else set is taken (the default one, in the main
thread), and it is given back when the node closes: an application with its
own SIGTERM handler keeps it.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

EXIT_STATUS = 128 + signal.SIGTERM
"""What a process stopped by SIGTERM reports, with or without sgcs."""

guest_runs = 0
"""trio runs as a guest of asyncio (``asyncio_host``): signals are asyncio's."""


def sigterm_free() -> bool:
    """Whether sgcs may take SIGTERM: in the main thread, with the default handler."""
    return guest_runs == 0 and threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def _stop(signum: int, frame: FrameType | None) -> None:
    sys.exit(EXIT_STATUS)


_holders = 0


def exit_on_sigterm() -> Callable[[], None] | None:
    """For code that runs in the main thread while sgcs runs elsewhere (the
    blocking facade): SIGTERM raises ``SystemExit(143)`` there, so ``with``
    blocks close their groups and nodes. Returns the function that gives the
    handler back once every node that took it is closed, or None when SIGTERM
    was not free (another handler, another thread)."""
    global _holders
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not _stop:
        if not sigterm_free():
            return None
        signal.signal(signal.SIGTERM, _stop)
    _holders += 1

    def restore() -> None:
        global _holders
        _holders -= 1
        if _holders == 0 and threading.current_thread() is threading.main_thread() \
                and signal.getsignal(signal.SIGTERM) is _stop:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    return restore

"""Mailboxes for migrating instances (the migrating-workflow paper): post offices per service
domain, source and active mailboxes, address books, friend domains, a
migration handshake, and exactly-once in-order pull delivery, on sgcs's
public API. See docs/mailboxes.md.

The pure state machine is :class:`PostOffice` (``postoffice.py``); the trio
shell is :func:`open_post_office` (``service.py``); ``blocking.py`` wraps it
for threads; ``costmodel.py`` holds the paper's equations and a
discrete-event check of them.
"""

from __future__ import annotations

from .messages import Mail, MIState, home_of, make_name
from .postoffice import PostOffice, Send, Settings

__all__ = ["Mail", "MIState", "PostOffice", "Send", "Settings", "home_of", "make_name"]

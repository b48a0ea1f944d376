"""sgcs: scalable group communication.

Processes join and leave named groups, multicast and unicast inside them, and
are told of every membership change as a new view. See README.md.
"""

from __future__ import annotations

from .config import Config, Order
from .errors import DecodeError, SgcsError, UsageError

__version__ = "0.1.0"

__all__ = ["Config", "DecodeError", "Order", "SgcsError", "UsageError", "__version__"]

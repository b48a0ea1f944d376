"""Content-based subscriptions and information flow graphs with catch-up
(after IBM's Gryphon), on sgcs's public API. See docs/flows.md.

The language and the pure pieces (schemas, parser, evaluator, graph, R1-R3
compiler, collapse and expand engines, the sans-I/O ``FlowEngine``) need
neither trio nor a network; ``open_flows`` (``service.py``) runs them on an
sgcs node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import wire
from .collapse import Collapse, State
from .compiler import CompiledPath, Matcher, Subscription, compile_subscription, event_paths
from .conflate import DeliveryQueue
from .engine import FlowEngine, FlowStatistics, Phase
from .expand import Expander, Expansion
from .graph import FlowGraph
from .rules import Select, Transform
from .schema import DEFAULT_FUNCTIONS, EventSchema, Functions, StateSchema
from .syntax import FlowError, parse_collapse, parse_expression, parse_transform

if TYPE_CHECKING:
    from .service import FlowService, FlowSubscription, NotPublished, open_flows

__all__ = ["Collapse", "CompiledPath", "DEFAULT_FUNCTIONS", "DeliveryQueue", "EventSchema", "Expander", "Expansion", "FlowEngine",
           "FlowError", "FlowGraph", "FlowService", "FlowStatistics", "FlowSubscription", "Functions", "Matcher",
           "NotPublished", "Phase", "Select", "State", "StateSchema", "Subscription", "Transform", "compile_subscription",
           "event_paths", "open_flows", "parse_collapse", "parse_expression", "parse_transform", "wire"]

_LAZY = {"FlowService": "service", "FlowSubscription": "service", "NotPublished": "service", "open_flows": "service"}


def __getattr__(name: str) -> Any:
    # The service imports trio and sgcs's API: only on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The ADS communication middleware on sgcs: transaction codes (TCD), attach
and detach, point-to-point, multicast, multi-TCD and single-TCD (exclusive)
handles (kept exclusive across merges of views: ``ExclusiveLost``), priority
sending, the three-stage survival signals (``SurvivalParams``) and the
maintenance state (``Module.restrict``/``lift``). See docs/handles.md."""

from .module import (Data, ExclusiveLost, ExclusiveRefused, Module, ModuleStatistics, NodeEvent, NodeInMaintenance,
                     ReceiveHandle, SendHandle, attach)
from .survival import State, SurvivalParams
from .tcd import APP_MAX, APP_MIN, PRIORITIES, RESERVED_MIN, check_app_code

__all__ = ["APP_MAX", "APP_MIN", "PRIORITIES", "RESERVED_MIN", "Data", "ExclusiveLost", "ExclusiveRefused", "Module",
           "ModuleStatistics", "NodeEvent", "NodeInMaintenance", "ReceiveHandle", "SendHandle", "State",
           "SurvivalParams", "attach", "check_app_code"]

"""The sizes of one ``benchmarks/claims.py`` invocation (``--quick`` or full),
in a module of their own: both ``claims.py`` and ``claims_sim.py`` read them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Plan:
    """Sizes of one invocation (``--quick`` or full)."""

    quick: bool
    lockstep_ns: tuple[int, ...]
    other_ns: tuple[int, ...]
    sweep: tuple[tuple[int, int, tuple[float, ...]], ...]
    """(N, rounds, factors) of the false-suspicion sweeps."""
    sim_fd: tuple[tuple[float, float], ...]
    """(suspect_factor, loss) of the whole-node cross-checks (claims-fd-64.toml);
    ``Config`` refuses a suspect_factor below 1, the harness takes any."""
    sim_fd_duration: float
    bimodal: tuple[tuple[str, float], ...]
    """(claims-bimodal-*.toml variant, sender-side loss)."""
    bimodal_duration: float | None


FULL = Plan(False, (16, 24, 100, 256, 1000, 1024, 3000, 4096, 8192), (16, 100, 1000),
            ((64, 300, (0.5, 0.75, 1.0, 1.5, 2.0)), (256, 150, (0.75, 1.0, 1.5, 2.0))),
            ((1.0, 0.0), (1.5, 0.0), (1.0, 0.05), (1.5, 0.05), (2.0, 0.05)), 30.0,
            (("gossip", 0.0), ("nack", 0.0), ("gossip", 0.3), ("nack", 0.3)), None)
QUICK = Plan(True, (16, 24, 100, 256, 1000), (16, 100),
             ((64, 150, (0.5, 0.75, 1.0, 1.5, 2.0)),),
             ((1.0, 0.0), (1.0, 0.05)), 15.0,
             (("gossip", 0.3), ("nack", 0.3)), 10.0)

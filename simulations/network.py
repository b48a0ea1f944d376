"""The simulated network: delay, loss, duplication and partitions.

Theory of operation
-------------------
Every datagram to every receiver independently

* crosses a partition or not: nodes in different components never hear each
  other (checked when the datagram is sent);
* is lost with probability ``loss``;
* otherwise arrives after a lognormal one-way delay,
  ``lognormvariate(ln(median), sigma)`` milliseconds, raised to ``min`` when
  shorter, so reordering arises from the delays alone;
* and, with probability ``duplicate``, arrives a second time after its own
  independent delay.

A multicast fan-out draws all of its receivers' fates in a few vectorised
numpy calls, which keeps the cost per receiver to one heap entry. Unicasts use
a ``random.Random`` because scalar numpy draws are slow. Every sending node
has its own two generators, derived from the scenario seed and its id alone
(never from Python's salted ``hash``), made when it first sends, and consumed
in the order of its own sends: a seed replays a run, and a node's draws do
not depend on what other nodes did in between, so a run split over worker
processes (``sgcs.sim.parallel``) draws exactly what one process draws.
"""

from __future__ import annotations

import hashlib
import math
import random

import numpy as np

from .scenario import NetworkSpec

_EMPTY = np.empty(0, dtype=np.int64)


def derive_seed(seed: int, purpose: str) -> int:
    """A 64-bit seed for one purpose, stable across processes and versions."""
    digest = hashlib.blake2b(f"{seed}:{purpose}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class Network:
    """Fates of datagrams; holds the partition in effect."""

    __slots__ = ("_mu", "_sigma", "least", "loss", "duplicate", "_seed", "_np", "_py", "component", "partitioned")

    def __init__(self, spec: NetworkSpec, seed: int, nodes: int) -> None:
        self._mu = math.log(spec.latency_median_ms / 1000.0)  # delays in seconds
        self._sigma = spec.latency_sigma
        self.least = spec.latency_min_ms / 1000.0
        """The shortest delay, seconds: a parallel run's lookahead."""
        self.loss = spec.loss
        self.duplicate = spec.duplicate
        self._seed = seed
        self._np: dict[int, np.random.Generator] = {}
        """Per sending node: the generator of its multicast fan-outs."""
        self._py: dict[int, random.Random] = {}
        """Per sending node: the generator of its unicasts."""
        self.component = np.zeros(nodes, dtype=np.int64)
        self.partitioned = False

    def _fan_out_rng(self, src: int) -> np.random.Generator:
        rng = self._np.get(src)
        if rng is None:
            rng = self._np[src] = np.random.Generator(np.random.PCG64(derive_seed(self._seed, f"network/fan-out/{src}")))
        return rng

    def _unicast_rng(self, src: int) -> random.Random:
        rng = self._py.get(src)
        if rng is None:
            rng = self._py[src] = random.Random(f"{self._seed}:network/unicast/{src}")
        return rng

    # ------------------------------------------------------------ partitions

    def partition(self, components: tuple[tuple[int, ...], ...]) -> None:
        """Nodes not listed keep component 0, i.e. form one more component."""
        self.component[:] = 0
        for number, members in enumerate(components, start=1):
            self.component[list(members)] = number
        self.partitioned = True

    def heal(self) -> None:
        self.component[:] = 0
        self.partitioned = False

    def connected(self, a: int, b: int) -> bool:
        return not self.partitioned or self.component[a] == self.component[b]

    # ------------------------------------------------------------ fates

    def fan_out(self, src: int, targets: np.ndarray) -> tuple[list[int], list[float], list[int]]:
        """Fates of one multicast from ``src`` to ``targets`` (``src`` skipped).

        Returns (receivers, delays in seconds, lost receivers); a receiver
        that gets a duplicate appears twice in ``receivers``.
        """
        targets = targets[targets != src]
        lost = _EMPTY
        if self.partitioned and len(targets):
            reachable = self.component[targets] == self.component[src]
            lost = targets[~reachable]
            targets = targets[reachable]
        rng = self._fan_out_rng(src)
        if self.loss > 0.0 and len(targets):
            dropped = rng.random(len(targets)) < self.loss
            lost = np.concatenate((lost, targets[dropped])) if len(lost) else targets[dropped]
            targets = targets[~dropped]
        delays = rng.lognormal(self._mu, self._sigma, len(targets))
        if self.duplicate > 0.0 and len(targets):
            twice = targets[rng.random(len(targets)) < self.duplicate]
            if len(twice):
                targets = np.concatenate((targets, twice))
                delays = np.concatenate((delays, rng.lognormal(self._mu, self._sigma, len(twice))))
        if self.least > 0.0:
            np.maximum(delays, self.least, out=delays)
        return targets.tolist(), delays.tolist(), lost.tolist()

    def unicast(self, src: int, dst: int) -> list[float]:
        """Delays of the copies of one datagram that arrive (0, 1 or 2)."""
        if not self.connected(src, dst):
            return []
        rng = self._unicast_rng(src)
        if self.loss > 0.0 and rng.random() < self.loss:
            return []
        delays = [rng.lognormvariate(self._mu, self._sigma)]
        if self.duplicate > 0.0 and rng.random() < self.duplicate:
            delays.append(rng.lognormvariate(self._mu, self._sigma))
        least = self.least
        return [d if d > least else least for d in delays] if least > 0.0 else delays

"""Decisions simulated from a hierarchical model with known variance components (the check of
`guardeval plan`: tests and benchmarks/plan_power.py; docs/estimators.md, Planning a design).

Per base i of interaction g: the reference condition blocks with probability q, the condition
with q + θ + u_g + v_i, u_g = ±a and v_i = ±b with probability ½ each (two-point, so the
probabilities stay in [0, 1] for the widest components a given q allows). Calls are independent
draws. Exactly: σ²_G = a², σ²_B = b², σ²_W = q(1 − q) + E[π_c(1 − π_c)]
= q(1 − q) + (q + θ)(1 − q − θ) − a² − b².
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from guardeval.estimators.planning.plan import Arrays


@dataclass(frozen=True)
class TwoPoint:
    q: float        # reference block rate
    theta: float    # the effect
    a: float        # between-interaction standard deviation
    b: float        # between-base standard deviation

    def __post_init__(self) -> None:
        lo = self.q + self.theta - self.a - self.b
        hi = self.q + self.theta + self.a + self.b
        if not (0 <= self.q <= 1 and lo >= -1e-12 and hi <= 1 + 1e-12):
            raise ValueError(f"{self}: block probabilities outside [0, 1]")

    @property
    def within(self) -> float:
        q, t = self.q, self.theta
        return q * (1 - q) + (q + t) * (1 - q - t) - self.a ** 2 - self.b ** 2

    def se(self, sizes: Sequence[int], reps: int) -> float:
        """The exact standard error of the base-equal mean for interactions of these sizes."""
        n = sum(sizes)
        kappa = sum(s * s for s in sizes) / n
        return math.sqrt((kappa * self.a ** 2 + self.b ** 2 + self.within / reps) / n)


def fit_q(theta: float, a: float, b: float, within: float) -> float:
    """The reference rate q in the feasible range whose σ²_W is closest to `within`
    (σ²_W is a concave quadratic in q, largest at q = (1 − θ)/2)."""
    lo, hi = max(0.0, a + b - theta), min(1.0, 1 - theta - a - b)
    if lo > hi:
        raise ValueError(f"no reference rate fits theta={theta}, a={a}, b={b}")
    grid = np.linspace(lo, hi, 20001)
    w = grid * (1 - grid) + (grid + theta) * (1 - grid - theta) - a * a - b * b
    # the largest q with the closest σ²_W below the peak keeps the rates away from 0
    return float(grid[int(np.argmin(np.abs(w - within)))])


def structure(sizes_by_domain: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(cluster of each base, domain of each cluster) for interactions of the given sizes."""
    cluster, domain = [], []
    g = 0
    for d, sizes in enumerate(sizes_by_domain):
        for s in sizes:
            cluster += [g] * s
            domain.append(d)
            g += 1
    return np.array(cluster, dtype=np.int64), np.array(domain, dtype=np.int64)


def simulate(model: TwoPoint, cluster: np.ndarray, cluster_domain: np.ndarray, reps: int,
             rng: np.random.Generator) -> Arrays:
    """One data set: `reps` calls of each condition per base."""
    n, g = len(cluster), len(cluster_domain)
    u = model.a * rng.choice((-1.0, 1.0), size=g)
    v = model.b * rng.choice((-1.0, 1.0), size=n)
    pc = np.clip(model.q + model.theta + u[cluster] + v, 0.0, 1.0)
    s_c = rng.binomial(reps, pc).astype(np.float64)
    s_k = rng.binomial(reps, model.q, size=n).astype(np.float64)
    r = np.full(n, float(reps))
    return Arrays(x=(s_c - s_k) / reps, s_c=s_c, n_c=r, s_k=s_k, n_k=r.copy(), cluster=cluster,
                  cluster_domain=cluster_domain)

"""The value-driven memory policy: which experiences a prompt shows, and how rewards credit them.

Retrieval for a stage builds a pool of K = lambda * N items by similarity to the task (the store's
BM25), then chooses N of them by that stage's value (Q1 drafting, Q2 refining), epsilon-greedily.
API knowledge is chosen deterministically by the names the task uses, not by value. After each
verification every item in the context (and the start point, when refining) moves toward the
reward: Q <- Q + alpha * w * (r - Q), where w is larger for items the answer says it used.

Rewards: drafting r1 = +1 if feasible else -1; refining r2 = -1 if infeasible, else
tanh(log b - log l) for best-so-far latency b and new latency l, normalised by the running mean and
deviation of past refine rewards (PopArt-style) and clipped to [-0.9, 1] (a correct but slower
variant always scores above a broken one).
"""

from __future__ import annotations

import math
import random
import re
from typing import Sequence

from store import Experience

# Kinds a prompt's memory section may draw from by value (API templates are chosen by name).
RETRIEVABLE_KINDS = ("draft_trace", "refine_trace", "human_edit", "best_practice", "success", "failure")
MIN_STATS_FOR_NORMALISING = 5


def pool_size(n: int, pool_factor: float, growth: float, iteration: int) -> int:
    """K = lambda * N with lambda growing from ``pool_factor`` by ``growth`` per iteration."""
    return max(n, round((pool_factor + growth * iteration) * n))


def choose_by_value(pool: Sequence[tuple[Experience, float]], n: int, stage: str, epsilon: float,
                    rng: random.Random) -> list[Experience]:
    """N items from ``pool`` (item, similarity): each slot takes the best remaining value (ties to the
    more similar item) or, with probability ``epsilon``, a random remaining one."""
    remaining = list(pool)
    chosen: list[Experience] = []
    while remaining and len(chosen) < n:
        if rng.random() < epsilon:
            pick = rng.randrange(len(remaining))
        else:
            pick = max(range(len(remaining)), key=lambda i: (remaining[i][0].q(stage), remaining[i][1]))
        chosen.append(remaining.pop(pick)[0])
    return chosen


def choose_start_point(points: Sequence[Experience], epsilon: float, rng: random.Random) -> Experience:
    """The refinement start point: highest Q2 (ties to the faster), or a random one with prob. epsilon."""
    if not points:
        raise ValueError("no start points")
    if rng.random() < epsilon:
        return points[rng.randrange(len(points))]
    return max(points, key=lambda e: (e.q2, -(latency_of(e) or math.inf)))


def latency_of(exp: Experience) -> float | None:
    return (exp.outcome or {}).get("latency_ms")


def draft_reward(feasible: bool) -> float:
    return 1.0 if feasible else -1.0


def refine_reward_raw(feasible: bool, best_ms: float | None, latency_ms: float | None) -> float:
    if not feasible or not latency_ms or latency_ms <= 0:
        return -1.0
    if not best_ms or best_ms <= 0:
        return 0.0
    return math.tanh(math.log(best_ms) - math.log(latency_ms))


FEASIBLE_FLOOR = -0.9  # a feasible variant, however slow, is always rewarded above an infeasible one (-1)


def normalise(raw: float, stats: dict) -> float:
    """PopArt-style: (raw - mean) / std over past feasible refine rewards, clipped to [-0.9, 1] so a
    slow but correct variant still scores above a broken one."""
    if stats.get("count", 0) < MIN_STATS_FOR_NORMALISING or not stats.get("std"):
        return max(FEASIBLE_FLOOR, raw)
    return max(FEASIBLE_FLOOR, min(1.0, (raw - stats["mean"]) / max(stats["std"], 1e-6)))


def credit_weights(context_ids: Sequence[str], cited: Sequence[str], adopted: float, ignored: float) -> dict[str, float]:
    """Adoption-aware credit: items the answer cites get ``adopted``, the others ``ignored``.
    With no citations at all (a model that ignores the instruction) everyone gets full credit."""
    cited_set = set(cited)
    if not cited_set & set(context_ids):
        return {i: 1.0 for i in context_ids}
    return {i: (adopted if i in cited_set else ignored) for i in context_ids}


def words_of(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)}


def select_api(items: Sequence[Experience], words: set[str], limit: int = 3) -> list[Experience]:
    """API knowledge by name: the contract first, then the items whose names the task or code uses."""
    contract = [e for e in items if "contract" in _names(e)]
    scored = []
    for e in items:
        if e in contract:
            continue
        hits = sum(1 for name in _names(e) if name in words or any(w.startswith(name) for w in words))
        if hits:
            scored.append((hits, e.title, e))
    scored.sort(key=lambda t: (-t[0], t[1]))
    return contract[:1] + [e for _, _, e in scored[:limit]]


def _names(exp: Experience) -> list[str]:
    return [n.strip().lower() for n in exp.extra.get("names", []) if n.strip()]

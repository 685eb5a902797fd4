"""The value-driven memory policy: which experiences a prompt shows, and how rewards credit them.

Retrieval for a stage builds a pool of K = lambda * N items by relevance to the task (``relevance_pool``: what
the kernels are, ``core.kinship``: family, regime, dtype, shared traced ops; the store's BM25 finds the
candidates and breaks ties), then chooses N of them by that stage's value (Q1 drafting, Q2 refining),
epsilon-greedily.
API knowledge is chosen deterministically by the names the task uses, not by value. After each
verification every item in the context (and the start point, when refining) moves toward the
reward: Q <- Q + alpha * w * (r - Q), where w is larger for items the answer says it used.

Rewards: drafting r1 = +1 if feasible else -1. Refining r2 = -1 if infeasible; else, with g the
gain over the task's best measured in the same timing window (median of the best / median of the
candidate), r2 = 0 unless g's verdict (``verifier.verdict``) is "faster" or "slower" ("same speed",
a "noisy" window too disturbed to judge, an "implausible" kernel: no reward, never a new best), else
tanh(log g) / s clipped to
[-0.9, 1], where s is the root mean square of past significant raw gains (no mean subtracted, so
the sign of every reward is the sign of its gain: an improvement scores above zero however large
the one before it was, a regression below, noise zero, a failure lowest).

Start points: the best is always among them; ranking is by Q2, epsilon-greedily, except that a
variant with fewer than two Q2 samples (a feasible variant's own reward is its first sample) never
outranks the best: one measurement of a variant slower than its parent cannot displace the best.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from typing import Any

from core.attempts import outcome_of
from core.kinship import KernelKind, kind_of_signature, relevance
from store import Experience
from verifier import FASTER, JUDGED, Outcome, judge_unpaired, speed_note, speed_reason, speed_word
from verifier import UNJUDGED as UNJUDGED  # the workbench reads the verdict's words from here (evotui -> core)
from verifier import speed_words as speed_words

# verifier.verdict's words, never the workbench's own
verdict_word = speed_word
verdict_note = speed_note

# Kinds a prompt's memory section may draw from by value (API templates are chosen by name).
RETRIEVABLE_KINDS = ("draft_trace", "refine_trace", "human_edit", "best_practice", "success", "failure")


def pool_size(n: int, pool_factor: float, growth: float, iteration: int) -> int:
    """K = lambda * N with lambda growing from ``pool_factor`` by ``growth`` per iteration."""
    return max(n, round((pool_factor + growth * iteration) * n))


ATTEMPT_KINDS = ("draft_trace", "refine_trace", "human_edit")
POOL_PER_TASK = 2     # items of one other task a pool holds at most: its closest kernels, not its whole history
# Words a knowledge item's names must share with a task of each family to be shown to it.
FAMILY_NAMES = {
    "gemm": {"gemm", "matmul", "bmm", "linear", "matvec", "conv", "conv2d", "blocking", "tiling"},
    "normalization": {"norm", "layer_norm", "rms_norm", "group_norm", "softmax", "log_softmax", "normalization"},
    "reduction": {"reduction", "sum", "mean", "max", "min", "argmax", "argmin", "pool", "loss"},
    "scan": {"scan", "cumsum", "cumprod", "prefix"},
    "pointwise": {"elementwise", "activation", "simd", "pointwise"},
    "data_movement": {"copy", "transpose", "gather", "layout"},
}


def item_relevance(exp: Experience, kind: KernelKind, words: set[str] | frozenset[str] = frozenset(),
                   best: bool = False) -> float:
    """How much an item from memory bears on a task of ``kind`` (0: not shown at all). An attempt of another
    task: by ``core.kinship.relevance`` of the two kernels, 1 more for working code (2 for that task's best,
    ``best``); a failed one only as a lesson of the same family, never one refused at the format or anti-hack
    gate (no code; the refusal is a rule of its own). Knowledge: when its names meet the family's words or the
    task's (``words``)."""
    if exp.kind in ATTEMPT_KINDS:
        out = outcome_of(exp)
        if not out.verified or out.failed_gate in ("format", "anti_hack"):
            return 0.0
        item = kind_of_signature(exp.signature)
        score = relevance(item, kind)
        if score <= 0 or item is None:
            return 0.0
        if not out.feasible:
            return score - 1.0 if item.family == kind.family else 0.0
        return score + (2.0 if best else 1.0)
    names = {n.strip().lower() for n in (exp.extra or {}).get("names", []) if n.strip()}
    hits = len(names & (FAMILY_NAMES.get(kind.family, set()) | set(kind.ops) | set(words)))
    return 1.0 + 0.5 * hits if hits else 0.0


def relevance_pool(candidates: Sequence[tuple[Experience, float]], kind: KernelKind, k: int,
                   words: set[str] | frozenset[str] = frozenset(), bests: set[str] | frozenset[str] = frozenset(),
                   per_task: int = POOL_PER_TASK, uncited_limit: int = 0) -> list[tuple[Experience, float]]:
    """The pool of K items retrieval chooses from by value: ``candidates`` (item, lexical similarity) ranked by
    ``item_relevance`` to the task's ``kind`` (then similarity), unrelated items and items ``passed_over``
    (shown ``uncited_limit`` times, never cited) left out, at most ``per_task`` from one other task. Returns
    (item, relevance); the pool may hold fewer than K, never filler."""
    scored = []
    for exp, similarity in candidates:
        if passed_over(exp, uncited_limit):
            continue
        r = item_relevance(exp, kind, words, exp.id in bests)
        if r > 0:
            scored.append((r, similarity, exp))
    scored.sort(key=lambda t: (-t[0], -t[1]))
    pool: list[tuple[Experience, float]] = []
    taken: dict[str, int] = {}
    for r, _similarity, exp in scored:
        if exp.kind in ATTEMPT_KINDS and taken.get(exp.task_id, 0) >= per_task:
            continue
        taken[exp.task_id] = taken.get(exp.task_id, 0) + 1
        pool.append((exp, r))
        if len(pool) >= k:
            break
    return pool


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


MIN_START_SAMPLES = 2      # Q2 samples a variant needs before it may outrank the best on Q2


def start_rank(exp: Experience, best: Experience | None) -> tuple[float, bool, float]:
    """The key start points are ranked by: Q2 (capped at the best's while the variant has fewer than
    ``MIN_START_SAMPLES`` samples), then being the best, then speed."""
    is_best = best is not None and exp.id == best.id
    q = exp.q2
    if best is not None and not is_best and exp.n2 < MIN_START_SAMPLES:
        q = min(q, best.q2)
    return (q, is_best, -(latency_of(exp) or math.inf))


MIN_LEFT_TO_EXPLORE = 3   # calls a task must have left (this one included) for a start point to be explored


def choose_start_point(points: Sequence[Experience], epsilon: float, rng: random.Random,
                       best: Experience | None = None, left: int | None = None) -> Experience:
    """The refinement start point from P(x) (``points``, with the best always among them): the
    highest ``start_rank``, or a random one with probability epsilon while the task has at least
    ``MIN_LEFT_TO_EXPLORE`` calls ``left`` (this one included): a detour from a point that is not the best
    pays only when a later call can follow it up, and with 4 calls per task two of three refinements
    started from such a point."""
    points = list(points)
    if best is not None and all(p.id != best.id for p in points):
        points.append(best)
    if not points:
        raise ValueError("no start points")
    if (left is None or left >= MIN_LEFT_TO_EXPLORE) and rng.random() < epsilon:
        return points[rng.randrange(len(points))]
    return max(points, key=lambda e: start_rank(e, best))


def latency_of(exp: Experience) -> float | None:
    return outcome_of(exp).latency_ms


def draft_reward(feasible: bool) -> float:
    return 1.0 if feasible else -1.0


def gain_over_best(outcome: Outcome, best_outcome: Outcome | None) -> tuple[float | None, str]:
    """(gain, verdict) of a feasible attempt over the task's best: the paired figures of its own
    timing window when the best was timed beside it (``paired``), else the ratio of the two speedups over
    the reference (each from its own window) judged by ``verifier.verdict.judge_unpaired``; (None, "")
    with nothing to compare. A window that judged nothing ("noisy", "implausible") stays so: reward 0,
    never a new best (``refine_reward_raw``, ``is_new_best``)."""
    if paired(outcome):
        return float(outcome.gain or 0.0), outcome.vs_best
    mine, theirs = outcome.speedup, best_outcome.speedup if best_outcome is not None else None
    if not mine or not theirs:
        return None, ""
    theirs_verdict = best_outcome.vs_reference if best_outcome is not None else ""
    return mine / theirs, judge_unpaired(mine, theirs, outcome.vs_reference, theirs_verdict)


def paired(outcome: Outcome) -> bool:
    """Whether the best was timed beside the attempt, in its window (a paired gain and its verdict)."""
    return bool(outcome.vs_best and outcome.gain)


def refine_reward_raw(feasible: bool, gain: float | None, verdict: str) -> float:
    """-1 if infeasible; 0 inside the noise (or with nothing to compare); else tanh(log gain)."""
    if not feasible:
        return -1.0
    if not gain or gain <= 0 or verdict not in JUDGED:
        return 0.0
    return math.tanh(math.log(gain))


FEASIBLE_FLOOR = -0.9  # a feasible variant, however slow, is always rewarded above an infeasible one (-1)
MIN_STATS_FOR_SCALING = 5
MIN_SCALE = 0.05       # never divide by less: a run of tiny gains does not blow every reward up to 1


def scale(raw: float, stats: dict[str, Any]) -> float:
    """Scale a feasible raw reward by the root mean square of past significant raws (``stats``:
    count, mean, var over them), without subtracting the mean: the sign never changes, noise (0)
    stays 0, and the result is clipped to [-0.9, 1] so a slow but correct variant still scores above
    a broken one."""
    if raw <= -1.0 or raw == 0.0:
        return raw
    if stats.get("count", 0) < MIN_STATS_FOR_SCALING:
        return max(FEASIBLE_FLOOR, min(1.0, raw))
    rms = math.sqrt(max(stats.get("var", 0.0), 0.0) + stats.get("mean", 0.0) ** 2)
    return max(FEASIBLE_FLOOR, min(1.0, raw / max(rms, MIN_SCALE)))


def is_new_best(feasible: bool, has_best: bool, verdict: str) -> bool:
    """A feasible attempt is the new best when there is none yet (whatever its window said: a refine
    needs a start), or when it is significantly faster: never on "same" or "noisy"."""
    return feasible and (not has_best or verdict == FASTER)


def credit_weights(context_ids: Sequence[str], cited: Sequence[str], adopted: float,
                   ignored: float) -> dict[str, float]:
    """Adoption-aware credit: items the answer cites get ``adopted``, the others ``ignored``, also when the
    answer cites none of them ("MEMORY USED: none", or no line at all). Giving every item full credit then
    let an item earn value by sitting uncited in prompts that succeeded: a matmul's failed draft (reward -1)
    reached Q +0.09 after 11 retrievals in the loopback run, where 22 of 24 answers cited nothing."""
    cited_set = set(cited)
    return {i: (adopted if i in cited_set else ignored) for i in context_ids}


def passed_over(exp: Experience, limit: int) -> bool:
    """Whether an item was shown ``limit`` times or more (over every task's prompts) and never cited: it leaves
    the pool, whatever value it has, for items not yet tried."""
    return limit > 0 and sum(exp.retrieved_by.values()) >= limit and not exp.cited_by


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


# A person's save that fails these gates is a slip of the keyboard (a typo, a file not yet written),
# not an experiment: it says nothing about the idea being tried.
SLIP_GATES = ("format", "build")


def is_slip(failed_gate: str | None) -> bool:
    """Whether a hand edit that failed at ``failed_gate`` is a typo rather than an experiment: it is
    shown and logged, but moves no value and is not the parent of the next save (the next save's
    parent stays the last edit that built). A person saves half-typed code many times a day; counting
    each as a failed refinement pulled a good kernel's Q2 down and made the tree one level deeper per save."""
    return failed_gate in SLIP_GATES


PROBE_MARK = "evokernel: probe"
"""A person marks a save as a probe by writing this anywhere in its files, in a comment (``// evokernel: probe``,
``# evokernel: probe``): a check of the verifier or of an idea (a copy without the arithmetic, a deliberately
wrong tail) that is verified and recorded, but teaches nothing: no reward, no value moved, never the parent
of a later save, a start point or the best. Without the mark a failed save is an experiment like the model's
(#51: a tuner's eleven deliberately broken saves had pulled 10_relu's best to Q2 -0.21)."""


def is_probe(files: dict[str, str]) -> bool:
    """Whether a person's save carries the probe mark (``PROBE_MARK``) in any of its files."""
    return any(PROBE_MARK in text for text in files.values())


def reward_reason(stage: str, feasible: bool, vs_best: str, *, slip: bool = False, has_gain: bool = True,
                  gain_ci: list[float] | None = None, paired: bool = True, ours: bool = False,
                  probe: bool = False) -> str:
    """Why an attempt's reward is what it is, in a few words after "reward r: " (the verdict lines of
    the workbench and ``evokernel run``): "a correct draft", "the same speed as the best", "faster than
    the best", "too noisy to judge against the best: measure again", "a typo, not an experiment"...
    The verdict against the best (``vs_best``, with its interval ``gain_ci``; ``paired`` False when it was
    judged from two windows' speedups) is said by ``verifier.verdict.reason``, the rule every surface
    uses. The engine says it once, with the reward (``AttemptRecorded.reason``); screens show that."""
    if slip:
        return "a typo, not an experiment (no value moved)"
    if probe:
        return f"a probe ({PROBE_MARK} in its files): recorded, teaches nothing (no value moved)"
    if ours:
        return "not judged: the tool failed, or could not fully check it (no value moved)"
    if not feasible:
        return "a failed draft" if stage == "draft" else "a failed refinement"
    if stage == "draft":
        return "a correct draft"
    if not has_gain or not vs_best:
        return "no best was timed beside it"
    return speed_reason(vs_best, gain_ci, paired=paired)

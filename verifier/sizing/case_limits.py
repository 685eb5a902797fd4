"""What a multi-case task's cases may take: their inputs within the cases' memory budget in all
(``fit_cases``, ``fit_case_indices``: the largest shrink, a case still over it at its smallest sizes is
dropped) and one call of one case within its time limit (``case_cap_ms``)."""

from __future__ import annotations

from typing import Any

from verifier.cases import case_bytes
from verifier.sizing.limits import CASE_CAP_MS, CASES_BYTES_BUDGET, CASES_TIME_MS
from verifier.sizing.scaling import scale_cases


def case_cap_ms(cases: int) -> float:
    """The time limit of one call of one case of a task with ``cases`` cases (see CASE_CAP_MS)."""
    return min(CASE_CAP_MS, CASES_TIME_MS / max(1, cases))


def fit_cases(cases: tuple[dict[str, Any], ...], budget: int = CASES_BYTES_BUDGET,
              keep: frozenset[int] = frozenset()) -> tuple[tuple[dict[str, Any], ...], list[str]]:
    """The cases brought within ``budget`` bytes of inputs in all, and notes on what changed: the largest
    cases shrink (each to the same cap, every extent scaled alike, its constraints kept as scaling keeps
    them), smaller ones stay as written; a case still over its share at its smallest sizes is dropped,
    unless it is the last one. Cases already within the budget come back unchanged. The cases indexed
    by ``keep`` are never changed (their reference fails at other sizes) but count against the budget.
    (:func:`fit_case_indices` says which case each one left is.)"""
    placed, notes = fit_case_indices(cases, budget, keep)
    return tuple(c for _, c in placed), notes


def fit_case_indices(cases: tuple[dict[str, Any], ...], budget: int = CASES_BYTES_BUDGET,
                     keep: frozenset[int] = frozenset()) -> tuple[tuple[tuple[int, dict[str, Any]], ...], list[str]]:
    """:func:`fit_cases`, each case left paired with its index in ``cases`` (in their order): a case is
    known by its index, never by its place among those left once one is dropped. The notes name cases by
    their index in ``cases`` too."""
    if keep:
        kept = sum(case_bytes(cases[k]) for k in keep if k < len(cases))
        rest = [k for k in range(len(cases)) if k not in keep]
        fitted, notes = _fit([cases[k] for k in rest], rest, max(0, budget - kept)) if rest else ((), [])
        placed = {k: cases[k] for k in keep if 0 <= k < len(cases)} | dict(fitted)
        return tuple(sorted(placed.items(), key=lambda kc: kc[0])), notes
    return _fit(list(cases), list(range(len(cases))), budget)


def _fit(cases: list[dict[str, Any]], ids: list[int],
         budget: int) -> tuple[tuple[tuple[int, dict[str, Any]], ...], list[str]]:
    """:func:`fit_case_indices` without cases to keep: ``ids[k]`` is the index of ``cases[k]``."""
    sizes = [case_bytes(c) for c in cases]
    if not cases or sum(sizes) <= budget:
        return tuple(zip(ids, cases)), []
    # the largest cap that keeps every case at or below it within the budget
    lo, hi = 0, max(sizes)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if sum(min(b, mid) for b in sizes) <= budget else (lo, mid)
    cap = lo
    out: list[tuple[int, dict[str, Any]]] = []
    shrunk, dropped = 0, []
    for k, case, b in zip(ids, cases, sizes):
        if b <= cap:
            out.append((k, case))
            continue
        a, z = 1e-4, 1.0  # the largest factor whose case fits the cap
        for _ in range(40):
            mid = (a * z) ** 0.5
            a, z = (mid, z) if case_bytes(scale_cases((case,), mid)[0]) <= cap else (a, mid)
        small = scale_cases((case,), a)[0]
        if case_bytes(small) <= cap:
            out.append((k, small))
            shrunk += 1
        else:
            dropped.append(k)
    if not out:  # every case over its share at its smallest: keep the smallest one, at its smallest sizes
        j = min(range(len(cases)), key=lambda i: case_bytes(scale_cases((cases[i],), 1e-4)[0]))
        out, dropped = [(ids[j], scale_cases((cases[j],), 1e-4)[0])], [i for i in dropped if i != ids[j]]
        shrunk = 1
    notes = [f"{shrunk} of {len(cases)} cases shrunk to fit {budget / 2**20:.0f} MiB of inputs in all "
             f"(largest {max(sizes) / 2**20:.1f} MiB as written; a verification keeps the reference's results "
             "of every trial of every case)"] if shrunk else []
    if dropped:
        # by the case's own number (its place in the case file), else its index in the task's cases plus one
        numbers = ", ".join(f"#{cases[ids.index(k)].get('number', k + 1)}" for k in dropped)
        notes.append(f"dropped {len(dropped)} case{'s' * (len(dropped) > 1)} ({numbers}) "
                     "still over the budget at their smallest sizes")
    return tuple(out), notes

"""Memory browsing for the CLI and the TUI (stats, list, show, export and import as plain data), a
task's own history for its prompts, and the consolidation of items adopted across operators into
resident rules.

Each function takes the path of a memory (``<workspace>/.evokernel/memory.lmdb``), opens it for as
long as the call lasts (read-only unless it writes) and returns dicts and lists that print as JSON.
A workspace without a memory raises ``store.errors.StoreNotFound`` with a one-line message.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from core.attempts import ATTEMPT_KINDS, NOT_JUDGED, attempt_numbers, outcome_of
from store import Experience, Store, StoreError
from store.experiences import FILTERS, SORTS
from store.protocol import Memory
from store.records import KINDS, SOURCES

STAGES = ("draft", "refine")
__all__ = ["KINDS", "SOURCES", "SORTS", "STAGES", "consolidate_rules", "decisions", "earned", "export_memory", "family",
           "import_memory",
           "is_refusal", "learn_refusal", "refusal_words",
           "list_experiences", "memory_stats", "numbered_summaries", "resident_rules", "show_experience",
           "successful_adopters", "summary", "task_history", "whole_sentences"]


def summary(exp: Experience, number: int | None = None) -> dict[str, Any]:
    """The one-line view of an experience: identity (``number``: its ``#n`` among its task's attempts,
    None for knowledge), filters, values and the outcome's headline."""
    outcome = outcome_of(exp)
    return {
        "id": exp.id, "number": number, "task": exp.task_id, "kind": exp.kind, "stage": exp.stage,
        "backend": exp.backend,
        "source": exp.source, "title": exp.title, "reward": exp.reward, "q1": exp.q1, "q2": exp.q2,
        "n1": exp.n1, "n2": exp.n2, "adoptions": exp.adoptions, "created_at": exp.created_at,
        "parent_id": exp.parent_id, "model": exp.model, "feasible": outcome.feasible if outcome.verified else None,
        "failed_gate": outcome.failed_gate, "latency_ms": outcome.latency_ms, "speedup": outcome.speedup,
        "vs_reference": outcome.vs_reference, "vs_best": outcome.vs_best,   # "noisy": the speedup judges nothing
    }


def earned(exp: Experience) -> str:
    """How an item's value was earned, in one line for the memory browser and ``memory show``: how often it was
    shown and cited (by which tasks), and the rewards behind its values, each marked cited (w = 1) or not (with
    its weight): "shown 9 times (relu 4, gelu 5), cited 2 (relu 2); Q1 from +1 cited, +1 cited, -1 uncited w 0"."""
    def by_task(counts: dict[str, int]) -> str:
        return ", ".join(f"{t} {n}" for t, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    shown, cited = sum(exp.retrieved_by.values()), sum(exp.cited_by.values())
    said = [f"shown {shown} time{'s' if shown != 1 else ''}" + (f" ({by_task(exp.retrieved_by)})" if shown else ""),
            f"cited {cited}" + (f" ({by_task(exp.cited_by)})" if cited else "")]
    for stage, name in (("draft", "Q1"), ("refine", "Q2")):
        rewards = []
        for h in exp.q_history:
            if h.get("stage") != stage or h.get("reward") is None:
                continue
            how = "" if "cited" not in h else " cited" if h["cited"] else f" uncited w {float(h.get('w', 0)):g}"
            rewards.append(f"{float(h['reward']):+.2f}{how}")
        if rewards:
            said.append(f"{name} from " + ", ".join(rewards[-8:]) + (" ..." if len(rewards) > 8 else ""))
    return "; ".join(said)


def numbered_summaries(store: Store, exps: list[Experience]) -> list[dict[str, Any]]:
    """``summary`` of each of ``exps``, the attempts numbered as in their task's attempt tree."""
    numbers = attempt_numbers(store, {e.task_id for e in exps if e.kind in ATTEMPT_KINDS})
    return [summary(e, numbers.get(e.id)) for e in exps]


def family(store: Store, exp: Experience) -> tuple[int | None, dict[str, Any] | None, list[dict[str, Any]]]:
    """``exp``'s own attempt number, its parent's summary (None without one) and its children's, oldest
    first, each numbered as in the attempt tree."""
    parent = store.get(exp.parent_id) if exp.parent_id else None
    numbered = numbered_summaries(store, [exp, *([parent] if parent else []), *store.children(exp.id)])
    return numbered[0]["number"], numbered[1] if parent else None, numbered[2 if parent else 1:]


def decisions(store: Memory, exp: Experience) -> list[tuple[str, str]]:
    """What was decided about an attempt, and why, one line each, for the memory browser and ``memory show``
    (#51): why its parent is its parent, why its reward is what it is, whose values it moved and by how much,
    whether it became the best, whether a later save may descend from it; and, for any item, which attempts'
    rewards moved its own values. Read from what the engine kept with it (``extra``: reason, lineage, moved,
    new_best, probe, slip, not_judged) and the values' history (``by``); an attempt stored before #51 says less."""
    extra = exp.extra or {}
    numbers = attempt_numbers(store, {exp.task_id, *(str(h.get("task")) for h in exp.q_history if h.get("task"))})

    def named(exp_id: str | None) -> str:
        return f"#{numbers[exp_id]}" if exp_id in numbers else (exp_id or "?")[:10]

    said: list[tuple[str, str]] = []
    if exp.kind in ATTEMPT_KINDS:
        if extra.get("lineage"):
            said.append(("parent", str(extra["lineage"])))
        elif exp.parent_id:
            said.append(("parent", f"{named(exp.parent_id)}: "
                         + ("the start point the model was shown" if exp.source == "llm" else
                            "the last working version (kept before lineage followed the code)")))
        else:
            said.append(("parent", "none: a draft from nothing the memory holds"))
        if extra.get("reason"):
            said.append(("reward", f"{'–' if exp.reward is None else f'{exp.reward:+.2f}'}: {extra['reason']}"))
        moved = extra.get("moved")
        if moved:
            said.append(("moved", "; ".join(
                f"{'#' + str(m['number']) if m.get('number') else str(m.get('id', '?'))[:10]}'s "
                f"{'Q1' if m.get('stage') == 'draft' else 'Q2'} {float(m['before']):+.2f} -> {float(m['after']):+.2f}"
                for m in moved[:6]) + (" ..." if len(moved) > 6 else "")))
        elif "moved" in extra or extra.get("probe") or extra.get("slip") or extra.get("not_judged"):
            said.append(("moved", "no value: " + ("a probe teaches nothing" if extra.get("probe") else
                                                  "a typo is not an experiment" if extra.get("slip") else
                                                  "the tool failed, not the kernel" if extra.get("not_judged") else
                                                  "nothing was credited")))
        out = outcome_of(exp) if exp.outcome else None
        if "new_best" in extra:
            said.append(("best", "it became the task's best" if extra["new_best"] else
                         "not the best: " + ("a probe is never the best" if extra.get("probe") else
                                             "not feasible" if out is not None and not out.feasible else
                                             "not significantly faster than the best in one window")))
        may = (out is not None and (g := out.gate_or_none("correctness")) is not None and g.passed
               and not extra.get("probe") and not extra.get("slip") and exp.kind != NOT_JUDGED)
        said.append(("later saves", "may descend from it (it passed correctness)" if may else
                     "never descend from it (" + ("a probe" if extra.get("probe") else "a typo" if extra.get("slip")
                                                 else "not judged" if exp.kind == NOT_JUDGED else
                                                 "it did not pass correctness") + ")"))
    by = [h for h in exp.q_history if h.get("by")]
    if by:
        said.append(("its values", "; ".join(
            f"{'Q1' if h.get('stage') == 'draft' else 'Q2'} {float(h.get('q', 0)):+.2f} after {named(h['by'])} "
            f"(reward {float(h.get('reward', 0)):+.2f})" for h in by[-6:])))
    return said


def memory_stats(path: Path) -> dict[str, Any]:
    """Counts by kind, stage, backend and source, sizes and running reward statistics."""
    with Store.open(path, readonly=True) as store:
        return store.stats()


def list_experiences(
    path: Path, *, filters: dict[str, str | None] | None = None, sort: str = "recency", descending: bool = True,
    limit: int | None = 50, offset: int = 0,
) -> dict[str, Any]:
    """A page of experience summaries: ``{"total": matching, "items": [...]}``."""
    filters = {k: v for k, v in (filters or {}).items() if k in FILTERS}
    with Store.open(path, readonly=True) as store:
        items = store.query(**filters, sort=sort, descending=descending, limit=limit, offset=offset)
        total = store.count(**filters)
        listed = numbered_summaries(store, items)
    return {"total": total, "offset": offset, "sort": sort, "filters": filters, "items": listed}


def show_experience(path: Path, exp_id: str) -> dict[str, Any]:
    """Everything about one experience (id or unique id prefix), with its parent and children."""
    with Store.open(path, readonly=True) as store:
        exp = store.get(store.resolve_id(exp_id))
        if exp is None:   # resolve_id found it a moment ago: removed since
            raise StoreError(f"no experience {exp_id}")
        number, parent, children = family(store, exp)
        why = decisions(store, exp)
    data = exp.to_dict()
    data.update(number=number, parent=parent, children=children, earned=earned(exp),
                decisions=[{"what": w, "why": y} for w, y in why])
    return data


def export_memory(path: Path, out: Path, *, filters: dict[str, str | None] | None = None) -> int:
    """Write the experiences passing ``filters`` to the JSON Lines file ``out``; returns how many."""
    filters = {k: v for k, v in (filters or {}).items() if k in FILTERS}
    with Store.open(path, readonly=True) as store:
        return store.export_jsonl(out, **filters)


def import_memory(path: Path, source: Path) -> dict[str, int]:
    """Add the experiences of a JSON Lines export (creating the memory if needed)."""
    with Store.open(path) as store:
        added, skipped = store.import_jsonl(source)
        total = store.count()
    return {"added": added, "skipped": skipped, "total": total}


# -- a task's own history ----------------------------------------------------------------------------

HISTORY_ATTEMPTS = 24        # a task's most recent attempts its prompts list (as ideas, see core.prompts)
HISTORY_KINDS = ("draft_trace", "refine_trace", "human_edit")


def task_history(store: Memory, task_id: str, backend: str, limit: int = HISTORY_ATTEMPTS) -> list[Experience]:
    """This task's most recent attempts on ``backend``, the model's and a person's, feasible or not,
    whatever start point they came from, oldest first: what its next prompt lists as already tried,
    before any item retrieved from other tasks (which leaves these out)."""
    found = [e for e in store.query(task=task_id, backend=backend, sort="recency", descending=True,
                                    limit=4 * limit) if e.kind in HISTORY_KINDS]
    return sorted(found[:limit], key=lambda e: e.created_at)


# -- resident rules ----------------------------------------------------------------------------------

RULE_MIN_TASKS = 3        # an item cited by correct kernels of this many operators becomes a rule
RULE_MIN_Q = 0.3          # ... with at least this value (measured: docs/memory.md, "Credit where it was earned")
MAX_RULES = 5
RULE_TEXT_CHARS = 600
RULE_NAMES_SHOWN = 4
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


def whole_sentences(text: str, limit: int = RULE_TEXT_CHARS) -> str:
    """The start of ``text`` in whole lines (bullets) and sentences, within ``limit`` characters.

    A line too long is split into its sentences; a first sentence longer than the limit is cut at a
    word and ends in "..." (so a cut is visible, never mid-word)."""
    units: list[tuple[str, str]] = []        # (text, separator before it)
    for line in text.strip().splitlines():
        if not line.strip():
            continue
        pieces = [line.rstrip()] if len(line) <= limit else [u for u in _SENTENCE_END.split(line.strip()) if u]
        units.extend((piece, "\n" if k == 0 else " ") for k, piece in enumerate(pieces))
    out = ""
    for piece, sep in units:
        candidate = out + (sep if out else "") + piece
        if len(candidate) > limit:
            break
        out = candidate
    if not out and units:
        return units[0][0][: max(0, limit - 4)].rsplit(" ", 1)[0] + " ..."
    return out


def rule_title(operators: list[str], shown: int = RULE_NAMES_SHOWN) -> str:
    """``Adopted by 8 operators: a, b, c, d and 4 more`` (the count always matches what it says)."""
    names = list(dict.fromkeys(operators))
    listed = ", ".join(names[:shown])
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"Adopted by {len(names)} operator{'s' if len(names) != 1 else ''}: {listed}{more}"


def _lesson(exp: Experience) -> str:
    """What the item teaches, as text: its own text for knowledge, the change and verdict for attempts."""
    if exp.kind in ("best_practice", "api_template", "success", "failure") and exp.text:
        return exp.text
    from core.prompts import change_of, in_window, roofline_line

    parts = [change_of(exp) or exp.title, in_window(outcome_of(exp))]
    roof = roofline_line(outcome_of(exp))
    return ". ".join(p.rstrip(".") for p in parts if p) + "." + (f"\n{roof}" if roof else "")


def resident_rules(store: Memory, backend: str, limit: int = MAX_RULES) -> tuple[list[Experience], set[str]]:
    """The rules a prompt carries and the ids of the items they replaced, which retrieval and API knowledge
    must leave out: the refusals seen on this backend (``learn_refusal``, every one, most frequent first,
    up to ``REFUSALS_SHOWN``), then consolidated rules (this backend's, then backend-agnostic ones, by Q1)."""
    rules = [*store.query(kind="rule", backend=backend, sort="q1", limit=None),
             *store.query(kind="rule", backend="", sort="q1", limit=None)] if backend else \
        store.query(kind="rule", sort="q1", limit=None)
    refusals = sorted((r for r in rules if is_refusal(r)), key=lambda r: (-int(r.extra.get("count", 1)), r.created_at))
    rules = [r for r in rules if not is_refusal(r) and _still_earned(store, r)]
    replaced = {str(r.extra.get("from")) for r in rules if (r.extra or {}).get("from")}
    return [*refusals[:REFUSALS_SHOWN], *rules[:limit]], replaced


# -- refusals learned once -------------------------------------------------------------------------------

REFUSALS_SHOWN = 8       # refusals a prompt carries at most (each is one rule of the gate; the table has ~20)
_WHERE = re.compile(r"^(?:anti_hack:\s*)*(?:[\w./-]+\.(?:py|cpp|cc|cu|h|hpp|c)(?: line \d+)?:\s*)?")


def is_refusal(exp: Experience) -> bool:
    """Whether a rule item is a refusal learned from the anti-hack gate (``learn_refusal``)."""
    return exp.kind == "rule" and bool((exp.extra or {}).get("refusal"))


def refusal_words(message: str) -> str:
    """What a refusal says, without where it was (gate, file and line): the same refusal in another file or
    task reads the same ("token pasting (##) is not allowed")."""
    return " ".join(_WHERE.sub("", " ".join(str(message).split()), count=1).split())


def learn_refusal(store: Memory, backend: str, task_id: str, message: str, run_id: str = "") -> Experience | None:
    """Keep an anti-hack refusal as a rule of ``backend``, shown in every later prompt there
    (``resident_rules``): both GEMM drafts of a run were refused for token pasting, the second after the
    first, with nothing of the first in its prompt. The same refusal again is counted on the rule it made
    (how many attempts, which tasks), never stored twice."""
    from core.seeds import GENERAL_TASK

    words = refusal_words(message)
    if not words:
        return None
    for rule in store.query(kind="rule", backend=backend, limit=None):
        if is_refusal(rule) and rule.extra.get("refusal") == words:
            tasks = list(dict.fromkeys([*rule.extra.get("tasks", []), task_id]))
            store.update_extra(rule.id, {"count": int(rule.extra.get("count", 1)) + 1, "tasks": tasks})
            return store.get(rule.id)
    rule = Experience(task_id=GENERAL_TASK, kind="rule", backend=backend, stage="",
                      title="Refused at the anti_hack gate before", text=words, source="llm", run_id=run_id,
                      extra={"refusal": words, "count": 1, "tasks": [task_id]})
    rule.id, _ = store.add_experience(rule)
    return rule


def _still_earned(store: Memory, rule: Experience) -> bool:
    """Whether a stored rule's item was cited by correct kernels of ``RULE_MIN_TASKS`` operators (rules
    made before failures stopped counting as adoptions are left out, and their item is retrieved as
    itself again); a rule whose item is gone stays."""
    item = store.get(str((rule.extra or {}).get("from") or "")) if (rule.extra or {}).get("from") else None
    return item is None or len(successful_adopters(store, item)) >= RULE_MIN_TASKS


ADOPTER_ATTEMPTS = 200   # an operator's recent attempts searched for the one that cited an item


def successful_adopters(store: Memory, exp: Experience) -> list[str]:
    """The operators among ``exp``'s adopters whose attempt citing it succeeded (a correct draft, a
    refinement faster than the best: reward above 0). A citation is not a success: gelu "adopted" the
    generic seed item with a failed draft, and the item was then called a rule learned by 3 operators."""
    found = []
    for task_id in dict.fromkeys(exp.adopted_by):
        for attempt in store.query(task=task_id, limit=ADOPTER_ATTEMPTS):
            cited = (attempt.extra or {}).get("cited") or []
            if attempt.kind in HISTORY_KINDS and exp.id in cited and (attempt.reward or 0.0) > 0:
                found.append(task_id)
                break
    return found


def consolidate_rules(store: Memory, backend: str, run_id: str = "", *, min_tasks: int = RULE_MIN_TASKS,
                      min_q: float = RULE_MIN_Q) -> list[Experience]:
    """Turn items that correct kernels of ``min_tasks`` operators cited (``successful_adopters``), with
    positive value, into resident rules.

    A rule keeps whole sentences of the item's lesson, says how many operators adopted it with success
    and names them (or "and N more"), says when it is shipped knowledge rather than learned here, and
    replaces the item: the item is marked ``consolidated_into`` and ``resident_rules`` reports it, so no
    prompt shows both. Returns the rules added."""
    from core.seeds import GENERAL_TASK

    existing = {str((e.extra or {}).get("from")) for e in store.query(kind="rule", limit=None)}
    added: list[Experience] = []
    for exp in store.query(backend=backend, sort="adoptions", limit=20):
        if exp.kind == "rule" or exp.id in existing or len(set(exp.adopted_by)) < min_tasks:
            continue
        if max(exp.q1, exp.q2) < min_q:
            continue
        operators = successful_adopters(store, exp)
        if len(operators) < min_tasks:
            continue
        text = whole_sentences(f"{exp.title}: {_lesson(exp)}")
        title = rule_title(operators) + (" (shipped knowledge, not learned here)" if exp.source == "seed" else "")
        rule = Experience(task_id=GENERAL_TASK, kind="rule", backend=exp.backend, stage="",
                          title=title, text=text, source=exp.source, model=exp.model,
                          run_id=run_id, extra={"from": exp.id, "operators": operators},
                          q1=exp.q1, q2=exp.q2, signature=exp.signature)
        rule.id, _ = store.add_experience(rule)
        store.update_extra(exp.id, {"consolidated_into": rule.id})
        existing.add(exp.id)
        added.append(rule)
    return added

"""The refinement baseline is the evokernel prompt minus the memory (issue #36, finding 6): for the same
state, the two methods' prompts differ only by the memory sections (resident rules, items from other
tasks) and the system message's ``MEMORY USED`` line. Before, the baseline's draft said only "Write a first
correct kernel.", its refine ask lacked the roofline guidance, and after a refused draft it showed the
refused code where evokernel did not: any comparison measured the wording too."""

from __future__ import annotations

import re

import pytest
from canned_runs import kernel, prompts_of

import candidates as C

MEMORY_SECTIONS = ("## Rules kept resident", "## Memory:")


def without_memory(user: str) -> str:
    """The user message with the memory sections cut out and experience ids made alike."""
    parts = user.split("\n\n## ")
    kept = [p for p in parts if not any(("## " + p).startswith(s) for s in MEMORY_SECTIONS)]
    return re.sub(r"mem:[0-9a-f]+", "mem:ID", "\n\n## ".join(kept))


def other_task_item(store) -> None:
    """A relevant attempt of another task, so that evokernel's prompts carry a memory section."""
    from store import Experience

    store.add_experience(Experience(
        task_id="leaky_relu", kind="draft_trace", backend="cpu", stage="draft", title="leaky_relu draft: feasible",
        files=C.elementwise(C.RELU), outcome={"feasible": True, "verified": True, "latency_ms": 1.0},
        reward=1.0, q1=0.5, extra={"change": "one simd loop"},
        signature={"ops": ["relu"], "category": "activation", "text": "leaky_relu activation relu"}))


@pytest.mark.parametrize("seeded", [False, True], ids=["empty memory", "with memory"])
def test_refinement_and_evokernel_prompts_differ_only_by_the_memory(tmp_path, seeded):
    answers = [kernel("anti_hack", 1), kernel("2.0", 2), kernel("1.5", 3), kernel("1.9", 4)]
    seed = other_task_item if seeded else None
    evo = prompts_of(tmp_path, "evokernel", answers, seed)
    ref = prompts_of(tmp_path, "refinement", answers, seed)
    assert len(evo) == len(ref) == 4
    for k, ((evo_system, evo_user), (ref_system, ref_user)) in enumerate(zip(evo, ref)):
        assert without_memory(evo_user) == without_memory(ref_user), f"prompt {k} differs beyond the memory"
        assert not any(s in ref_user for s in MEMORY_SECTIONS)
        assert ref_system == evo_system.replace("\n" + evo_system.split("\n")[-1], "") \
            if "MEMORY USED" in evo_system else ref_system == evo_system
    if seeded:
        assert any("## Memory:" in user for _, user in evo)
    # the draft after a refusal shows the refused code and its reason, in both; the refine ask carries the
    # roofline guidance in both (the same words)
    assert "kTag1" in evo[1][1] and "canned anti_hack refusal" in evo[1][1]
    assert "Correctness first" in ref[0][1] and "Write a first correct kernel." not in ref[0][1]

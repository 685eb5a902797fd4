"""A refusal is learned once (issue #36, finding 3): both GEMM drafts of the loopback runs were refused for
token pasting, the second after the first, and nothing of the first refusal reached the second task's
prompt. Now an anti-hack refusal is kept as a rule of its backend, shown in every later prompt there (of
every task), counted when it happens again, and never learned by a baseline (which has no memory)."""

from __future__ import annotations

import re

from canned_runs import canned_run, kernel

PASTE = "kernel.cpp line 7: token pasting (##) is not allowed"


def refused(tag: int) -> dict[str, str]:
    return kernel("anti_hack", tag)


def judge_with_paste(task_id, files):
    from canned_runs import judge

    from core.scripted import Canned

    said = re.search(r'kCanned = "([^"]+)"', files["kernel.cpp"]).group(1)
    return Canned(failed_gate="anti_hack", message=PASTE) if said == "anti_hack" else judge(task_id, files)


def test_an_anti_hack_refusal_reaches_every_later_prompt_of_its_backend(tmp_path):
    from core.scripted import CannedVerifier
    from store import Store

    with Store.open(tmp_path / "memory.lmdb") as store:
        _record, first = canned_run(store, "evokernel", {"relu": [refused(1), kernel("2.0", 2)]},
                                    verifier=CannedVerifier(judge_with_paste))
        assert "token pasting (##) is not allowed" not in first["relu"][0][1]
        assert "Refused before" in first["relu"][1][1] and "token pasting (##) is not allowed" in first["relu"][1][1]
        # a later run of another task: the refusal is in its first prompt, among the rules kept resident
        _record, later = canned_run(store, "evokernel", {"softmax": [refused(3), kernel("2.0", 4)]},
                                    verifier=CannedVerifier(judge_with_paste))
        draft = later["softmax"][0][1]
        rules = draft.split("## Rules kept resident", 1)[1].split("\n## ")[0]
        assert "token pasting (##) is not allowed" in rules and "relu" in rules
        # seen twice now, by two tasks: one rule, counted
        again = later["softmax"][1][1].split("## Rules kept resident", 1)[1].split("\n## ")[0]
        assert again.count("token pasting") == 1 and "2 attempts" in again
        assert store.count(kind="rule") == 1


def test_a_baseline_learns_no_refusal(tmp_path):
    from core.scripted import CannedVerifier
    from store import Store

    with Store.open(tmp_path / "memory.lmdb") as store:
        _record, sent = canned_run(store, "refinement", {"relu": [refused(1), kernel("2.0", 2)]},
                                   verifier=CannedVerifier(judge_with_paste))
        assert store.count(kind="rule") == 0 and "Refused before" not in sent["relu"][1][1]

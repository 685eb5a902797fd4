"""Hand-edit lineage follows the working version (#37, finding 3): a save's parent is the last version that
passed correctness, so a wrong result the person then reverted is recorded (and rewarded) but never takes the
credit of the speed-up saved after it; a save of exactly the same files gets the verdict of the attempt it repeats
without a verification (finding 4), and one that differs only in comments or spacing is verified (a comment can
change what the compiler reads: #48) and kept as a repeat of it. The session's own watcher callback, on a canned
verifier and a real store."""

from __future__ import annotations

import asyncio
import re

import candidates as C


def judge(task_id, files):
    from core.scripted import Canned

    said = re.search(r"kCanned = \"([^\"]+)\"", files["kernel.cpp"]).group(1)
    try:
        return Canned(latency_ms=float(said))
    except ValueError:
        return Canned(failed_gate=said, message=f"canned {said} failure")


def kernel(said: str, comment: str = "") -> dict[str, str]:
    files = C.elementwise(C.RELU)
    return {**files, "kernel.cpp": files["kernel.cpp"] + f"{comment}\nstatic const char* kCanned = \"{said}\";\n"}


def test_saves_descend_from_the_last_working_version_and_credit_goes_where_it_belongs(workspace):
    from core.config import Config
    from core.engine import Engine
    from core.scripted import CannedVerifier
    from core.session import Session

    workspace.init()
    seen: list = []
    with Session(workspace) as session:
        session.bus.subscribe(seen.append)
        verifier = CannedVerifier(judge)
        config = Config()
        config.engine.final_window = False
        session._engine = Engine(config, session.store, verifier, None, session.bus,
                                 kernels_dir=workspace.kernels_dir)
        verify = session.edit_watcher()._verify
        [relu] = session.tasks(["relu"])

        def save(files, parent):
            return asyncio.run(verify(relu.id, files, parent))

        a = save(kernel("10.0"), None)                  # the first working kernel
        assert a is not None
        b = save(kernel("correctness"), a)              # a wrong result, recorded and rewarded...
        assert b is None                                # ...but no parent for the next save
        wrong = [e for e in seen if type(e).__name__ == "AttemptRecorded"][-1]
        assert wrong.outcome.failed_gate == "correctness" and wrong.parent_id == a and wrong.reward < 0
        after_wrong = session.store.get(a).q2
        assert after_wrong < 0                          # the failed experiment from it moves its Q2
        c = save(kernel("5.0"), a)                      # the real speed-up, made from the working version
        assert c is not None
        store = session.store
        fast, first, broken = store.get(c), store.get(a), store.get(wrong.experience_id)
        assert fast.parent_id == a and store.get_task(relu.id).best_id == c
        # the speed-up's credit went to what it improved on, the working version; none to the wrong edit
        assert first.q2 > after_wrong and broken.q2 == 0.0 and broken.n2 == 0
        by_q2 = sorted([first, fast, broken], key=lambda e: e.q2, reverse=True)
        assert by_q2[0].id == fast.id and fast.q2 > broken.q2   # the wrong edit never ranks above the best

        calls = len(verifier.calls)
        d = save(kernel("5.0"), c)                      # exactly c's files
        assert len(verifier.calls) == calls             # answered without a verification
        same = [e for e in seen if type(e).__name__ == "AttemptRecorded"][-1]
        assert same.duplicate and same.experience_id == c and same.outcome.latency_ms == 5.0 and same.number == 3
        assert d == c
        e = save(kernel("5.0", comment="\n// only a comment, and   spacing"), c)   # the same code as c, other bytes
        assert len(verifier.calls) == calls + 1         # verified: its bytes were never judged
        repeat = [e for e in seen if type(e).__name__ == "AttemptRecorded"][-1]
        assert repeat.duplicate and repeat.experience_id == c and repeat.number == 3   # kept as a repeat of c
        assert e == c

"""A writer process for the crash and concurrency tests (run as a script, not collected by pytest).

    python store_writer.py STORE LOG RUN [--count N] [--map-size BYTES]

Writes experiences and Q updates to STORE as fast as it can, forever or for N experiences. After each
commit it appends what was committed to LOG and fsyncs it, so whoever kills this process knows
every record that must have survived:

    A <id> <run> <i>      experience i of run <run> was committed with id <id>
    Q <stage> <id>,<id>   one value update of these ids was committed
Each experience carries ``extra["digest"]``, the SHA-256 of its text and files, so a reader can
tell a whole record from a torn one.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from store import Experience, Store  # noqa: E402


def content(run: int, i: int) -> tuple[str, dict[str, str]]:
    """The text and files of experience i of run ``run`` (sizes vary, some files are large)."""
    rng = random.Random(run * 1_000_003 + i)
    size = rng.choice([200, 2_000, 20_000, 120_000])
    body = "".join(rng.choice("abcdefghij;{}() \n") for _ in range(64)) * (size // 64)
    text = f"run {run} item {i}: " + "lesson " * rng.randint(1, 50)
    return text, {"kernel.cpp": f"// run {run} item {i}\n{body}", "model.py": f"# {run}/{i}\nrun, item = {run}, {i}\n"}


def digest(text: str, files: dict[str, str]) -> str:
    """The checksum a whole record carries."""
    h = hashlib.sha256(text.encode())
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode())
    return h.hexdigest()


def make(run: int, i: int) -> Experience:
    """Experience i of run ``run``."""
    text, files = content(run, i)
    return Experience(task_id=f"task_{i % 5}", kind="success", backend="cpu", stage="draft", title=f"{run}/{i}",
                      text=text, files=files, reward=1.0, source="llm", extra={"digest": digest(text, files),
                                                                              "run": run, "i": i})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("log")
    ap.add_argument("run", type=int)
    ap.add_argument("--count", type=int, default=0, help="stop after this many experiences (0: never)")
    ap.add_argument("--map-size", type=int, default=256 << 10)
    args = ap.parse_args()
    rng = random.Random(args.run)
    log = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(line: str) -> None:
        os.write(log, (line + "\n").encode())
        os.fsync(log)

    committed: list[str] = []
    slowest = 0.0
    with Store.open(args.store, map_size=args.map_size) as store:
        print("ready", flush=True)
        i = 0
        while not args.count or i < args.count:
            t0 = time.perf_counter()
            roll = rng.random()
            if roll < 0.6 or not committed:
                exp = make(args.run, i)
                exp_id, _ = store.add_experience(exp)
                note(f"A {exp_id} {args.run} {i}")
                committed.append(exp_id)
                i += 1
            elif roll < 0.85:
                ids = rng.sample(committed, min(len(committed), rng.randint(1, 6)))
                stage = rng.choice(["draft", "refine"])
                store.update_values(ids, stage=stage, reward=rng.uniform(-1, 1), alpha=0.3, task_id="task_0")
                note(f"Q {stage} {','.join(ids)}")
            else:  # an experience and a value update in one transaction
                exp = make(args.run, i)
                ids = rng.sample(committed, min(len(committed), 3))
                with store.transaction():
                    exp_id, _ = store.add_experience(exp)
                    store.update_values(ids, stage="draft", reward=1.0, alpha=0.3)
                note(f"A {exp_id} {args.run} {i}")
                note(f"Q draft {','.join(ids)}")
                committed.append(exp_id)
                i += 1
            slowest = max(slowest, time.perf_counter() - t0)
    print(f"done {i} slowest_commit_s={slowest:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A reader process for the concurrency test (run as a script, not collected by pytest).

    python store_reader.py STORE STOP

Reads the memory read-only, over and over, until the file STOP appears, checking that every record
it sees is whole (its digest matches its text and files), that counts never go down and that an id
once seen never disappears. Prints one JSON line: loops, counts seen, errors.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from store import Store  # noqa: E402

from store_writer import digest  # noqa: E402


def main() -> int:
    path, stop = Path(sys.argv[1]), Path(sys.argv[2])
    errors: list[str] = []
    counts: list[int] = []
    seen: set[str] = set()
    loops = 0
    with Store.open(path, readonly=True, map_size=256 << 10) as store:
        while True:
            stopping = stop.exists()  # a last full loop starts after the writer finished
            loops += 1
            try:
                n = store.count()
                if counts and n < counts[-1]:
                    errors.append(f"count went down from {counts[-1]} to {n}")
                counts.append(n)
                page = store.query(sort="recency", limit=25)
                everything = list(store.iter_experiences()) if loops % 4 == 0 else []
                for exp in page + everything:
                    if exp.extra.get("digest") != digest(exp.text, exp.files):
                        errors.append(f"torn record {exp.id}")
                    seen.add(exp.id)
                if everything:
                    missing = seen - {e.id for e in everything}
                    if missing:
                        errors.append(f"{len(missing)} ids seen earlier are gone")
                    if len(everything) < n:
                        errors.append(f"iterated {len(everything)} of {n}")
                got = store.get_many(sorted(seen)[:50])
                if len(got) != min(50, len(seen)):
                    errors.append("get_many lost ids")
            except Exception:  # noqa: BLE001 - every failure is reported, none stops the reader
                errors.append(traceback.format_exc(limit=3))
            if len(errors) > 20 or (stopping and loops >= 3):
                break
    print(json.dumps({"loops": loops, "counts": sorted(set(counts)), "errors": errors, "seen": len(seen)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

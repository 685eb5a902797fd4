"""A reader process iterating the memory while a writer process commits never errors or sees a torn record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from store import Store

HERE = Path(__file__).parent


def test_reader_process_never_errors_nor_sees_partial_records(tmp_path):
    path = tmp_path / ".evokernel" / "memory.lmdb"
    Store.open(path, map_size=256 << 10).close()  # the reader opens read-only: the memory must exist
    stop = tmp_path / "stop"
    readers = [
        subprocess.Popen([sys.executable, str(HERE / "store_reader.py"), str(path), str(stop)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    writer = subprocess.run(
        [sys.executable, str(HERE / "store_writer.py"), str(path), str(tmp_path / "log"), "0", "--count", "250"],
        capture_output=True, text=True, timeout=120,
    )
    stop.touch()
    assert writer.returncode == 0, writer.stderr
    done = writer.stdout.split()
    assert done[-3] == "done" and done[-2] == "250"
    slowest = float(done[-1].split("=")[1])
    assert slowest < 2.0, f"a commit waited {slowest:.2f} s: readers must not block the writer"

    for reader in readers:
        out, err = reader.communicate(timeout=60)
        assert reader.returncode == 0, err
        report = json.loads(out.strip().splitlines()[-1])
        assert report["errors"] == [], report["errors"][:3]
        assert report["loops"] >= 5
        assert len(report["counts"]) >= 3, "the reader should have watched the memory grow"
        assert report["counts"][-1] == 250
    with Store.open(path, readonly=True) as store:
        assert store.count() == 250
        assert store.stats()["map_size"] > 256 << 10

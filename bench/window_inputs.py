"""Not a timing: does every task of a suite go through the timing window's input path? For each task
(scaled by --scale, default 0.05): the task's own draw, its layout as the reference's side sends it
(JSON), the bytes through a mapping, and the views every side reads back, equal to the draw. Run it on a
public KernelBench or NPU-benchmark checkout before a long run.

    .venv/bin/python bench/window_inputs.py PATH/TO/SUITE [--scale 0.05]
"""

from __future__ import annotations

import argparse
import json
import mmap
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite")
    parser.add_argument("--scale", type=float, default=0.05)
    args = parser.parse_args()

    import torch

    from core.tasks import load_suite, scale_task
    from verifier.inputs import Trial, make_inputs, new_seed
    from verifier.jobs import input_layout, layout_bytes
    from verifier.task import load_task_module
    from verifier.window.side import _tensors, _views

    suite = load_suite(args.suite)
    ok = failed = skipped = 0
    for task in suite.tasks:
        try:
            module = load_task_module(scale_task(task, args.scale).spec())
            draw = make_inputs(module.get_inputs, Trial(new_seed(), "normal"))
        except Exception as exc:     # the task itself does not load or draw here: not the window's concern
            skipped += 1
            print(f"skipped {task.id}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        try:
            layout = json.loads(json.dumps(input_layout(draw), separators=(",", ":")))
            buf = mmap.mmap(-1, layout_bytes(layout))
            for view, x in zip(_views(buf, layout), draw):
                for dst, src in zip(_tensors(view), _tensors(x)):
                    dst.copy_(src)
            back = _views(buf, layout)
            same = all(torch.equal(a, b) for a, b in zip(_tensors(back), _tensors(draw)))
            same = same and [x for x in back if not _tensors(x)] == [x for x in draw if not _tensors(x)]
            if not same:
                raise AssertionError("the inputs read back differ from the draw")
            ok += 1
        except Exception as exc:
            failed += 1
            print(f"FAILED {task.id}: {type(exc).__name__}: {str(exc)[:200]}")
    print(f"{ok} tasks through the window's input path, {failed} failed, {skipped} skipped "
          f"({len(suite.errors)} files the suite itself refused)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Every built-in task's reference runs and times on this machine (real reference processes,
two at a time; timing itself is one at a time)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def test_every_builtin_reference_runs_times_and_accepts_a_second_shape(tmp_path):
    from core.tasks import load_suite
    from verifier import VerifyConfig
    from verifier.verify import Verifier

    tasks = load_suite("builtin").tasks
    config = VerifyConfig(timing_calls=5, timing_budget_s=0.2, warmup_calls=1, threads=2)
    failures, results = [], {}
    with Verifier("cpu", config, cache_dir=tmp_path / "cache") as verifier:
        def reference(task):
            try:
                results[task.id] = verifier.reference(task.spec())
            except Exception as exc:  # collect every failure, not just the first
                failures.append(f"{task.id}: {exc}")

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(reference, tasks))
    assert not failures, "\n".join(failures)
    assert len(results) == len(tasks) >= 86
    for task_id, ref in results.items():
        assert ref.timing["median_ms"] > 0, task_id
        assert len(ref.outputs) == len(ref.trials) >= 6, (task_id, ref.alt_rejected)   # a second shape was found
        assert any(t.overrides for t in ref.trials), (task_id, ref.alt_rejected)

"""Every built-in task's reference runs and times on this machine (real reference processes,
two at a time; timing itself is one at a time)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def test_every_builtin_reference_runs_times_and_accepts_a_second_shape(tmp_path):
    from core.tasks import load_suite
    from verifier import VerifyConfig
    from verifier.harness.verify import Verifier

    tasks = load_suite("builtin").tasks
    config = VerifyConfig(timing_calls=5, timing_budget_s=0.2, warmup_calls=1, threads=2)
    failures, results = [], {}
    with Verifier("cpu", config, cache_dir=tmp_path / "cache") as verifier:
        def reference(task):
            try:
                ref = verifier.reference(task.spec())
            except Exception as exc:  # collect every failure, not just the first
                failures.append(f"{task.id}: {exc}")
                return
            # keep the facts, not the outputs (all of them together are gigabytes)
            results[task.id] = (ref.timing["median_ms"], len(ref.outputs), len(ref.trials),
                                any(t.overrides for t in ref.trials), ref.alt_rejected)

        with ThreadPoolExecutor(2) as pool:
            list(pool.map(reference, tasks))
    assert not failures, "\n".join(failures)
    assert len(results) == len(tasks) >= 86
    for task_id, (median_ms, n_outputs, n_trials, second_shape, rejected) in results.items():
        assert median_ms > 0, task_id
        assert n_outputs == n_trials >= 6 and second_shape, (task_id, rejected)   # a second shape was found

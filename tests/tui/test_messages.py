"""High-rate messages replace older ones of their kind still waiting, so a burst never floods the queue."""

from __future__ import annotations


def test_usage_and_gate_progress_coalesce_but_attempts_never_do():
    from core import events as ev
    from core.attempts import Outcome
    from evotui.messages import EngineEvent, TaskHighlighted

    usage = [EngineEvent(ev.UsageUpdated(10 * i, i, 0.0)) for i in range(2)]
    assert usage[0].can_replace(usage[1])
    gate = lambda task, it, name: EngineEvent(ev.GateChecked(task, it, name, "passed", ""))  # noqa: E731
    assert gate("relu", 0, "format").can_replace(gate("relu", 0, "build"))
    assert not gate("relu", 0, "format").can_replace(gate("relu", 1, "format"))      # another attempt
    assert not gate("relu", 0, "format").can_replace(gate("softmax", 0, "format"))   # another task
    out = Outcome(feasible=True, latency_ms=1.0, speedup=1.0)
    attempt = EngineEvent(ev.AttemptRecorded("relu", 0, "e1", None, "draft", "llm", out, 1.0))
    assert not attempt.can_replace(EngineEvent(ev.AttemptRecorded("relu", 1, "e2", None, "draft", "llm", out, 1.0)))
    assert not usage[0].can_replace(attempt)
    assert TaskHighlighted("relu").can_replace(TaskHighlighted("softmax"))


def test_preferences_survive_a_broken_file(tmp_path):
    from evotui.preferences import Preferences

    assert Preferences.load(tmp_path).theme is None
    Preferences(theme="light").save(tmp_path)
    assert Preferences.load(tmp_path).theme == "light"
    (tmp_path / "ui.json").write_text("{not json")
    assert Preferences.load(tmp_path).theme is None

"""Issue 27, item 3: the suite in use is visible (welcome screen, task table, log), and
`evokernel ui` takes `--suite` and `--size-scale` like `run`."""

from __future__ import annotations

from pathlib import Path

from waiting import wait_for

SUITE = Path(__file__).resolve().parents[1] / "fixtures" / "suite"   # the tui workspace's suite (conftest.py)

SIZE = (150, 44)


def test_the_welcome_screen_names_a_folder_suite_and_its_sizes():
    from evotui.screens.first_run import first_run_text

    text = first_run_text("/tmp/ws", ["evokernel.toml"], False, suite=str(SUITE), size_scale="auto").plain
    assert f"the task suite in {SUITE}" in text and "sizes scaled: auto" in text and "built-in" not in text
    assert "with the built-in task suite" in first_run_text("/tmp/ws", [], False).plain


def test_ui_takes_suite_and_size_scale_like_run():
    from evotui.cli import build_parser

    args = build_parser().parse_args(["ui", "--suite", str(SUITE), "--size-scale", "0.5"])
    assert args.suite == str(SUITE) and args.size_scale == "0.5"


async def test_the_task_table_and_the_log_say_which_suite_and_sizes(workspace):
    from evotui.app import make_app
    from evotui.widgets import marks

    app = make_app(workspace.root, watch=False, size_scale="0.5")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        subtitle = str(app.main.query_one("#tasks").border_subtitle)
        assert f"suite {SUITE.name}" in subtitle and "sizes ×0.5" in subtitle, subtitle
        log = "\n".join(app.main.query_one("#log").lines_written)
        assert f"suite {marks.shown_path(SUITE)}" in log and "sizes ×0.5" in log, log
        await pilot.press("q")


async def test_another_suites_relu_is_another_task(workspace):
    """The finding: ``ui --suite`` showed the built-in relu's tree and its best beside the folder suite's
    relu, which had never been verified. Each suite's relu now has its own key, tree and best."""
    import re

    from core.config import Config
    from core.engine import Engine
    from core.scripted import Canned, CannedVerifier, ScriptedModel
    from core.session import Session
    from evotui.app import make_app
    from evotui.messages import AttemptsLoaded

    import candidates as C
    from openai_server import answer_with
    from waiting import posted

    def judge(task_id, files):
        return Canned(latency_ms=float(re.search(r"kMs = ([0-9.]+)", files["kernel.cpp"]).group(1)))

    def script(request, n):
        files = C.elementwise(C.RELU)
        return answer_with({**files, "kernel.cpp": files["kernel.cpp"] + f"\nstatic const double kMs = {8 - n};\n"})

    with Session(workspace) as session:               # the built-in suite's relu, worked on first
        [builtin_relu] = session.tasks(["relu"], suite="builtin")
        config = Config()
        config.engine.final_window = False
        engine = Engine(config, session.store, CannedVerifier(judge), ScriptedModel(script))
        await engine.run([builtin_relu], iterations=2)
    app = make_app(workspace.root, watch=False)       # the workspace's suite: a folder suite with a relu of its own
    messages: list = []
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        await wait_for(pilot, lambda: app.main.tasks, what="the workspace to open")
        row = app.main.tasks[f"relu@{SUITE.name}"]
        assert "relu" not in app.main.tasks and row.best_speedup is None and not row.feasible
        await wait_for(pilot, lambda: any(m.task_id == row.id for m in posted(messages, AttemptsLoaded)),
                       what="its attempts")
        assert all(m.lines == [] for m in posted(messages, AttemptsLoaded) if m.task_id == row.id)
        assert "best" not in str(app.main.query_one("#attempts").border_title)
        await pilot.press("q")

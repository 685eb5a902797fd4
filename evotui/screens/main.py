"""The main screen: tasks, the selected task's attempt tree, the selected attempt's code or diff, the
event log, a header with the run's state and a footer with the keys.

It turns engine events into pane updates and asks the app for what the panes show (``Read*`` messages);
the app's workers read the memory and post the results back here.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from core import events as ev
from core.attempts import AttemptLine, TaskRow, outcome_of
from evotui import keys
from evotui.messages import (
    AnswerLoaded,
    AssemblyLoaded,
    AttemptHighlighted,
    AttemptLoaded,
    AttemptsLoaded,
    PanesDrawn,
    ReadAnswer,
    ReadAssembly,
    ReadAttempt,
    ReadAttempts,
    StatusesDrawn,
    TaskHighlighted,
    TaskRowsLoaded,
)
from evotui.widgets import marks
from evotui.widgets.attempt_tree import AttemptTree
from evotui.widgets.code_view import CodeView, unified_diff
from evotui.widgets.event_log import EventLog
from evotui.widgets.marks import plural
from evotui.widgets.run_header import RunHeader
from evotui.widgets.task_table import TaskTable


class MainScreen(Screen[None]):
    """Tasks, attempts, code and events."""

    BINDINGS = keys.bindings("main")
    DEFAULT_CSS = """
    MainScreen { layout: vertical; }
    MainScreen #top { height: 1fr; }
    MainScreen #bottom { height: 1fr; }
    MainScreen #left { width: 50%; }
    MainScreen #filter { display: none; height: 1; border: none; padding: 0 1; }
    MainScreen #filter.shown { display: block; }
    MainScreen #status-line { display: none; height: auto; max-height: 4; padding: 0 1; }
    MainScreen #status-line.shown { display: block; }
    MainScreen AttemptTree { width: 1fr; }
    MainScreen CodeView { width: 3fr; }
    MainScreen EventLog { width: 2fr; }
    MainScreen TaskTable, MainScreen AttemptTree, MainScreen CodeView, MainScreen EventLog {
        border: round $panel-lighten-2;
        border-title-align: left;
        border-subtitle-align: right;
    }
    MainScreen TaskTable:focus-within, MainScreen AttemptTree:focus, MainScreen CodeView:focus,
    MainScreen EventLog:focus { border: round $primary; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.task_id: str | None = None
        self.mode = "code"                   # d: code, diff, answer, assembly; c: compare
        self.answer: tuple[str, str | None] | None = None   # (attempt id, the model's answer) last read
        self.assembly: tuple[str, str] | None = None       # (attempt id, its hot loops) last read
        self.marked: tuple[str, str, dict[str, str]] | None = None   # c: (attempt id, "#n", files) to compare
        self.shown_exp = None
        self.parent_exp = None
        self.tasks: dict[str, TaskRow] = {}
        self.suite = ""     # which suite, and its sizes: the task table's subtitle
        self.follow: str | None = None   # an attempt just recorded for the task shown: the tree goes to it
        self.repeats: dict[str, str] = {}    # task -> the attempt its latest save or answer repeated
        self.asking: dict[str, str] = {}     # task -> the stage of its model call in flight
        self.verdicts: list[tuple[float, str]] = []   # (when, "task #n: verdict") of each attempt recorded

    def compose(self) -> ComposeResult:
        yield RunHeader()
        with Horizontal(id="top"):
            with Vertical(id="left"):
                box = Input(placeholder="filter tasks: words of the id, category, stage or level", id="filter")
                box.can_focus = False     # until / opens it
                yield box
                yield TaskTable(id="tasks")
                yield Static(id="status-line")     # the task's whole status when its cell cuts it
            yield AttemptTree(id="attempts")
        with Horizontal(id="bottom"):
            yield CodeView(id="code")
            yield EventLog(id="log")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(TaskTable).border_title = "Tasks"
        self.query_one(AttemptTree).border_title = "Attempts"
        self.query_one(CodeView).border_title = "Code"
        self.query_one(EventLog).border_title = "Events"
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.restyle())
        self.call_after_refresh(self.post_message, PanesDrawn())   # data arrives once every pane is up

    # -- what the panes show ------------------------------------------------------------------------

    @property
    def current_task(self) -> str | None:
        return self.query_one(TaskTable).current_task

    @property
    def current_attempt(self) -> AttemptLine | None:
        tree = self.query_one(AttemptTree)
        return tree.current if tree.task_id == self.task_id else None

    @property
    def drawn(self) -> bool:
        """No batched update (log lines, task statuses) waits to be drawn."""
        return self.query_one(EventLog).drawn and self.query_one(TaskTable).drawn

    def run_selection(self) -> list[str] | None:
        """The marked tasks, in table order (None: none marked, run them all)."""
        table = self.query_one(TaskTable)
        marked = [t for t in table.rows_by_id if t in table.marked]
        return marked or None

    def show_tasks(self, rows: list[TaskRow]) -> None:
        self.tasks = {r.id: r for r in rows}
        table = self.query_one(TaskTable)
        table.show_rows(rows)
        self._title_tasks()
        if rows and self.task_id is None:
            table.focus()
            self.on_task_highlighted(TaskHighlighted(table.current_task or rows[0].id))

    def show_unavailable(self, problem: str) -> None:
        """The workspace could not be opened: say why where the code would be."""
        view = self.query_one(CodeView)
        view.border_title = "Workspace not open"
        view.show_message(f"The workspace could not be opened:\n\n{problem}\n\nNothing can run, be verified or "
                          "edited here until that is fixed. Quit (q), fix it (or move the damaged file away), "
                          "and start again.")

    def note(self, text: str, tone: str = "", at: float | None = None) -> None:
        self.query_one(EventLog).add(text, tone, at)

    def restyle(self) -> None:
        self.query_one(TaskTable).restyle()
        self.query_one(AttemptTree).restyle()
        self.query_one(CodeView).restyle()

    def _title_tasks(self) -> None:
        table = self.query_one(TaskTable)
        total = len(table.rows_by_id)
        if table.filter_text.strip():
            table.border_subtitle = f"{len(table.shown)} of {plural(total, 'task')} · /{table.filter_text.strip()}"
        else:
            table.border_subtitle = f"{plural(total, 'task')} · {self.suite}" if self.suite else plural(total, "task")

    # -- keys ----------------------------------------------------------------------------------------

    def action_filter(self) -> None:
        """/: filter the tasks (typing narrows them, enter goes back to the table, escape clears)."""
        box = self.query_one("#filter", Input)
        box.can_focus = True
        box.add_class("shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            event.stop()
            table = self.query_one(TaskTable)
            table.set_filter(event.value)
            self._title_tasks()
            if table.current_task is not None and table.current_task != self.task_id:
                self.on_task_highlighted(TaskHighlighted(table.current_task))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.stop()
            if not event.value.strip():
                event.input.remove_class("shown")
                event.input.can_focus = False
            self.query_one(TaskTable).focus()

    def action_escape(self) -> None:
        """Escape: close the keys panel, else clear the task filter."""
        if self.app.screen.query("HelpPanel"):
            self.app.action_hide_help_panel()
            return
        box = self.query_one("#filter", Input)
        if box.has_class("shown") or box.value:
            box.value = ""
            box.remove_class("shown")
            box.can_focus = False
            self.query_one(TaskTable).set_filter("")
            self._title_tasks()
            self.query_one(TaskTable).focus()

    def action_help(self) -> None:
        """? or F1: the keys and marks."""
        from evotui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen())

    def _index_of(self, task_id: str, exp_id: str) -> str:
        """"#N" for an attempt of the task shown in the tree, else "an earlier attempt"."""
        tree = self.query_one(AttemptTree)
        if tree.task_id == task_id:
            for line in tree.attempt_lines:
                if line.id == exp_id:
                    return f"#{line.index}"
        return "an earlier attempt"

    def _title_attempts(self) -> None:
        tree = self.query_one(AttemptTree)
        row = self.tasks.get(self.task_id or "")
        if row is None:
            tree.border_title = "Attempts"
            return
        stage = "refining" if row.stage == "refine" else "drafting"
        best = f" · best {marks.speedup(row.best_speedup)}" if row.best_speedup else ""
        tree.border_title = f"{row.id} · {stage}{best}"
        lines = tree.attempt_lines
        repeats = sum(line.repeats for line in lines)
        subtitle = plural(len(lines), "attempt") + (f" · {plural(repeats, 'repeat')}" if repeats else "")
        repeated = self.repeats.get(row.id)
        if repeated is not None:
            subtitle += f" · last: a repeat of {self._index_of(row.id, repeated)}"
        tree.border_subtitle = subtitle

    # -- loading -------------------------------------------------------------------------------------

    def _show_status_line(self) -> None:
        """The highlighted task's whole status under the table when its cell cuts it (a narrow pane, a
        long verdict: "#2 edit ✗ build: error: expected ';'..."), hidden otherwise."""
        line = self.query_one("#status-line", Static)
        text = self.query_one(TaskTable).cut_status(self.current_task)
        line.update(Text(f"{self.current_task}: {text}", style="dim") if text else "")
        line.set_class(bool(text), "shown")

    def on_statuses_drawn(self, message: StatusesDrawn) -> None:
        if self.current_task in message.task_ids:
            self._show_status_line()

    def on_task_highlighted(self, message: TaskHighlighted) -> None:
        if message.task_id == self.current_task:
            self._show_status_line()
        if message.task_id == self.task_id or message.task_id != self.current_task:
            return  # the same task, or a highlight the cursor has already left
        self.task_id = message.task_id
        self._title_attempts()
        self.post_message(ReadAttempts(task_id=message.task_id, reply_to=self))

    def on_attempts_loaded(self, message: AttemptsLoaded) -> None:
        if message.task_id != self.task_id:
            return
        tree = self.query_one(AttemptTree)
        tree.show(message.task_id, message.lines, follow=self.follow)
        self.follow = None
        self._title_attempts()
        line = self.current_attempt
        if message.first is not None and line is not None and line.id == message.first.id and (
                self.shown_exp is None or self.shown_exp.id != line.id):
            self.shown_exp, self.parent_exp = message.first, message.first_parent
            self._show_code()
        if not message.lines:
            self.shown_exp = self.parent_exp = None
            self.query_one(CodeView).border_title = "Code"
            self.query_one(CodeView).show_message(
                f"No attempts for {message.task_id} yet. Press r to run, s to run this task, "
                f"or e to edit kernels/{message.task_id}/ (saving re-verifies it).")

    def on_attempt_highlighted(self, message: AttemptHighlighted) -> None:
        line = self.current_attempt
        if line is None or line.id != message.exp_id:
            return  # a highlight the cursor has already left
        if self.shown_exp is not None and self.shown_exp.id == message.exp_id:
            return
        self.post_message(ReadAttempt(exp_id=message.exp_id, reply_to=self))

    def on_attempt_loaded(self, message: AttemptLoaded) -> None:
        line = self.current_attempt
        if message.exp is None or line is None or message.exp.id != line.id:
            return
        self.shown_exp, self.parent_exp = message.exp, message.parent
        self._show_code()

    def on_task_rows_loaded(self, message: TaskRowsLoaded) -> None:
        self.show_tasks(message.rows)
        self._title_attempts()

    MODES = ("code", "diff", "answer", "assembly")

    @property
    def diff_mode(self) -> bool:
        return self.mode == "diff"

    def action_toggle_diff(self) -> None:
        """d: the code, then the diff against the parent, then the model's raw answer, in turn."""
        if self.current_attempt is None:
            self.app.notify(f"{self.current_task or 'This task'} has no attempts yet: nothing to show a diff or "
                            "answer of (r runs, e edits).", severity="warning", markup=False)
            return
        self.mode = self.MODES[(self.MODES.index(self.mode) + 1) % len(self.MODES)] if self.mode in self.MODES \
            else "code"   # from the side by side (c), back to the code
        self._show_code()

    def action_compare(self) -> None:
        """c: mark the selected attempt; c on another attempt shows the two side by side (again: back to code)."""
        line = self.current_attempt
        if line is None or self.shown_exp is None or self.shown_exp.id != line.id:
            self.app.notify("Select an attempt to compare (the attempt tree).", severity="warning", markup=False)
            return
        if self.mode == "compare" or self.marked is None or self.marked[0] == line.id:
            if self.mode == "compare":
                self.mode, self.marked = "code", None
            else:
                self.marked = (line.id, f"#{line.index}", dict(self.shown_exp.files))
                self.app.notify(f"#{line.index} marked: c on another attempt shows both side by side",
                                markup=False)
            self._show_code()
            return
        self.mode = "compare"
        self._show_code()

    def on_assembly_loaded(self, message: AssemblyLoaded) -> None:
        self.assembly = (message.exp_id, message.text)
        if self.mode == "assembly" and self.shown_exp is not None and self.shown_exp.id == message.exp_id:
            self._show_code()

    def on_answer_loaded(self, message: AnswerLoaded) -> None:
        if self.mode == "answer" and self.shown_exp is not None and self.shown_exp.id == message.exp_id:
            self.answer = (message.exp_id, message.text)
            self._show_code()

    def _show_code(self) -> None:
        view = self.query_one(CodeView)
        line = self.current_attempt
        if self.shown_exp is None or line is None:
            return
        here = f"#{line.index}"
        result = outcome_of(self.shown_exp)
        view.border_subtitle = marks.short_verdict(result)
        failure = "" if result.feasible or not result.verified else marks.failure_text(result)
        if self.mode == "diff" and self.parent_exp is not None:
            there = f"#{line.parent_index}" if line.parent_index else "parent"
            view.border_title = f"{here} {line.stage} · diff vs {there}"
            view.show_diff(unified_diff(self.parent_exp.files, self.shown_exp.files, there, here))
        elif self.mode == "diff":
            view.border_title = f"{here} {line.stage} · a root: no parent to diff against"
            view.show_files(self.shown_exp.files, failure)
        elif self.mode == "compare" and self.marked is not None:
            from core.inspection import side_by_side

            view.border_title = f"{self.marked[1]} | {here} · side by side"
            view.show_text(side_by_side(self.marked[2], self.shown_exp.files, self.marked[1], here,
                                        max(80, view.size.width - 2)), "")
        elif self.mode == "assembly":
            view.border_title = f"{here} {line.stage} · its hot loops' assembly"
            if self.assembly is None or self.assembly[0] != self.shown_exp.id:
                view.show_text("", "building (from the cache) and disassembling…")
                self.post_message(ReadAssembly(exp_id=self.shown_exp.id, reply_to=self))
            else:
                view.show_text(self.assembly[1], "")
        elif self.mode == "answer":
            view.border_title = f"{here} {line.stage} · the model's answer"
            if line.source != "llm":
                view.show_text("", f"{here} is a {line.source} attempt: there is no model answer (d: its code).")
            elif self.answer is None or self.answer[0] != self.shown_exp.id:
                view.show_text("", "reading the answer…")
                self.post_message(ReadAnswer(exp_id=self.shown_exp.id, reply_to=self))
            elif self.answer[1] is None:
                view.show_text("", "this answer is no longer in the response cache.")
            else:
                view.show_text(self.answer[1], failure)
        else:
            view.border_title = f"{here} {line.stage} · {line.source}"
            view.show_files(self.shown_exp.files, failure)

    # -- engine events -------------------------------------------------------------------------------

    def apply_event(self, e: ev.Event) -> None:
        """Update the panes for one core event (the app calls this in emission order)."""
        table = self.query_one(TaskTable)
        if isinstance(e, ev.RunStarted):
            for task in e.tasks:
                table.set_status(task, "queued", "dim")
                table.update_task(task, budget=e.iterations)
            self.note(f"run {e.run_id} {'resumed' if e.resumed else 'started'}: {plural(len(e.tasks), 'task')} × "
                     f"{e.iterations} iterations · {e.method} · model {e.model}", "ok", e.at)
            if e.limits:
                self.note(f"model: {e.limits}", "dim", e.at)
        elif isinstance(e, ev.IterationStarted):
            self.note(f"iteration {e.iteration + 1}: {plural(e.active_tasks, 'task')}", "dim", e.at)
        elif isinstance(e, ev.TaskStageChanged):
            table.update_task(e.task, stage=e.stage)
        elif isinstance(e, ev.PromptSent):
            # no #n before the attempt is recorded (the tree gives it then); the iter column counts the run
            table.set_status(e.task, f"{e.stage}: asking", "busy")
            self.asking[e.task] = e.stage
        elif isinstance(e, ev.AnswerProgress):
            if e.task in self.asking:   # a call in flight: how long it has waited, and the tokens so far
                table.set_status(e.task, f"{self.asking[e.task]}: {marks.waiting_words(e.seconds, e.tokens, e.sent)}",
                                 "busy")
        elif isinstance(e, ev.CallRetried):
            self.note(f"{e.task}: {e.reason}; try {e.next_try} of {e.tries} in {e.wait_s:.0f} s", "warn", e.at)
        elif isinstance(e, ev.PromptFitted):
            left = f"; left out: {'; '.join(e.left_out)}" if e.left_out else ""
            self.note(f"{e.task}: prompt fitted to the model's context (about {e.prompt_tokens:,} tokens, answer "
                      f"budget {e.max_tokens:,}){left}", "dim", e.at)
        elif isinstance(e, ev.ResponseReceived):
            self.asking.pop(e.task, None)
            if not e.cached:
                self.note(f"{e.task}: answered in {e.seconds:.0f} s, {e.tokens_out:,} tokens", "dim", e.at)
            if e.problem:
                table.set_status(e.task, "answer unusable", "fail")
            else:
                table.set_status(e.task, "verifying", "busy")
        elif isinstance(e, ev.GateChecked) and e.status == "waiting":
            # the machine's timing lock is held (another workspace's run, a verify): said as such, with who holds it
            table.set_status(e.task, f"{'edit ' if e.iteration < 0 else ''}waiting: timing lock", "busy")
            self.note(f"{e.task}: {marks.GATE_LABELS.get(e.gate, e.gate)} {e.message}", "dim", e.at)
        elif isinstance(e, ev.GateChecked):
            label = "edit " if e.iteration < 0 else ""
            failed = e.status == "failed"
            table.set_status(e.task, f"{label}{marks.GATE_LABELS.get(e.gate, e.gate)} {marks.mark(e.status)}",
                             "fail" if failed else "busy")
        elif isinstance(e, ev.AttemptRecorded):
            self._attempt_recorded(e)
        elif isinstance(e, ev.ValuesUpdated):
            if e.changes:
                delta = sum(after - before for _, before, after in e.changes) / len(e.changes)
                stage = "1" if e.stage == "draft" else "2"
                self.note(f"{e.task}: Q{stage} {delta:+.2f} on {plural(len(e.changes), 'item')}"
                         f" (reward {marks.reward(e.reward)})", "dim", e.at)
        elif isinstance(e, ev.EditDetected):
            table.set_status(e.task, "edit: verifying", "busy")
            # a save in another suite's folder is that suite's task's: said, since the table does not show it
            where = f" (a task of suite {e.suite}, not of the one shown)" if e.suite else ""
            if e.resumed:
                self.note(f"{e.task}{where}: hand edit ({', '.join(e.files)}) saved before the workbench last closed, "
                          "its verification cut short: verifying it now", "", e.at)
            else:
                self.note(f"{e.task}{where}: hand edit saved ({', '.join(e.files)}), verifying", "", e.at)
        elif isinstance(e, ev.Notice):
            self.note(e.message, "warn", e.at)
        elif isinstance(e, ev.SizingProgress):
            if e.total == 0:
                return
            if e.done == 1:
                self.note(f"sizing {e.total} tasks in the background (--size-scale auto, recorded once): the table "
                          "shows the others as written meanwhile; a run or a save sizes its own task first", "dim",
                          e.at)
            self.note(f"sized {e.done}/{e.total}: {e.task} {e.said}", "dim", e.at)
            table.set_status(e.task, "sized" if not e.said.startswith("not sized") else "not sized", "dim")
            if e.category:
                table.update_task(e.task, category=e.category)
            if e.done == e.total:
                self.note(f"every task sized ({e.total})", "ok", e.at)
        elif isinstance(e, ev.BudgetSpent):
            self.note(f"{e.task}: budget spent ({e.iterations} iterations)", "dim", e.at)
        elif isinstance(e, ev.EngineProblem):
            if e.task:
                table.set_status(e.task, "problem", "fail")
            self.note(f"{'error' if e.fatal else 'problem'}: {e.message}", "fail" if e.fatal else "warn", e.at)
        elif isinstance(e, ev.ClusterChanged):
            self.note(f"cluster: {e.message}", "warn" if e.waiting else "dim", e.at)
        elif isinstance(e, ev.ConfigReloaded):
            if e.taken:
                self.note(f"evokernel.toml changed: {', '.join(e.taken)} taken from this run on", "", e.at)
            if e.needs_restart:
                self.note(f"evokernel.toml changed: {', '.join(e.needs_restart)} take effect once the workbench is "
                          "opened again (q, then evokernel)", "warn", e.at)
        elif isinstance(e, ev.RunFinished):
            for task in list(self.asking):   # a call the run's end left unanswered is no longer asking
                table.set_status(task, f"{self.asking.pop(task)}: {e.status.split(' (')[0]}", "dim")
            summary = e.summary or {}
            if e.forgotten:
                self.note(f"run {e.run_id} failed before its first answer: nothing recorded, no run to resume",
                          "warn", e.at)
                return
            self.note(f"run {e.run_id} {e.status}: {summary.get('feasible', 0)} of "
                     f"{plural(summary.get('tasks', 0), 'task')} feasible", "ok" if e.status == "finished" else "warn",
                     e.at)

    def verdicts_since(self, since: float) -> list[str]:
        """The attempts recorded since ``since``, one "task #n: verdict" each (the editor's summary)."""
        return [text for at, text in self.verdicts if at >= since]

    def _attempt_recorded(self, e: ev.AttemptRecorded) -> None:
        table = self.query_one(TaskTable)
        human = e.source == "human"
        label = marks.attempt_label(e.number, human)
        out = e.outcome
        verdict = marks.verdict(out)
        self.verdicts = [*self.verdicts[-49:], (e.at, f"{e.task} {label}: {marks.short_verdict(out)}"
                                                       + (" (the same code)" if e.duplicate else ""))]
        table.set_status(e.task, f"{label} {verdict}", "dim" if out.not_judged else "ok" if out.feasible else "fail")
        changes: dict[str, Any] = {}
        if not human:
            changes["used"] = e.iteration + 1
        if out.feasible and not out.not_judged:
            changes["stage"] = "refine"
        if e.new_best:
            changes.update(best_speedup=out.speedup, best_ms=out.latency_ms)
        if changes:
            table.update_task(e.task, **changes)
            row = table.rows_by_id.get(e.task, self.tasks.get(e.task))
            if row is not None:
                self.tasks[e.task] = row
        who = marks.attempt_label(e.number, human, e.stage)
        best = " · new best" if e.new_best else ""
        if e.duplicate:
            # Not stored again (the same code as an attempt in memory, comments and spacing aside): say
            # which one, and that the tree keeps that attempt's own verdict and reward.
            same = f"#{e.number}" if e.number is not None else self._index_of(e.task, e.experience_id)
            self.repeats[e.task] = e.experience_id
            credited = "" if human else f"; this answer's reward {marks.reward(e.reward)} went to its context"
            self.note(f"{e.task} {who}: {verdict} · the same code as {same} (comments and spacing aside): "
                      f"not stored again, the tree keeps {same}'s reward{credited}", "dim", e.at)
            self._attempt_shown(e)
            return
        self.repeats.pop(e.task, None)
        if e.not_judged:
            stays = (f"; the next save's parent stays {self._index_of(e.task, e.parent_id) if e.parent_id else 'none'}"
                     if human else "")
            self.note(f"{e.task} {who}: {marks.verdict(out)}: verified twice, judged neither time; no verdict, "
                      f"no reward, no value moved, never a parent or a start point{stays}", "warn", e.at)
            self._attempt_shown(e)
            return
        full = marks.full_verdict(out)
        reason = e.reason   # said once, by the engine, with the reward
        correct = out.gate_or_none("correctness")
        if human and not (correct is not None and correct.passed):
            # a typo or a wrong result is recorded, but the next save descends from the last working version
            parent = self._index_of(e.task, e.parent_id) if e.parent_id else "a new root"
            reason += f"; the next save's parent stays {parent}"
        self.note(f"{e.task} {who}: {full} · reward {marks.reward(e.reward)}: {reason}{best}",
                  "ok" if out.feasible else "fail", e.at)
        self._attempt_shown(e)

    def _attempt_shown(self, e: ev.AttemptRecorded) -> None:
        if e.task == self.task_id:
            self.follow = e.experience_id    # the tree goes to it (unless its cursor was moved by hand)
            self._title_attempts()
            self.post_message(ReadAttempts(task_id=e.task, reply_to=self))

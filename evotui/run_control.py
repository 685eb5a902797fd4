"""The app's commands that act on the workspace: start, pause and resume runs, run one task,
re-verify an attempt, open a candidate in $EDITOR, promote an attempt to kernels/<task>/.

Each runs as an async worker on the app's loop that awaits work submitted to the engine host, so the
interface never waits on a build, an LLM call or a store write.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from textual.app import SuspendNotSupported

from core.errors import ConfigError, LLMError, RunAlreadyFinished
from core.workspace_files import read_candidate_files
from evotui.app_parts import AppParts
from evotui.messages import Promoted, RunRefused, VerifyFinished
from evotui.widgets import marks
from evotui.widgets.code_view import file_order
from evotui.widgets.task_table import TaskTable

BUSY = ("starting", "running", "pausing")
RESUMES = ("paused", "failed")   # r resumes the run these states name


def editor_command(environ: Mapping[str, str] | None = None) -> list[str] | str:
    """The editor to start ($VISUAL, else $EDITOR, else vi) as an argument list, or one line saying
    why there is none (a name that is not on PATH, a path that does not exist, bad quoting)."""
    environ = os.environ if environ is None else environ
    name, spec = next(((n, environ[n]) for n in ("VISUAL", "EDITOR") if environ.get(n, "").strip()), ("", "vi"))
    where = f"${name}" if name else "the default editor"
    try:
        command = shlex.split(spec)
    except ValueError as exc:
        return f"{where} ({spec}) cannot be read: {exc}; set VISUAL or EDITOR to an editor command"
    if not command:
        return f"{where} is empty; set VISUAL or EDITOR to an editor command"
    if shutil.which(command[0]) is None:
        return f"{where} ({command[0]}) was not found; set VISUAL or EDITOR to an installed editor"
    return command


EDIT_SUMMARY_DELAY_S = 0.5   # after the editor returns: the events queued meanwhile are handled by then


def tmux_split(argv: list[str], folder: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """Open the editor in a tmux pane beside the workbench when it runs inside tmux (the workbench stays on
    screen, its verdicts with it); what to say in the log, or None when there is no tmux session to split."""
    environ = os.environ if environ is None else environ
    if not environ.get("TMUX") or shutil.which("tmux") is None:
        return None
    done = subprocess.run(["tmux", "split-window", "-h", "-c", str(folder), shlex.join(argv)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None   # a session that cannot be split: the editor takes the terminal as usual
    return "the editor is open in a tmux pane beside the workbench: verdicts show here as you save"


VI_FAMILY = ("vi", "vim", "nvim", "gvim", "mvim", "vim.basic", "vim.tiny", "vim.nox", "vim.gtk3")
SPLITS = ("-o", "-O", "-p")


def editor_argv(command: list[str], paths: list[str]) -> list[str]:
    """The editor's argument list for ``paths``. vi and its kin get several files side by side (``-O``),
    so each is open and ``:q`` never stops at "E173: 1 more file to edit"; a split the person chose
    stays; other editors get the files as they are."""
    name = Path(command[0]).name
    real = Path(shutil.which(command[0]) or command[0]).resolve().name
    if len(paths) > 1 and (name in VI_FAMILY and real in VI_FAMILY) and not set(command[1:]) & set(SPLITS):
        return [*command, "-O", *paths]
    return [*command, *paths]


class RunControl(AppParts):
    """Mixed into the app, which provides ``host``, ``main``, ``run_status``, ``set_run_state`` and
    ``open_problem`` (why the workspace could not be opened, or None)."""

    def unavailable(self, doing: str) -> bool:
        """Say why ``doing`` cannot happen yet (the workspace is opening, or could not be opened) and
        return True; False when the workspace is open."""
        if self.open_problem is not None:
            self.notify(f"Cannot {doing}: the workspace could not be opened ({self.open_problem}).",
                        title="Workspace not open", severity="error", markup=False)
            return True
        if self.host.session is None or self.run_status.state == "opening":
            self.notify(f"Cannot {doing} yet: the workspace is still opening.", markup=False)
            return True
        return False

    # -- runs ---------------------------------------------------------------------------------------

    def action_run_toggle(self) -> None:
        """r: start a run (marked tasks, else all), pause it, or resume it."""
        state = self.run_status.state
        if self.unavailable("start a run"):
            return
        if state in ("starting", "running"):
            self.host.stop_run()
            self.set_run_state("pausing")
            self.notify("Pausing: the attempts in flight finish first.")
        elif state == "pausing":
            self.notify("Still pausing: waiting for the attempts in flight.")
        elif state in RESUMES and self.run_status.run_id:
            self.start_run(resume=self.run_status.run_id)
        else:
            selection = self.main.run_selection()
            if selection is None and self.run_status.llm_ok:   # the whole suite: ask first, with what it may cost
                self.confirm_full_run()
            else:
                self.start_run(selection)

    def confirm_full_run(self) -> None:
        """Ask before a run over the whole suite (y starts it); a run over marked tasks starts at once."""
        from evotui.screens.confirm_run import ConfirmRunScreen, confirm_text

        config = self.host.opened.config
        text = confirm_text(len(self.main.tasks), config.engine.iterations, config.llm.model or "the model",
                            config.llm.token_budget, config.llm.cost_budget)

        def answered(start: bool | None) -> None:
            if start:
                self.start_run(None)
            else:
                self.main.note("run not started: mark tasks with space to run fewer", "dim")

        self.push_screen(ConfirmRunScreen(text), answered)

    def action_run_task(self) -> None:
        """s: run only the task under the cursor."""
        task = self.main.current_task
        if self.unavailable("run a task"):
            return
        if self.run_status.state in BUSY:
            self.notify("A run is in progress: pause it first (r).", severity="warning")
        elif task is not None:
            self.start_run([task])

    def start_run(self, task_ids: list[str] | None = None, resume: str | None = None) -> None:
        self._before_start = (self.run_status.state, self.run_status.run_id)
        self.set_run_state("starting", resume)
        self.run_worker(self._drive_run(task_ids, resume), group="run", exit_on_error=False, name="the run")

    async def _drive_run(self, task_ids: list[str] | None, resume: str | None) -> None:
        try:
            await self.host.run(task_ids, resume)
        except (LLMError, ConfigError) as exc:
            self.post_message(RunRefused(str(exc)))
        except RunAlreadyFinished as exc:
            self.post_message(RunRefused(str(exc), finished=True))

    def on_run_refused(self, message: RunRefused) -> None:
        if message.finished:   # finished by another process: nothing to resume, and its rows are what it left
            self.set_run_state("finished", self._before_start[1])
            self.load_task_rows(self.main)
            self.main.note(message.reason, "dim")
            return
        self.set_run_state(*self._before_start)   # a run to resume stays one
        self.main.note(f"cannot start a run: {message.reason} (to watch one with no LLM at all: "
                       "`evokernel run --model demo`, canned answers)", "warn")
        self.notify(message.reason, title="Cannot start a run", severity="error", timeout=12, markup=False)

    # -- one attempt --------------------------------------------------------------------------------

    def action_verify(self) -> None:
        """v: verify the selected attempt again (or the task's folder when it has none); records nothing."""
        task = self.main.current_task
        if self.unavailable("verify") or task is None:
            return
        line, exp = self.main.current_attempt, self.main.shown_exp
        if line is not None and exp is not None and exp.id == line.id and exp.files:
            files, label = exp.files, f"#{line.index}"
        else:
            files, label = read_candidate_files(self.workspace.kernels_dir / task), f"kernels/{task}/"
            if not files:
                self.notify(f"Nothing to verify: no attempt selected and kernels/{task}/ is empty (e creates it).",
                            severity="warning")
                return
        self.main.note(f"{task} {label}: re-verifying")
        self.main.query_one("#tasks", TaskTable).set_status(task, f"{label} re-verifying", "busy")
        self.run_worker(self._verify(task, label, files), group="verify", exit_on_error=False, name="verifying")

    async def _verify(self, task: str, label: str, files: dict[str, str]) -> None:
        outcome = await self.host.verify(task, files)
        self.post_message(VerifyFinished(task, label, outcome))

    def on_verify_finished(self, message: VerifyFinished) -> None:
        verdict = marks.verdict(message.outcome)
        ok = message.outcome.feasible
        self.main.query_one("#tasks", TaskTable).set_status(message.task_id, f"{message.label} {verdict}",
                                                            "ok" if ok else "fail")
        self.main.note(f"{message.task_id} {message.label} re-verified: {verdict}", "ok" if ok else "fail")
        self.notify(verdict, title=f"{message.task_id} {message.label}", severity="information" if ok else "error")

    def action_edit(self) -> None:
        """e: open kernels/<task>/ in $EDITOR (a starter or the best candidate when it is empty)."""
        task = self.main.current_task
        if self.unavailable("edit") or task is None:
            return
        if task is not None:
            self.run_worker(self._edit(task), group="edit", exit_on_error=False, name="opening the editor")

    async def _edit(self, task: str) -> None:
        command = editor_command()
        if isinstance(command, str):   # no editor to start: say so in one line, never suspend for it
            self.main.note(command, "warn")
            self.notify(command, title="No editor", severity="error", markup=False)
            return
        folder = await self.host.task_folder(task)
        paths = [str(folder / name) for name in file_order(read_candidate_files(folder))]
        hint = f"Edit {folder}: saving re-verifies it."
        names = ", ".join(p.rsplit("/", 1)[-1] for p in paths)
        self.main.note(f"{task}: {names} in kernels/{task}/; saving re-verifies")
        split = tmux_split(editor_argv(command, paths), folder)
        if split is not None:   # beside the workbench, which keeps showing every verdict
            self.main.note(split, "dim")
            return
        failed = None
        since = time.time()
        try:
            with self.suspend():
                # Anything raised here must not leave the block: Textual resumes the terminal only
                # when it ends normally (an exception would leave it suspended, keys echoed raw).
                try:
                    subprocess.run(editor_argv(command, paths), cwd=folder, check=False)
                except OSError as exc:
                    failed = exc
        except SuspendNotSupported:
            self.notify(hint, title="No terminal to hand over", markup=False)
        if failed is not None:
            text = f"could not start {command[0]}: {failed.strerror or failed}. {hint}"
            self.main.note(text, "warn")
            self.notify(text, title="Could not start the editor", severity="error", markup=False)
        else:   # the verdicts that came in while the editor hid the workbench, once their events are in
            self.set_timer(EDIT_SUMMARY_DELAY_S, lambda: self._edit_summary(since))

    def _edit_summary(self, since: float) -> None:
        """Say what was verified while an editor held the terminal (its verdicts queued unseen)."""
        lines = self.main.verdicts_since(since)
        if not lines:
            return
        text = f"while the editor was open: {'; '.join(lines)}"
        self.main.note(text, "ok")
        self.notify("\n".join(lines), title="Verified while you edited", markup=False)

    def action_promote(self) -> None:
        """p: put the selected attempt's files in kernels/<task>/."""
        line = self.main.current_attempt
        if self.unavailable("promote"):
            return
        task = self.main.task_id
        if line is None or task is None:
            self.notify("Select an attempt to promote.", severity="warning")
            return
        self.run_worker(self._promote(task, line.id), group="promote", exit_on_error=False,
                        name="promoting")

    async def _promote(self, task: str, exp_id: str) -> None:
        folder = await self.host.promote(exp_id)
        self.post_message(Promoted(task, exp_id, folder))

    def on_promoted(self, message: Promoted) -> None:
        line = self.main.current_attempt
        label = f"#{line.index}" if line is not None and line.id == message.exp_id else message.exp_id
        self.main.note(f"{message.task_id}: attempt {label} promoted to kernels/{message.task_id}/", "ok")
        self.notify(f"kernels/{message.task_id}/ now holds attempt {label}.", title="Promoted")

"""``evokernel run``: a headless run (or resume, or replay) with a live progress table."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Group
    from rich.live import Live

    from core import events as ev
    from core.attempts import RunRecord
    from core.session import Session
    from core.tasks import Task


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run EvoKernel (or a baseline) over tasks, headless")
    p.add_argument("--suite", default=None, help='"builtin" (default) or a folder of KernelBench-format files')
    p.add_argument("--level", type=int, default=None, help="only tasks of this level")
    p.add_argument("--tasks", default=None, help="comma-separated task ids")
    p.add_argument("--backend", default=None, help="cpu (default), cuda or ascend")
    p.add_argument("--iterations", type=int, default=None, help="verifier calls per task (default 30)")
    p.add_argument("--method", default="evokernel", choices=["evokernel", "passk", "refinement"])
    p.add_argument("--size-scale", default=None, help='scale module-level sizes: a factor in (0, 1] or "auto"')
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", nargs="?", const="", default=None, metavar="RUN",
                   help="continue an interrupted run (the latest unfinished one by default)")
    p.add_argument("--replay", nargs="?", const="", default=None, metavar="RUN",
                   help="run a recorded run again from the LLM response cache, without the endpoint")
    p.add_argument("--model", default=None, metavar="NAME",
                   help="the model to ask at the endpoint; `demo`: the shipped canned model (no endpoint, no LLM: "
                        "canned answers for a few built-in tasks, verified for real)")
    p.add_argument("--cluster", default=None, metavar="ADDRESS",
                   help='verify on a Ray cluster: local, auto or ray://host:port (default: [cluster] address)')
    p.add_argument("--quiet", action="store_true", help="no live table; one line per attempt")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.session import Session
    from core.workspace import Workspace

    ws = Workspace.at(args.workspace)
    new = not ws.exists()
    with Session(ws, replay=args.replay is not None, backend=args.backend, cluster=args.cluster,
                 model=args.model) as session:
        reporter = Reporter(quiet=args.quiet or not sys.stdout.isatty())
        session.bus.subscribe(reporter.on_event)
        if args.resume is not None:
            record, picked = session.pick_resume(args.resume or None)
            print(picked, file=sys.stderr)
            coro = session.resume(record)
        elif args.replay is not None:
            coro = session.replay(session.find_run(args.replay or None))
        else:
            if args.iterations is not None and args.iterations < 1:
                from core.errors import ConfigError

                raise ConfigError(f"--iterations must be at least 1 (got {args.iterations})")
            ids = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks is not None else None
            tasks = session.tasks(ids, level=args.level, suite=args.suite, scale=args.size_scale)
            if session.demo:
                from core.demo import DEMO_ITERATIONS

                tasks = _demo_tasks(tasks, ids is not None)
                args.iterations = args.iterations or DEMO_ITERATIONS
            problem = session.llm_problem()
            if problem:
                from core.errors import LLMError

                raise LLMError(problem)
            if new:
                # a run in a folder without a workspace makes one, as the workbench does (once the run is sure to
                # start): the config to edit and the kernels/ folder its bests are written to, not only the memory
                created = [c for c in ws.init() if c != ".evokernel/"]
                if created:
                    print(f"made a workspace here: {', '.join(created)} beside .evokernel/ (the built-in suite, the "
                          f"{session.config.backend} backend; edit evokernel.toml to change them)", file=sys.stderr)
            for t in tasks:
                if t.size_overrides:
                    print(f"{t.id}: {t.scale_note()}", file=sys.stderr)
            coro = session.run(tasks, method=args.method, iterations=args.iterations, suite=args.suite,
                               scale=args.size_scale, seed=args.seed)
        with reporter:
            try:
                record = asyncio.run(_with_close(session, coro))
            except KeyboardInterrupt:
                print("\ninterrupted: progress is saved; continue with `evokernel run --resume`", file=sys.stderr)
                return 130
    print(run_summary(record))
    return 0 if record.status in ("finished", "budget") else 1


def _demo_tasks(tasks: list[Task], named: bool) -> list[Task]:
    """The tasks the demo model has canned answers for (all the named ones must be), said on stderr."""
    from core.demo import EXPRESSIONS, knows
    from core.errors import ConfigError

    unknown = [t.id for t in tasks if not knows(t.name)]
    if named and unknown:
        raise ConfigError(f"the demo model has no canned answers for {', '.join(unknown)}; it knows "
                          f"{', '.join(sorted(EXPRESSIONS))} (built-in suite)")
    chosen = [t for t in tasks if knows(t.name)]
    if not chosen:
        raise ConfigError(f"the demo model knows none of these tasks; it knows {', '.join(sorted(EXPRESSIONS))} "
                          "(built-in suite: `--suite builtin`)")
    print(f"demo: canned answers, not an LLM, for {len(chosen)} tasks ({', '.join(t.id for t in chosen)}); "
          "every answer is verified for real", file=sys.stderr)
    return chosen


def run_summary(record: RunRecord) -> str:
    """One readable line for a finished (or stopped, failed) run."""
    if record.extra.get("forgotten"):
        return (f"run {record.id} failed before its first answer: nothing was recorded (the error above says what "
                "to change; then run it again)")
    progress = record.progress.values()
    feasible = sum(1 for p in progress if p.feasible)
    done = max((p.iterations_used for p in progress), default=0)
    budget = record.config.get("iterations")
    tokens = record.tokens_in + record.tokens_out
    broken = [t for t, p in record.progress.items() if p.broken]
    said = f"; {len(broken)} ended early ({', '.join(broken[:3])}{'...' if len(broken) > 3 else ''})" if broken else ""
    from core.demo import DEMO_MODEL
    from evotui.widgets.marks import plural

    demo = " (a demo: canned answers, not an LLM)" if record.config.get("model") == DEMO_MODEL else ""
    return (f"run {record.id}{demo} {record.status}: {feasible} of {plural(len(record.tasks), 'task')} feasible after "
            f"{done} of {plural(budget or 0, 'iteration')}{said} · {tokens:,} tokens · ${record.cost:.2f} · "
            f"`evokernel report {record.id}` for the tables")


async def _with_close(session: Session, coro: Coroutine[Any, Any, RunRecord]) -> RunRecord:
    try:
        return await coro
    finally:
        await session.close_async()


def attempt_words(event: ev.AttemptRecorded) -> str:
    """A feasible attempt in one line: its latency, then what its own timing window says, in the words
    every surface uses (``verifier.verdict.words``): against PyTorch and, for a refinement, against
    the best timed beside it ("✓ 24.148 ms, same speed as PyTorch within ±4 %; 1.15x slower than the best
    [1.10, 1.20]"). A new best whose time is above the best it replaced says why: the two times come
    from different windows."""
    from core.policy import speed_words

    out = event.outcome
    words = f"✓ {out.latency_ms:.3f} ms"
    if out.speedup is not None:
        words += ", " + speed_words(out.vs_reference, out.speedup, out.speedup_ci, "PyTorch")
    if out.gain is not None and out.vs_best:
        words += "; " + speed_words(out.vs_best, out.gain, out.gain_ci, "the best")
    if not event.new_best:
        return words
    if event.replaced_ms and out.latency_ms is not None and out.latency_ms > event.replaced_ms:
        here = f" took {out.best_ms:.3f} ms" if out.best_ms else " was slower"
        return words + (f", new best (the best it replaced took {event.replaced_ms:.3f} ms in another window; "
                        f"timed beside this one it{here})")
    return words + ", new best"


REFUSAL_CHARS = 200
WAIT_LINE_S = 30.0    # piped output: a call in flight says how long it has waited this often


def refusal_words(event: ev.AttemptRecorded) -> str:
    """A failed attempt in one line: the gate and the start of its reason ("✗ anti_hack: private
    attribute _version is not allowed: ..."), never the gate's name alone."""
    from rich.markup import escape

    out = event.outcome
    message = " ".join(str(out.message or "").split())
    prefix = f"{out.failed_gate}: "
    if message.startswith(prefix):
        message = message[len(prefix):]
    if len(message) > REFUSAL_CHARS:
        message = message[:REFUSAL_CHARS].rsplit(" ", 1)[0] + " ..."
    return f"✗ {out.failed_gate}" + (f": {escape(message)}" if message else "")


class Reporter:
    """Renders engine events: a live table on a terminal, plain lines otherwise."""

    def __init__(self, quiet: bool):
        from rich.console import Console

        self.quiet = quiet
        # one line per attempt however long when the output is not a terminal (a log file is grepped by line)
        self.console = Console(stderr=False, soft_wrap=not sys.stdout.isatty())
        self.rows: dict[str, dict[str, Any]] = {}
        self.header = ""
        self.lines: list[str] = []
        self._live: Live | None = None
        self._waited: dict[str, float] = {}   # task -> the wait last said in a line (piped output)

    def __enter__(self) -> Reporter:
        if not self.quiet:
            from rich.live import Live

            self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(*exc)

    def _render(self) -> Group:
        from rich.console import Group
        from rich.table import Table

        table = Table(box=None, header_style="bold")
        for col in ("task", "stage", "iter", "best ms", "speedup", "now", "last"):
            table.add_column(col, overflow="ellipsis", no_wrap=True)
        for task, r in self.rows.items():
            table.add_row(task, r.get("stage", "draft"), str(r.get("iter", 0)),
                          f"{r['best']:.3f}" if r.get("best") else "-",
                          f"{r['speedup']:.2f}x" if r.get("speedup") else "-", r.get("now", ""), r.get("last", "")[:60])
        return Group(self.header, table, *self.lines[-6:])

    def on_event(self, event: ev.Event) -> None:
        from rich.markup import escape

        from core import events as ev

        name = type(event).__name__
        if isinstance(event, ev.RunStarted):
            self.header = (f"[bold]run {event.run_id}[/] · {event.method} · {event.backend} · "
                           f"model {escape(event.model)} · "
                           f"{len(event.tasks)} tasks x {event.iterations}{' (resumed)' if event.resumed else ''}")
            self.rows = {t: {} for t in event.tasks}
            if event.limits:
                self._line(f"model: {escape(event.limits)}")
        elif isinstance(event, ev.PromptSent):
            self.rows.setdefault(event.task, {})["now"] = "asking"
        elif isinstance(event, ev.AnswerProgress):
            self._waiting(event)
        elif isinstance(event, ev.CallRetried):
            self._line(f"{time.strftime('%H:%M:%S')} {event.task} [yellow]retry[/]: {escape(event.reason)}; try "
                       f"{event.next_try} of {event.tries} in {event.wait_s:.0f} s")
        elif isinstance(event, ev.PromptFitted):
            left = f"; left out: {'; '.join(event.left_out)}" if event.left_out else ""
            self._line(f"{time.strftime('%H:%M:%S')} {event.task} prompt fitted to the model's context: about "
                       f"{event.prompt_tokens:,} tokens, answer budget {event.max_tokens:,}{escape(left)}")
        elif isinstance(event, ev.ResponseReceived):
            row = self.rows.setdefault(event.task, {})
            row["now"] = "verifying" if not event.problem else ""
            self._waited.pop(event.task, None)
            if not event.cached:
                self._line(f"{time.strftime('%H:%M:%S')} {event.task} answered in {event.seconds:.0f} s: "
                           f"{event.tokens_out:,} tokens ({event.tokens_in:,} in the prompt)")
        elif isinstance(event, ev.AttemptRecorded):
            row = self.rows.setdefault(event.task, {})
            row["now"] = ""
            row["iter"] = event.iteration + 1
            row["stage"] = event.stage
            out = event.outcome
            row["last"] = "feasible" if out.feasible else f"{out.failed_gate}"
            if event.new_best:   # the engine's call: faster than the best in one window, never two latencies
                row["best"], row["speedup"] = out.latency_ms, out.speedup
            # as the workbench's tree numbers it; a repeat has no number of its own: it names the attempt it repeats
            number = f"#{event.number} " if event.number is not None and not event.duplicate else ""
            same = (f" (the same code as #{event.number}: not stored again)"
                    if event.duplicate and event.number is not None else "")
            line = (f"{time.strftime('%H:%M:%S')} {event.task} {number}{event.stage}{same}: "
                    + (attempt_words(event) if out.feasible else refusal_words(event)) +
                    f" reward {event.reward:+.2f}: {event.reason}")
            self._line(line)
        elif isinstance(event, ev.FinalWindow):   # best, first and PyTorch in one window, for the report
            self._line(f"{time.strftime('%H:%M:%S')} {event.task} final window: {escape(event.words)}")
        elif isinstance(event, ev.EngineProblem):
            self._line(f"[red]{'error' if event.fatal else 'problem'}[/]: {escape(event.message)}")
        elif isinstance(event, ev.Notice):
            self._line(f"[yellow]note[/]: {escape(event.message)}")
        elif isinstance(event, ev.ClusterChanged):
            self._line(f"{'[yellow]waiting[/]' if event.waiting else 'cluster'}: {escape(event.message)}")
        elif isinstance(event, ev.UsageUpdated):
            tokens = event.tokens_in + event.tokens_out
            self.header = self.header.split(" · tok")[0] + f" · tok {tokens:,} · ${event.cost:.2f}"
        elif isinstance(event, ev.RunFinished):
            for row in self.rows.values():
                row["now"] = ""   # nothing is in flight any more, whatever was when the run ended
        if self._live is not None and name in ("AttemptRecorded", "RunStarted", "UsageUpdated", "EngineProblem",
                                                   "ClusterChanged", "PromptSent", "AnswerProgress", "CallRetried",
                                                   "PromptFitted", "ResponseReceived", "RunFinished"):
            self._live.update(self._render())

    def _waiting(self, event: ev.AnswerProgress) -> None:
        """A call in flight: its wait in the live table's ``now`` column; piped, a line every ``WAIT_LINE_S``."""
        from evotui.widgets.marks import waiting_words

        words = waiting_words(event.seconds, event.tokens, event.sent)
        self.rows.setdefault(event.task, {})["now"] = words
        if self.quiet and event.seconds - self._waited.get(event.task, 0.0) >= WAIT_LINE_S:
            self._waited[event.task] = event.seconds
            self._line(f"{time.strftime('%H:%M:%S')} {event.task} {words}")

    def _line(self, text: str) -> None:
        if self.quiet:
            self.console.print(text, highlight=False)
        else:
            self.lines.append(text)

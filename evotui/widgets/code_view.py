"""The selected attempt's files with syntax highlighting, or a unified diff against its parent."""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import PurePath

from rich.cells import cell_len
from rich.syntax import Syntax
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

CUT_CACHE = 32
LEXERS = {".py": "python", ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".h": "cpp", ".hpp": "cpp",
          ".cu": "cuda", ".cuh": "cuda", ".asc": "cpp"}


def pane_background(widget) -> str:
    """The widget's background as #rrggbb, so highlighted code sits on the pane, not on a box."""
    return widget.background_colors[1].hex


def file_order(names) -> list[str]:
    """Kernel sources first, headers next, model.py last."""
    def key(name: str):
        suffix = PurePath(name).suffix
        return (name == "model.py", suffix in (".h", ".hpp", ".cuh"), name)
    return sorted(names, key=key)


def unified_diff(old: dict[str, str], new: dict[str, str], old_label: str, new_label: str) -> str:
    """A unified diff of every file of two candidates ("" when they are the same)."""
    chunks: list[str] = []
    for name in file_order(set(old) | set(new)):
        a, b = old.get(name, ""), new.get(name, "")
        if a == b:
            continue
        chunks.extend(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                           fromfile=f"{old_label}/{name}", tofile=f"{new_label}/{name}", n=3))
        if chunks and not chunks[-1].endswith("\n"):
            chunks[-1] += "\n"
    return "".join(chunks)


@lru_cache(maxsize=64)
def highlight(code: str, lexer: str, theme: str, background: str, numbers: bool = True) -> Text:
    """Code as highlighted Text, numbered (do not modify it: results are cached, as going back and
    forth between tasks shows the same files again). Highlighting once here, not in every render as
    a Syntax renderable would, keeps redraws cheap while a run keeps the screen busy."""
    syntax = Syntax("", lexer, theme=theme, background_color=background)
    body = syntax.highlight(code.rstrip("\n"))
    body.rstrip()
    if not numbers:
        return body
    lines = body.split("\n", allow_blank=True)
    digits = len(str(len(lines)))
    out = Text(no_wrap=True, end="")
    for n, line in enumerate(lines, 1):
        out.append(f"{n:>{digits}}  ", style="dim")
        out.append_text(line)
        if n < len(lines):
            out.append("\n")
    return out


def heading(name: str, width: int) -> Text:
    return Text(f"── {name} " + "─" * max(3, width - len(name) - 4), style="dim", no_wrap=True)


class CodeView(ScrollView, can_focus=True):
    """Shows files (``show_files``) or a diff (``show_diff``); the screen picks which.

    Content is highlighted and cut into lines once per change and drawn line by line, so a new
    attempt costs a repaint of this pane, never a layout of the screen (a run keeps other panes busy).
    """

    DEFAULT_CSS = """
    CodeView { height: 1fr; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._content: tuple = ("empty", "Select an attempt to see its code.")
        self._body = Text()
        self._strips: list[Strip] = []
        self._wraps = True
        self._key: tuple = ("empty", (), "", "")
        self._cuts: dict[tuple, tuple] = {}     # (content, theme, width) -> (body, strips), oldest first

    def on_mount(self) -> None:
        self._redraw()

    def on_resize(self) -> None:
        if self._wraps or self._note():     # hints and a failure's message wrap to the pane's width
            self._cut()

    def _note(self) -> str:
        """The text above the content (a failure's whole message), wrapped to the pane; "" when none."""
        return str(self._content[2]) if self._content[0] in ("files", "text", "diff") else ""

    def _syntax_theme(self) -> str:
        return "monokai" if self.app.current_theme.dark else "friendly"

    def show_message(self, text: str) -> None:
        self._content = ("empty", text)
        self._redraw()

    def show_files(self, files: dict[str, str], note: str = "") -> None:
        """The files, highlighted; ``note`` (e.g. a failure's whole message) above them."""
        self._content = ("files", files, note)
        self._redraw()

    def show_text(self, text: str, note: str = "") -> None:
        """Plain text as it is (the model's answer), not wrapped."""
        self._content = ("text", text, note)
        self._redraw()

    def show_diff(self, diff: str, note: str = "") -> None:
        self._content = ("diff", diff, note)
        self._redraw()

    def restyle(self) -> None:
        """Re-render with the current theme's colours."""
        self._redraw()

    @property
    def text(self) -> str:
        """What the view shows, as plain text."""
        return self._body.plain

    def _redraw(self) -> None:
        kind = self._content[0]
        theme, background = self._syntax_theme(), pane_background(self)
        if kind == "files":
            content = (tuple(sorted(self._content[1].items())), self._content[2])
        else:
            content = self._content[1:]
        self._key = (kind, content, theme, background)
        self._wraps = kind == "empty"
        self.scroll_to(0, 0, animate=False)
        self._cut()

    def _body_of(self, kind: str, theme: str, background: str) -> Text:
        """The content below the note (code is never wrapped: it scrolls sideways)."""
        newline = Text("\n", end="")
        if kind == "files":
            files = self._content[1]
            blocks = [(name, highlight(files[name], LEXERS.get(PurePath(name).suffix, "text"), theme, background))
                      for name in file_order(files)]
            width = max((cell_len(line) for _, b in blocks for line in b.plain.split("\n")), default=20)
            parts = [newline.join([heading(name, width), block]) for name, block in blocks] or [Text("(no files)")]
            return newline.join(parts)
        if kind == "text":
            return Text(self._content[1])
        if kind == "diff":
            diff = self._content[1]
            return highlight(diff, "diff", theme, background, numbers=False) if diff else Text("(no changes)")
        return Text(self._content[1], style="dim")

    def _cut(self) -> None:
        """Highlight the content and cut it into lines of segments, once: going back to a task finds
        them ready (kept for the last ``CUT_CACHE`` contents)."""
        pane = max(1, self.scrollable_content_region.width)
        width = pane if self._wraps else 10_000
        note = self._note()
        key = (*self._key, width, pane if note else 0)
        if key in self._cuts:
            self._cuts[key] = self._cuts.pop(key)     # most recent last
        else:
            kind, _, theme, background = self._key
            body = content = self._body_of(kind, theme, background)
            console = self.app.console
            options = console.options.update(width=width, no_wrap=not self._wraps, height=None,
                                             overflow="fold" if self._wraps else "ignore")
            lines = []
            if note:    # a failure's whole message, wrapped to the pane above code that scrolls sideways
                shown = Text(note, style="red" if kind == "files" else "dim")
                lines += console.render_lines(shown, options.update(width=pane, no_wrap=False, overflow="fold"),
                                              pad=False)
                body = Text("\n", end="").join([shown, content])
            lines += console.render_lines(content, options, pad=False)
            self._cuts[key] = (body, [Strip(line).simplify() for line in lines])
            while len(self._cuts) > CUT_CACHE:
                self._cuts.pop(next(iter(self._cuts)))
        self._body, self._strips = self._cuts[key]
        content_width = max((strip.cell_length for strip in self._strips), default=0)
        self.virtual_size = Size(content_width if not self._wraps else width, len(self._strips))
        self.refresh()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        style = self.rich_style
        index = scroll_y + y
        if index >= len(self._strips):
            return Strip.blank(self.size.width, style)
        return self._strips[index].crop_extend(scroll_x, scroll_x + self.size.width, style).apply_style(style)

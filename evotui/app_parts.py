"""What the app's mixins (``RunControl``, ``Readers``) may use of the app, for the type checker: the
mixins are plain classes at run time and see the whole ``EvoKernelApp`` through ``self``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.app import App

    from core.workspace import Workspace
    from evotui.engine_host import EngineHost
    from evotui.screens.main import MainScreen
    from evotui.widgets.run_header import RunStatus

    class AppParts(App[None]):
        host: EngineHost
        main: MainScreen
        workspace: Workspace
        open_problem: str | None
        _before_start: tuple[str, str | None]

        @property
        def run_status(self) -> RunStatus: ...
        @run_status.setter
        def run_status(self, value: RunStatus) -> None: ...

        def set_run_state(self, state: str, run_id: str | None | object = ..., **changes: Any) -> None: ...
        def load_task_rows(self, reply_to: Any) -> Any: ...
else:
    AppParts = object

__all__ = ["AppParts"]

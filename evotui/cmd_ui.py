"""``evokernel ui`` (and ``evokernel`` with no command): the workbench on the current directory's
workspace. A directory without one gets ``evokernel.toml``, ``kernels/`` and ``.evokernel/`` (the
built-in suite, the CPU backend) and a first-run screen saying so and how to connect an LLM."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ui", help="open the workbench (the default with no command)")
    p.add_argument("--suite", default=None,
                   help='"builtin" or a folder of KernelBench-format files (default: the workspace\'s)')
    p.add_argument("--size-scale", default=None,
                   help='scale module-level sizes: a factor in (0, 1] or "auto" (default: the workspace\'s)')
    p.set_defaults(func=run, suite=None, size_scale=None)


def run(args: argparse.Namespace) -> int:
    from core.workspace import Workspace

    workspace = Workspace.at(args.workspace)
    created = workspace.init()
    workspace.config()  # a broken evokernel.toml is one line on stderr, before the screen takes over

    from evotui.app import make_app

    app = make_app(workspace.root, created=created, suite=args.suite, size_scale=args.size_scale)
    app.run()
    if not app.is_headless:   # the terminal is back: leave now (a test's headless app returns instead)
        from core.session import leave

        leave(app.return_code or 0)
    return 0

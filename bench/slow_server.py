"""A slow local server at its real rate (#52): a loopback server speaking the OpenAI protocol streams an answer of
``--tokens`` tokens at ``--rate`` tokens a second, and the real client (``core.llm``) asks it with ``[llm] timeout_s``
= ``--timeout-s``, printing the call's news as the run's lines would (its wait and tokens every ``--every`` s).

    .venv/bin/python bench/slow_server.py                     # 4,096 tokens at 13 a second, timeout_s 300: 315 s
    .venv/bin/python bench/slow_server.py --tokens 400 --rate 40 --timeout-s 2

Unstreamed (main before #52) the same answer timed out at 300 s and was retried from the start; streamed, the
timeout bounds the silence between tokens and the answer completes. The server is the tests' loopback one
(tests/fixtures/openai_server.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "fixtures"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--rate", type=float, default=13.0, help="tokens a second")
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("--every", type=float, default=30.0, help="seconds between the wait lines")
    args = parser.parse_args()

    from core.config import LLMConfig
    from core.llm import CallNews, ChatRequest, OpenAIClient

    from openai_server import TOKEN_CHARS, Reply, ScriptedLLM

    text = ("x" * (TOKEN_CHARS - 1) + " ") * args.tokens
    said = [0.0]

    def listen(news: CallNews) -> None:
        if news.kind == "retry":
            print(f"{time.strftime('%H:%M:%S')} retry: {news.reason}; try {news.next_try} of {news.tries}", flush=True)
        elif news.kind == "progress" and news.seconds - said[0] >= args.every:
            said[0] = news.seconds
            print(f"{time.strftime('%H:%M:%S')} answering {news.seconds:.0f} s · {news.tokens:,} tok", flush=True)

    with ScriptedLLM(lambda req, n: Reply(text, tokens_per_s=args.rate)) as server:
        client = OpenAIClient(LLMConfig(base_url=server.base_url, model=server.model, timeout_s=args.timeout_s,
                                        retries=1))

        async def ask():
            try:
                return await client.complete(ChatRequest(model=server.model, messages=(("user", "a long kernel"),),
                                                         max_tokens=args.tokens), listen)
            finally:
                await client.close()

        started = time.perf_counter()
        answer = asyncio.run(ask())
        took = time.perf_counter() - started
    print(f"answered {answer.tokens_out:,} tokens in {took:.1f} s with timeout_s = {args.timeout_s:g} "
          f"({len(server.requests)} request{'s' if len(server.requests) != 1 else ''}, finish {answer.finish_reason})")
    return 0 if answer.tokens_out == args.tokens else 1


if __name__ == "__main__":
    sys.exit(main())

"""Every request inside the model's context: how many characters a prompt may have, and how many tokens its
answer may take (``max_tokens``), from the context the server serves.

The prompt is counted in characters (prompts are built as text) and turned into tokens at a rate of characters
per token that starts cautious (``CHARS_PER_TOKEN``) and becomes the
server's own once it has counted a prompt (``learn``: the answer's ``prompt_tokens``, or the numbers of its "too
long" answer). A prompt first aims to leave the whole ``[llm] max_tokens`` for the answer; a prompt that cannot
shrink that far (its reference, the machine and the rules are never cut, ``core.prompts``) leaves what is left,
down to ``ANSWER_FLOOR`` tokens (a kernel's model.py and source); below that the request is not sent, and
``too_long`` says which setting to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CHARS_PER_TOKEN = 3.2      # before the server has counted one of our prompts: cautious (SmolLM2's tokenizer counted
#                            3.23 characters a token for a full draft prompt, 4.0 for a fitted one; code runs 3-4)
ANSWER_FLOOR = 512         # the fewest answer tokens a request is sent with: a model.py and a kernel source (the
#                            shipped demo's relu answer is 654 characters, about 200 tokens; a tiled or fused
#                            kernel two to three times that)
TEMPLATE_TOKENS = 48       # the chat template's own tokens around the messages (role markers, a default system)
MARGIN = 0.06              # of the prompt's estimated tokens: the estimate's error
MAX_PROMPT_CHARS = 48_000  # a prompt's characters with no context known (or a very long one)

SERVE_LONGER = ("serve the model with a longer context (llama.cpp: --ctx-size; llama-cpp-python: --n_ctx; "
                "vLLM and SGLang: --max-model-len / --context-length; Ollama: num_ctx or OLLAMA_CONTEXT_LENGTH) and "
                "set [llm] context_tokens to it if the server does not say it")


@dataclass
class ContextBudget:
    """The request budget of one endpoint and model (one per run; the engine keeps it)."""

    max_tokens: int                       # [llm] max_tokens: the most an answer may take
    context_tokens: int | None = None     # None: not known (prompts keep MAX_PROMPT_CHARS, answers max_tokens)
    source: str = ""                      # where the context was read ("[llm] context_tokens", "llama.cpp's /props")
    chars_per_token: float = CHARS_PER_TOKEN
    counted: bool = False                 # the rate is the server's own count of a prompt

    @property
    def floor(self) -> int:
        """The fewest tokens an answer is sent with."""
        return min(self.max_tokens, ANSWER_FLOOR)

    def tokens(self, chars: int) -> int:
        """A prompt of ``chars`` characters in tokens, as this server counts them, with the margin."""
        return math.ceil(chars / self.chars_per_token * (1 + MARGIN)) + TEMPLATE_TOKENS

    def chars_for(self, tokens: int) -> int:
        """The characters a prompt may have to take at most ``tokens``."""
        return max(0, int((tokens - TEMPLATE_TOKENS) * self.chars_per_token / (1 + MARGIN)))

    def prompt_chars(self) -> int:
        """The characters a prompt should fit in: what leaves the whole ``max_tokens`` for the answer."""
        if self.context_tokens is None:
            return MAX_PROMPT_CHARS
        return min(MAX_PROMPT_CHARS, self.chars_for(self.context_tokens - self.max_tokens))

    def answer_tokens(self, prompt_chars: int) -> int:
        """The answer budget of a prompt of ``prompt_chars`` characters: ``max_tokens``, or what the context leaves
        (below ``floor``: the request does not fit, ``too_long`` says so)."""
        if self.context_tokens is None:
            return self.max_tokens
        return min(self.max_tokens, self.context_tokens - self.tokens(prompt_chars))

    def fits(self, prompt_chars: int) -> bool:
        return self.answer_tokens(prompt_chars) >= self.floor

    def learn(self, prompt_chars: int, prompt_tokens: int) -> None:
        """The server counted ``prompt_tokens`` for a prompt of ``prompt_chars`` characters: its own rate from now
        on (the lowest seen, so a prompt of denser text is not under-counted)."""
        if prompt_tokens <= TEMPLATE_TOKENS or prompt_chars <= 0:
            return
        rate = prompt_chars / max(1, prompt_tokens - TEMPLATE_TOKENS // 2)
        self.chars_per_token = rate if not self.counted else min(self.chars_per_token, rate)
        self.counted = True

    def learn_context(self, context_tokens: int, source: str) -> None:
        """The server said its context (a "too long" answer): the smaller of it and what was known."""
        if self.context_tokens is None or context_tokens < self.context_tokens:
            self.context_tokens, self.source = context_tokens, source

    def too_long(self, what: str, prompt_chars: int) -> str:
        """Why ``what``'s request is not sent, with the settings that change it, in one line."""
        tokens = self.tokens(prompt_chars)
        lower = (f", or lower [llm] max_tokens (now {self.max_tokens:,}) so that shorter answers are asked for"
                 if self.max_tokens > ANSWER_FLOOR // 2 else "")
        return (f"{what}: the shortest prompt (about {tokens:,} tokens) leaves "
                f"{max(0, (self.context_tokens or 0) - tokens):,} of the model's {self.context_tokens or 0:,}-token "
                f"context ({self.source}) for the answer, below the {self.floor:,} a kernel needs: the request was "
                f"not sent. {SERVE_LONGER[0].upper()}{SERVE_LONGER[1:]}{lower}")

    def words(self) -> str:
        """The budget in a few words (the run's start line, the prompt log)."""
        if self.context_tokens is None:
            return f"context not known, answers up to {self.max_tokens:,} tokens"
        rate = (f"{self.chars_per_token:.2f} characters a token as the server counts" if self.counted
                else f"about {self.chars_per_token:.1f} characters a token until the server counts one")
        return f"context {self.context_tokens:,} tokens ({self.source}), answers up to {self.max_tokens:,}; {rate}"

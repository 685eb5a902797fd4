"""The speed verdict: one rule, in one place, for every surface that decides or says one.

A verdict judges a paired ratio from one timing window (``Ratio``: the median over the window's rounds of the two
sides' ratio, with its bootstrap interval, from ``verifier.window.stats``; above 1 the candidate is faster).
The performance gate stores it (``Outcome.vs_reference``, ``Outcome.vs_best``); rewards, the run lines,
the workbench, the prompts and the gate's own message all say it with the functions below, and nothing
else decides or re-words one.

The words (``Verdict``):

- "faster": the whole interval is above ``1 + min_change``;
- "slower": the whole interval is below ``1 / (1 + min_change)``.
  (Issue #47's A/A check: one kernel built twice and timed against itself, ten windows a size, read gains of
  0.91-1.10 between windows with intervals of about ±10 %, and one in six read "faster" at 1.10x [1.001, 1.22]
  when the interval had only to exclude 1: a window's interval covers its own rounds, not what differs from one
  window to the next. An interval that must clear the minimum change leaves such a window "noisy" or "same");
- "same": neither, and the interval stays within ``noise_limit`` of equal speed (``reach``): "same speed
  within ±x %", x never above the limit. Too few rounds for an interval is "same" too, said "too few
  timed calls" (it is no noise of the machine's, and it judges nothing either way);
- "noisy": a window too disturbed to tell: its interval reaches further than ``noise_limit`` from equal
  speed without excluding 1 by ``min_change``, more than half its rounds were preempted, or the ratio
  of the two medians disagrees with the paired interval (``disagrees``). No verdict: the gate measures
  the window once more, and a window noisy again earns no reward and never makes a new best;
- "implausible": a kernel faster than this machine can compute, even when the ceilings and its window
  are measured again (``plausible``): not trusted either way, no reward, never a new best.

"same" and "noisy" are decided by one distance, the interval's reach from 1, so the word a window is
stored with is the word every surface shows (a window of 1.05x [0.90, 1.18] reaches 18 % from equal speed:
"noisy", measured again, and said "could not tell: too noisy" everywhere).

Without a paired measurement (the best could not be timed beside the candidate), two speedups over the
reference from two windows are compared with the wider ``UNPAIRED_BAND`` (``judge_unpaired``): that is a
reward's last resort, never a stored verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

Verdict = Literal["faster", "slower", "same", "noisy", "implausible"]
"""What a window says of a paired ratio (stored as ``Outcome.vs_reference``/``vs_best``; "" when no such
ratio was timed)."""

FASTER: Verdict = "faster"
SLOWER: Verdict = "slower"
SAME: Verdict = "same"
NOISY: Verdict = "noisy"
IMPLAUSIBLE: Verdict = "implausible"

JUDGED: tuple[Verdict, ...] = (FASTER, SLOWER)
"""Verdicts that say which side is faster: the only ones a reward moves on."""

UNJUDGED: tuple[Verdict, ...] = (NOISY, IMPLAUSIBLE)
"""Verdicts that judge nothing: a window too disturbed to tell, or a kernel faster than this machine can
compute. No reward, never a new best, not fast_1."""

NOISE_LIMIT = 0.15
"""How far from equal speed (a share: ±15 %) an interval holding 1 may reach and still say "same speed";
further is "noisy". Measured on the shared 2-core machine here (load 3, relu against itself, 20 rounds,
ten windows): undisturbed windows had half-widths of 1.4-6 %, windows disturbed by other work 32-50 %
(one read 1.74x [0.97, 2.63]); docs/verifier.md's six verifications of one candidate spread 1.16x (about
±8 %). 15 % sits above every undisturbed window with room, and below every disturbed one. The same
windows were "preempted" (an involuntary switch in a call) in 20 of 20 rounds at ±1.4 %: on a busy
machine that mark says little about the interval, so the performance gate judges by the interval.
``[verifier] noise_limit`` sets it."""

UNPAIRED_BAND = 0.15
"""Two speedups over the reference from two windows (the best could not be timed beside the candidate)
differ only beyond this band: each window's machine load moves its speedup by as much as a noisy paired
interval reaches (the ``NOISE_LIMIT`` measurements), so the unpaired comparison takes the same width as
"faster" or "slower" evidence."""


@dataclass(frozen=True)
class Ratio:
    """A paired ratio of two sides' times from one window, with its bootstrap interval (``judge`` says what it
    shows; ``verifier.window.stats`` computes it)."""

    value: float
    low: float
    high: float
    of_medians: float | None = None
    """The two sides' median times divided (the figures printed beside the ratio), when known."""

    @property
    def half_width_pct(self) -> float:
        """Half the interval's width, in percent of the ratio (how settled a window is: the window stops
        once it is within ``[verifier] timing_precision``)."""
        return 50.0 * (self.high - self.low) / max(self.value, 1e-12)

    def to_list(self) -> list[float]:
        return [self.low, self.high]


Word = Literal["faster", "slower", "same speed", "too noisy", "too few calls", "not trusted"]
"""A verdict in a word or two, for narrow columns (``word``)."""


def interval(ci: list[float] | tuple[float, float] | None) -> tuple[float, float] | None:
    """``(low, high)`` of a stored interval, None when there is none to judge by (missing, or too few
    rounds: ``[0, inf]``)."""
    if not ci or len(ci) != 2:
        return None
    low, high = float(ci[0]), float(ci[1])
    if not math.isfinite(high) or low <= 0.0:
        return None
    return low, high


def reach(ci: list[float] | tuple[float, float] | None) -> float | None:
    """How far from equal speed the interval reaches, as a share (``[0.90, 1.18]``: 0.18; an interval
    entirely above or below 1 reaches as far as its far end), None without an interval."""
    bounds = interval(ci)
    if bounds is None:
        return None
    # rounded: an interval reaching exactly the limit (1.15 - 1.0 in floating point) is within it
    return round(max(bounds[1] - 1.0, 1.0 - bounds[0], 0.0), 9)


def disagrees(ratio: Ratio, min_change: float) -> bool:
    """Whether the ratio of the medians falls outside the interval by more than ``min_change``.
    Rounds that share their load give both statistics the same answer; they part only when load came
    and went inside rounds, one side's calls hit and not the other's. Seen in a run on this machine
    under load: the best's median 11.917 ms beside the candidate's 13.219 ms (0.90x), while the
    median of the rounds' ratios said "1.16x faster", and a reader shown both times read the verdict
    as wrong. Such a window does not say which kernel is faster: it is measured again."""
    if ratio.of_medians is None or not math.isfinite(ratio.high) or ratio.low <= 0.0:
        return False
    return ratio.of_medians < ratio.low / (1.0 + min_change) or ratio.of_medians > ratio.high * (1.0 + min_change)


def judge(ratio: Ratio, min_change: float, noise_limit: float = NOISE_LIMIT, *, preempted: float = 0.0,
          plausible: bool = True) -> Verdict:
    """The verdict of one window's paired ratio (see the module's docstring): ``min_change`` the least
    change that counts (``[verifier] min_speed_change``), ``noise_limit`` the farthest an interval may
    reach from equal speed and be "same" (``[verifier] noise_limit``), ``preempted`` the share of rounds
    another process took a core in (the gate does not pass it: see ``NOISE_LIMIT``), ``plausible`` False
    for a kernel above this machine's ceiling even when measured again."""
    if not plausible:
        return IMPLAUSIBLE
    if preempted > 0.5 or disagrees(ratio, min_change):
        return NOISY
    if ratio.low > 1.0 + min_change:
        return FASTER
    if ratio.high < 1.0 / (1.0 + min_change):
        return SLOWER
    far = reach(ratio.to_list())
    if far is not None and far > noise_limit:
        return NOISY
    return SAME


def plausible(roofline: dict[str, Any] | None) -> bool:
    """Whether a kernel's place on this machine's roofline (``verifier.machine.roofline``) is possible:
    a compute-bound kernel above the FMA ceiling can only have skipped work."""
    if not roofline or roofline.get("bound") != "compute":
        return True
    return float(roofline.get("fraction") or 0.0) <= 1.0


def judge_unpaired(mine: float, theirs: float, mine_verdict: str = "", theirs_verdict: str = "") -> Verdict:
    """The verdict of two speedups over the reference from two windows (``mine / theirs`` is the gain):
    whichever window judged nothing ("noisy", "implausible") leaves nothing judged; else beyond
    ``UNPAIRED_BAND`` either way is "faster"/"slower", within it "same"."""
    for unjudged in UNJUDGED:
        if unjudged in (mine_verdict, theirs_verdict):
            return unjudged
    gain = mine / theirs
    if gain > 1.0 + UNPAIRED_BAND:
        return FASTER
    if gain < 1.0 / (1.0 + UNPAIRED_BAND):
        return SLOWER
    return SAME


# ----------------------------------------------------------------------------- saying it


def word(verdict: str, ci: list[float] | None) -> Word | Literal[""]:
    """A verdict in a word or two for narrow columns: "faster", "slower", "same speed", "too noisy",
    "too few calls" (a "same" window without an interval), "not trusted"; "" for no verdict."""
    if verdict == FASTER:
        return "faster"
    if verdict == SLOWER:
        return "slower"
    if verdict == IMPLAUSIBLE:
        return "not trusted"
    if verdict == NOISY:
        return "too noisy"
    if verdict == SAME:
        return "same speed" if interval(ci) is not None else "too few calls"
    return ""


def _bracket(bounds: tuple[float, float] | None) -> str:
    return f" [{bounds[0]:.2f}, {bounds[1]:.2f}]" if bounds is not None else ""


def words(verdict: str, ratio: float | None, ci: list[float] | None, other: str) -> str:
    """The one way every surface (prompts, run lines, CLI, workbench, the gate's own message) says what a
    paired ratio from one window shows: "1.31x faster than the best [1.20, 1.40]", "1.06x slower than
    PyTorch [1.02, 1.10]", "same speed as the best within ±4 %", "could not tell against the best: too
    noisy (speedup interval [0.97, 2.63], above 1 = faster), no verdict" (the interval says its
    direction, since a bare [0.65, 1.01] reads either way), "could not tell against the best: too few
    timed calls". A ratio is shown only beside "faster"/"slower", never beside a word it contradicts.
    ``ratio`` and ``ci`` are speedups (above 1: faster); "" without a ratio."""
    if ratio is None:
        return ""
    said = word(verdict, ci)
    bounds = interval(ci)
    if said == "not trusted":
        return (f"{ratio:.2f}x against {other}, above this machine's ceiling even when measured again: not "
                "trusted, no verdict")
    if said == FASTER:
        return f"{ratio:.2f}x faster than {other}{_bracket(bounds)}"
    if said == SLOWER:
        # the ratio and its interval both inverted, so the bracket holds the number it follows
        inverted = (1.0 / max(bounds[1], 1e-12), 1.0 / max(bounds[0], 1e-12)) if bounds is not None else None
        return f"{1.0 / max(ratio, 1e-12):.2f}x slower than {other}{_bracket(inverted)}"
    if said == "same speed":
        return f"same speed as {other} within ±{max(1, round(100 * (reach(ci) or 0.0)))} %"
    if said == "too noisy" and bounds is not None and (bounds[0] > 1.0 or bounds[1] < 1.0):
        # an interval on one side of 1 is "noisy" only when the medians' ratio disagrees with it (``disagrees``)
        return (f"could not tell against {other}: too noisy (the rounds' speedup interval{_bracket(bounds)} and "
                "the ratio of the two medians disagree: load came and went inside rounds), no verdict")
    if said == "too noisy" and bounds is not None:
        return (f"could not tell against {other}: too noisy (speedup interval{_bracket(bounds)}, above 1 = "
                "faster), no verdict")
    return f"could not tell against {other}: too few timed calls"


def note(verdict: str) -> str:
    """What a one-line summary adds beside a kernel's own numbers when its comparison with the best judged
    nothing: "timing too noisy to judge", "speed not trusted (above this machine's ceiling)"; else ""."""
    if verdict == NOISY:
        return "timing too noisy to judge"
    if verdict == IMPLAUSIBLE:
        return "speed not trusted (above this machine's ceiling)"
    return ""


def reason(verdict: str, ci: list[float] | None, *, paired: bool = True) -> str:
    """Why a refinement's reward is what it is, from its verdict against the best (after "reward r: "):
    "faster than the best", "the same speed as the best", "too noisy to judge against the best: measure
    again", "too few timed calls to judge against the best", "its speed is not trusted (above this
    machine's ceiling)". ``paired`` False: the verdict came from two windows' speedups (``judge_unpaired``),
    and the reason says so."""
    said = word(verdict, ci if paired else [1.0, 1.0])
    text = {FASTER: "faster than the best", SLOWER: "slower than the best", "same speed": "the same speed as the best",
            "too noisy": "too noisy to judge against the best: measure again",
            "too few calls": "too few timed calls to judge against the best",
            "not trusted": "its speed is not trusted (above this machine's ceiling)"}.get(said, "")
    if not text:
        return "no best was timed beside it"
    if not paired and said in (FASTER, SLOWER, "same speed"):
        text += f" (its speedup over PyTorch against the best's, from two windows, ±{100 * UNPAIRED_BAND:.0f} %)"
    return text


def legend() -> str:
    """How to read the words above, for a reader who sees them without this module (a model's prompt),
    written with ``words`` itself so the examples are the words it will read."""
    faster = words(FASTER, 1.2, [1.1, 1.3], "X")
    slower = words(SLOWER, 1 / 1.2, None, "X")
    return (f"Kernels are compared by ratios timed together in one window, each with its 95 % interval: \"{faster}\" "
            f"is this kernel's speedup over X, \"{slower}\" X's speedup over this one, a \"speedup interval\" this "
            "kernel's (above 1 = faster). A verdict the harness could not fully check (\"flagged\", \"not judged\") "
            "counts for nothing: no reward, never a best or a start point.")

"""Before declaring a winner: re-launch the best config and the baseline, interleaved (B, A, B, A),
re-measure decode, and call it a win only when the gap beats the launch-to-launch noise.

Host drift (thermal, memory bandwidth decaying with uptime on GB10) moves both arms alike when they
alternate, so the comparison is fairer than trial-vs-trial numbers taken minutes apart. Each round
is one launch per arm; the test (noise.judge_launches) needs at least two rounds and pools the
spread of these launches with the one stored for this host, engine and objective.

A study runs in sittings (a time budget, a Ctrl-C, a lent machine handed back): its rounds
accumulate. Every relaunch is stored with the pair (best, baseline) its round confirmed, and the
verdict judges all stored rounds of the current pair, earlier sittings' included; a round whose best
has changed since is never mixed in. `--confirm-rounds N` is N rounds in all for the pair.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from autotune.models import Confirmation, ConfirmationLaunch, GatePolicy, TrialResult
from autotune.study.relaunches import Relaunch
from autotune.study.reporter import Reporter
from autotune.trial.context import TrialContext, objective_only
from autotune.trial.launch import Launch, LaunchRequest, Purpose
from autotune.verdict.confirmation import rounds_done, verdict_of
from autotune.verdict.noise import LaunchNoise

#: stores one relaunch of a round (arm, round, the relaunch's result, seconds) and returns it with its id
KeepLaunch = Callable[[TrialResult, int, TrialResult, float], ConfirmationLaunch]


def decode_only(ctx: TrialContext) -> TrialContext:
    """A relaunch for a launch-noise sample (a confirmation round's, a noise relaunch's): the
    objective alone, with the trial's decode passes."""
    return objective_only(ctx).model_copy(update={"gates": GatePolicy.NO_ACCURACY})


def confirm(
    launch: Launch,
    ctx: TrialContext,
    best: TrialResult,
    baseline: TrialResult,
    rounds: int,
    keep: KeepLaunch,
    *,
    reporter: Reporter,
    prior: LaunchNoise | None = None,
    earlier: list[ConfirmationLaunch] | None = None,
    total: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    slowed: Callable[[], frozenset[int]] = frozenset,
) -> Confirmation:
    """Run `rounds` more rounds after the `earlier` launches of this pair, then judge them all.
    `total` is the rounds the study asks for in all (for the progress line); `slowed()`, the launch
    samples measured on a slowed GPU, read after the rounds."""
    launches = list(earlier or [])
    first = rounds_done(launches) + 1
    total = max(total or 0, first - 1 + rounds)
    for round_ in range(first, first + rounds):
        for arm in (baseline, best):
            reporter.relaunch_started(Relaunch.confirmation(round_, total, arm.number))
            started = clock()
            result = launch(LaunchRequest(decode_only(ctx), arm.candidate, arm.number, Purpose.CONFIRMATION,
                                          log_name=f"confirm-r{round_}-trial-{arm.number:03d}",
                                          events=reporter.trial_event))
            launches.append(keep(arm, round_, result, clock() - started))
    return verdict_of(ctx.study, best, baseline, launches, prior, ctx.space.objective.confirm_alpha, rounds,
                      slowed())

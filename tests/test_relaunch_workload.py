"""A relaunch measures what it is for: the confirmation's and the noise relaunches' value is the
objective (decode at one stream on the short prompts), so they measure that alone; the gates
relaunch adds the gates, with one decode pass. A long-context decode (a cold 16K prompt on the
dummy MoE spaces) feeds neither: before, every confirmation launch still ran it."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.models import GatePolicy
from autotune.study.confirm import decode_only
from autotune.study.deferred import gates_relaunch_context
from autotune.commands.setup import prepare
from stand_in import tiny_llamacpp_space


@pytest.fixture
def ctx(tmp_path: Path):
    space = tiny_llamacpp_space(tmp_path, (
        "name: relaunch-workload\nengine: llamacpp\n"
        "model: {{name: m, path: {model}, context_max: 8192}}\n"
        "knobs:\n  - {{name: n_threads, values: [1, 2], default: 1}}\n"
        "workload: {{prefill_tokens: [1024], decode_context_tokens: [4096], concurrency: [1, 8], repeats: 3}}\n"
    ))
    plan = prepare(space_name=str(space), model_path=None, db_path=tmp_path / "runs.db", study="s", hardware="cpu",
                   nodes=1, accuracy=True, logs_dir=tmp_path, dry_run=True)
    return plan.ctx


def test_a_confirmation_relaunch_measures_only_the_objective(ctx):
    work = decode_only(ctx).space.workload
    assert (work.prefill_tokens, work.decode_context_tokens, work.concurrency) == ([], [], [1])
    assert work.repeats == 3 and decode_only(ctx).gates is GatePolicy.NO_ACCURACY  # its sample pools with the trials' three-pass ones


def test_the_gates_relaunch_measures_the_objective_once_and_the_gates(ctx):
    relaunch = gates_relaunch_context(ctx)
    work = relaunch.space.workload
    assert (work.prefill_tokens, work.decode_context_tokens, work.concurrency, work.repeats) == ([], [], [1], 1)
    assert relaunch.gates is ctx.gates is GatePolicy.AT_END  # llama.cpp's default
    assert ctx.space.workload.decode_context_tokens == [4096]  # the study's own context is not changed

"""A space as it runs on N boxes: tensor parallel over every GPU where the space leaves the layout
unset, the layout check of each candidate, and the candidates the rules and the layout allow."""

from __future__ import annotations

from autotune.engines import Engine
from autotune.errors import ConfigError, NoValidCandidate
from autotune.hardware.profiles import parallel_layout
from autotune.models import Candidate, HardwareProfile, SearchSpace
from autotune.space.candidates import Check, count_candidates, enumerate_candidates, rules_check


def layout_check(space: SearchSpace, hardware: HardwareProfile, nodes: int) -> Check:
    def check(candidate: Candidate) -> str | None:
        try:
            parallel_layout(space, candidate, hardware, nodes)
        except ConfigError as exc:
            return f"layout: {exc}"
        return None

    return check


def with_cluster_parallelism(space: SearchSpace, engine: Engine, hardware: HardwareProfile, nodes: int) -> SearchSpace:
    """On several nodes a space that leaves TP/PP unset runs tensor parallel over every GPU."""
    named = {k.name for k in space.knobs} | set(space.fixed)
    if nodes == 1 or named & {"tensor_parallel_size", "pipeline_parallel_size"}:
        return space
    if "tensor_parallel_size" not in engine.knobs:
        raise ConfigError(f"engine {engine.name!r} cannot run on {nodes} nodes (no tensor parallelism)")
    fixed = {**space.fixed, "tensor_parallel_size": nodes * max(hardware.gpus_per_node, 1)}
    return space.model_copy(update={"fixed": fixed})


def launchable(
    space: SearchSpace, engine: Engine, hardware: HardwareProfile, nodes: int
) -> tuple[SearchSpace, Check, Check, list[Candidate]]:
    """The space as it runs on `nodes` boxes, its rule and layout checks, and the candidates both
    allow; a clear error when none is left (the first layout problem, else the rules)."""
    space = with_cluster_parallelism(space, engine, hardware, nodes)
    rules, layout = rules_check(space), layout_check(space, hardware, nodes)
    allowed = [c for c in enumerate_candidates(space) if rules(c) is None]
    kept = [c for c in allowed if layout(c) is None]
    if not kept:
        if allowed:
            raise ConfigError((layout(allowed[0]) or "").removeprefix("layout: "))
        raise NoValidCandidate(
            f"space {space.name!r}: the rules rule out all {count_candidates(space)} candidates"
        )
    return space, rules, layout, kept

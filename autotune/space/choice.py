"""Which search space a command uses when `--space` is not given.

No hardware and no node count asked for: the embedded default (the CPU llama.cpp space), as
`autotune search` has always done. `--hardware H [--nodes N]`: the one shipped space made for H
and N (`hardware: H`, `nodes: N` in its YAML); for one node, failing that, the one shipped
generic space (`hardware: auto`) whose engine runs on H. Anything else is refused with the
candidates and the two ways to bring your own model (`autotune space new`, `--space`/`--model`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from autotune.engines import get_engine
from autotune.errors import ConfigError
from autotune.hardware.profiles import get_profile
from autotune.models import HardwareProfile, SearchSpace
from autotune.space.candidates import DEFAULT_SPACE, available_spaces, load_space

class SpaceChoice(BaseModel):
    """The space a command runs, and the line that tells the user why (None: they named it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    note: str | None = None


def shipped_spaces() -> list[SearchSpace]:
    """The shipped spaces a user's tuning can start from; dummy-weight test beds are not among them
    (random weights measure the hardware, they make no recipe for a model)."""
    from autotune.checkpoint.shapes import dummy_weights

    return [s for s in (load_space(name) for name in available_spaces()) if not dummy_weights(s)]


def made_for(space: SearchSpace) -> str:
    where = "any hardware" if space.hardware == "auto" else space.hardware
    return f"{where} x{space.nodes}"


def runs_on(space: SearchSpace, profile: HardwareProfile) -> bool:
    """A generic (`hardware: auto`) one-node space suits a profile when its engine can run there."""
    needs_gpu = get_engine(space.engine).needs_gpu
    return space.hardware == "auto" and space.nodes == 1 and needs_gpu == (profile.gpus_per_node > 0)


def own_model_hint(hardware: str, nodes: int) -> str:
    return (
        f"for your own model write a space from its config.json with `autotune space new --model DIR "
        f"--hardware {hardware} --nodes {nodes} -o my-space.yaml` and pass --space my-space.yaml; "
        "--model DIR points a shipped space at your copy of its model"
    )


def _listing(spaces: list[SearchSpace]) -> str:
    return ", ".join(f"{s.name} ({made_for(s)})" for s in spaces) or "none"


def choose_space(space: str | None, hardware: str | None, nodes: int | None) -> SpaceChoice:
    """The space named, else the default, else the one shipped space made for hardware x nodes."""
    if space is not None:
        return SpaceChoice(name=space)
    if hardware in (None, "auto"):
        if nodes in (None, 1):
            return SpaceChoice(name=DEFAULT_SPACE)
        shipped = shipped_spaces()
        for_n = [s for s in shipped if s.nodes == nodes]
        raise ConfigError(
            f"--nodes {nodes} without --space: name the hardware (e.g. --hardware spark) or the space; "
            f"shipped spaces for {nodes} nodes: {_listing(for_n)}; {own_model_hint('HARDWARE', nodes)}"
        )
    profile = get_profile(hardware)
    count = nodes or 1
    shipped = shipped_spaces()
    exact = [s for s in shipped if s.hardware == profile.name and s.nodes == count]
    generic = [s for s in shipped if count == 1 and runs_on(s, profile)]
    fits = exact or generic
    if len(fits) == 1:
        chosen = fits[0]
        why = f"made for {profile.name} x{count}" if exact else f"that runs on {profile.name} (hardware: auto)"
        return SpaceChoice(
            name=chosen.name,
            note=f"no --space given: using {chosen.name}, the one shipped space {why} ({chosen.description}); "
            f"--space NAME_OR_FILE picks another",
        )
    what = "several shipped spaces fit" if fits else "no shipped space is made for"
    raise ConfigError(
        f"{what} {profile.name} x{count}"
        + (f": {_listing(fits)}; pass --space NAME" if fits else f"; shipped: {_listing(shipped)}")
        + f"; {own_model_hint(profile.name, count)}"
    )

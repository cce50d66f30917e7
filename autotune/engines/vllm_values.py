"""Knob values against what the installed vLLM accepts (its `EngineChoices`), before anything runs.

A knob that names a choice (KV-cache dtype, attention / MoE / linear backend, quantization,
speculative method, or any option whose argparse parser lists choices) may only hold a value of
that version's list; a value another version added (0.33.0's `nvfp4_4over6` on 0.26.0) is refused
naming the value, the knob, the version and its choices.

A knob's `where_listed` values (ones a later version adds, in a space meant for every supported
version) are not refused for that: those this version does not list, all of them where it lacks
the knob's option, are left out of the study, and the user is told in one line per knob.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from autotune.engines.vllm_choices import EngineChoices
from autotune.errors import ConfigError
from autotune.models import SCHEDULE_KEY, KnobSpec, LeftOutKnob, Scalar, SearchSpace

#: knob -> the registry of the dump that lists its values (the option takes a value of it, or
#: for spec_method the "method" of --speculative-config)
REGISTRIES: dict[str, Callable[[EngineChoices], list[str]]] = {
    "kv_cache_dtype": lambda c: c.kv_cache_dtypes,
    "attention_backend": lambda c: c.attention_backends,
    "moe_backend": lambda c: c.moe_backends,
    "linear_backend": lambda c: c.linear_backends,
    "quantization": lambda c: c.quantization_methods,
    "spec_method": lambda c: c.speculative_methods,
}
#: knobs whose values vLLM reads by enum name, in any case (`--attention-backend flash_attn`)
ANY_CASE = frozenset({"attention_backend"})


def accepted(knob: str, flag: str | None, choices: EngineChoices) -> list[str] | None:
    """The values this version accepts for `knob` (rendered as `flag`); None when it takes any.
    The option's own argparse choices win (its parser refuses the rest); else the registry."""
    listed = choices.flags[flag].choices if flag is not None and flag in choices.flags else None
    if listed:
        return [c for c in listed if c != "None"]
    registry = REGISTRIES.get(knob)
    return (registry(choices) or None) if registry is not None else None


def space_values(space: SearchSpace) -> Iterator[tuple[str, Scalar]]:
    """(knob, value) for every set value of an engine knob of the space, its fixed ones included."""
    for name, value in space.fixed.items():
        if name not in space.plugin_flags and value is not None:
            yield name, value
    for knob in space.knobs:
        if knob.kind == "arg" and knob.name not in space.plugin_flags:
            yield from ((knob.name, value) for value in knob.values if value is not None)


def refusal(knob: str, value: Scalar, flag: str | None, choices: EngineChoices) -> str | None:
    """Why this version refuses `knob=value`, in one line; None when it accepts it."""
    listed = accepted(knob, flag, choices)
    if listed is None or isinstance(value, bool):
        return None
    text = str(value)
    known = {c.upper() for c in listed} if knob in ANY_CASE else set(listed)
    if (text.upper() if knob in ANY_CASE else text) not in known:
        if knob == "quantization" and choices.general_plugins:
            return None  # an installed plugin may register it when vLLM starts (vllm-exl3's `exl3`)
        unplugged = " (no vLLM plugin installed to register it)" if knob == "quantization" else ""
        return f"{knob}={text} is not accepted by vLLM {choices.version}{unplugged}: choices are {', '.join(listed)}"
    if knob == "quantization" and text in choices.deprecated_quantization_methods:
        return (f"quantization={text} is deprecated in vLLM {choices.version}, which refuses it without "
                "--allow-deprecated-quantization; use another method")
    return None


def schedule_refusal(choices: EngineChoices) -> str | None:
    """Why this version takes no draft schedule per batch size; None when its --speculative-config
    lists the key."""
    if SCHEDULE_KEY in choices.speculative_config_keys:
        return None
    return f"vLLM {choices.version} does not list {SCHEDULE_KEY} among its --speculative-config keys"


def left_out(knob: KnobSpec, flag: str | None, choices: EngineChoices) -> LeftOutKnob | None:
    """The knob's `where_listed` values this version does not list (all of them where it lacks the
    option); None when it lists every one."""
    has_flag = flag is None or flag in choices.flags
    unlisted = [v for v in knob.where_listed if not has_flag or refusal(knob.name, v, flag, choices) is not None]
    if not unlisted:
        return None
    return LeftOutKnob(knob=knob.name, flag=flag, values=unlisted, flag_listed=has_flag, engine_version=choices.version)


def check_values(space: SearchSpace, choices: EngineChoices, flags: dict[str, str]) -> list[LeftOutKnob]:
    """What this version leaves out of `space` (its knobs' `where_listed` values), then refuse the
    first value of what is left that it does not accept (`flags`: knob -> option)."""
    gone = [x for k in space.knobs if k.kind == "arg" and k.name not in space.plugin_flags
            if (x := left_out(k, flags.get(k.name), choices)) is not None]
    for x in gone:
        space = x.apply(space)
    _refuse_unaccepted(space, choices, flags)
    return gone


def _refuse_unaccepted(space: SearchSpace, choices: EngineChoices, flags: dict[str, str]) -> None:
    for knob, value in space_values(space):
        why = refusal(knob, value, flags.get(knob), choices)
        if why is None and knob == "draft_schedule":
            why = schedule_refusal(choices)
            why = why and f"draft_schedule={value}: {why}; leave the schedule to the study or use a vLLM that has it"
        if why:
            raise ConfigError(f"space {space.name!r}: {why}")

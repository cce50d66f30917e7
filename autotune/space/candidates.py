"""Search spaces: load search_spaces/*.yaml, enumerate candidates, prune before launching.

Pruning reasons come from four places, checked in this order: the space's hard rules, probe
results for this host (`fails` with knob values), the memory planner, and failures learned
during earlier trials on the same host fingerprint.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from autotune.engines import get_engine
from autotune.errors import ConfigError
from autotune.models import Candidate, FailureCause, HardwareProfile, ProbeResult, Rule, Scalar, SearchSpace
from autotune.yaml_files import load_yaml_model

SPACES_DIR = Path(__file__).resolve().parents[2] / "search_spaces"
DEFAULT_SPACE = "llamacpp-gemma3-270m"
MAX_ENUMERATED = 200_000


def available_spaces() -> list[str]:
    return sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))


def space_path(name_or_path: str) -> Path:
    """A path to a YAML file, or the name of one in search_spaces/."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"search space file {path} does not exist")
        return path
    candidate = SPACES_DIR / f"{name_or_path}.yaml"
    if not candidate.is_file():
        known = ", ".join(available_spaces()) or "none"
        raise ConfigError(f"unknown search space {name_or_path!r}; shipped spaces: {known}")
    return candidate


def load_space(name_or_path: str) -> SearchSpace:
    return load_yaml_model(space_path(name_or_path), SearchSpace, "search space")


def make_candidate(space: SearchSpace, tuned: dict[str, Scalar]) -> Candidate:
    """Fixed knobs + tuned knobs; env-kind knobs go to the environment (None = unset)."""
    params: dict[str, Scalar] = dict(space.fixed)
    env = dict(space.env)
    for knob in space.knobs:
        value = tuned.get(knob.name, knob.default)
        if knob.kind == "env":
            if value is not None:
                env[knob.name] = str(value)
        else:
            params[knob.name] = value
    return Candidate(engine=space.engine, params=dict(sorted(params.items())), env=dict(sorted(env.items())))


def baseline(space: SearchSpace) -> Candidate:
    return make_candidate(space, space.baseline_params())


def parse_tries(space: SearchSpace, tries: list[str]) -> list[Candidate]:
    """`--try kv_cache_dtype=fp8,draft_k=4` -> the candidate with those knob values (others at default)."""
    knobs = {k.name: k for k in space.knobs}
    out = []
    for text in tries:
        tuned = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, raw = part.partition("=")
            if not sep or name not in knobs:
                raise ConfigError(f"--try {text!r}: {part!r} is not KNOB=VALUE for a knob of {space.name!r}")
            matches = [v for v in knobs[name].values if str(v).lower() == raw.lower() or (v is None and raw in ("null", "none", "auto"))]
            if not matches:
                allowed = ", ".join(map(str, knobs[name].values))
                raise ConfigError(f"--try {text!r}: {name} has no value {raw!r}; values: {allowed}")
            tuned[name] = matches[0]
        out.append(make_candidate(space, {**space.baseline_params(), **tuned}))
    return out


def count_candidates(space: SearchSpace) -> int:
    total = 1
    for knob in space.knobs:
        total *= len(knob.values)
    return total


def enumerate_candidates(space: SearchSpace) -> Iterator[Candidate]:
    if count_candidates(space) > MAX_ENUMERATED:
        raise ConfigError(
            f"space {space.name!r} has {count_candidates(space)} combinations; "
            f"more than {MAX_ENUMERATED} cannot be listed (narrow the knob values)"
        )
    names = [k.name for k in space.knobs]
    for values in itertools.product(*(k.values for k in space.knobs)):
        yield make_candidate(space, dict(zip(names, values)))


def _value(candidate: Candidate, name: str) -> Scalar:
    return candidate.params[name] if name in candidate.params else candidate.env.get(name)


def rule_violation(rule: Rule, candidate: Candidate) -> str | None:
    if all(_value(candidate, k) in vs for k, vs in rule.when.items()):
        broken = [k for k, vs in rule.then.items() if _value(candidate, k) not in vs]
        if broken:
            return f"rule: {rule.reason}"
    return None


# wrong output is evidence too, though a kernel's miscompute row does not prune a trial's failure
_EVIDENCE_CLASSES = frozenset({"golden_mismatch", "silent_miscompute"})


def probe_is_evidence(probe: ProbeResult) -> bool:
    """A failing probe proves its feature fails when the engine's own selector refused it, or its
    failure class implicates the feature (a pruning signature, wrong output). A timeout, an
    out-of-memory under probe conditions (several launches on one GPU, small KV) or an
    unclassified crash proves nothing: such a feature stays untested."""
    from autotune.engines.signatures import signatures_for

    if probe.status != "fails":
        return False
    if probe.feature.startswith("selector:") or probe.signature in _EVIDENCE_CLASSES:
        return True
    return probe.signature is not None and any(s.cause is FailureCause.KNOB for s in signatures_for(probe.signature))


def probe_blocks(probe: ProbeResult, candidate: Candidate) -> bool:
    """A failing probe with evidence blocks every candidate that holds all of its knob values."""
    if not probe.params or not probe_is_evidence(probe):
        return False
    return all(k in candidate.params and candidate.params[k] == v for k, v in probe.params.items())


Check = Callable[[Candidate], str | None]


def rules_check(space: SearchSpace) -> Check:
    def check(candidate: Candidate) -> str | None:
        for rule in space.rules:
            reason = rule_violation(rule, candidate)
            if reason:
                return reason
        return None

    return check


def context_tokens(space: SearchSpace, candidate: Candidate) -> int:
    """The context a candidate launches with (its engine's context knob), else the model's."""
    value = candidate.params.get(get_engine(space.engine).context_knob)
    if isinstance(value, int) and value > 0:
        return value
    return space.model.context_max or 2048


def needle_lengths(space: SearchSpace) -> list[int]:
    """The study's needle lengths, the same for every candidate: `lengths_tokens`, else
    `length_fractions` of `target_context_tokens` (default: the largest context the space offers)."""
    cfg = space.gates.needle
    if cfg is None:
        return []
    if cfg.lengths_tokens:
        return sorted(set(cfg.lengths_tokens))
    target = cfg.target_context_tokens or max(context_tokens(space, c) for c in enumerate_candidates(space))
    return sorted({int(f * target) for f in cfg.length_fractions})


def needle_check(space: SearchSpace, accuracy: bool) -> Check:
    """Refuse, before launching, a candidate whose context cannot hold the study's needle test."""
    from autotune.bench.needle import TEMPLATE_RESERVE_TOKENS

    cfg = space.gates.needle
    if not accuracy or cfg is None:
        return lambda candidate: None
    longest = max(needle_lengths(space))

    def check(candidate: Candidate) -> str | None:
        context = context_tokens(space, candidate)
        room = context - cfg.max_tokens - TEMPLATE_RESERVE_TOKENS
        if longest > room:
            return (
                f"needle: a {context}-token context cannot hold the study's needle at {longest} tokens "
                f"(room {room} after the answer {cfg.max_tokens} and template {TEMPLATE_RESERVE_TOKENS})"
            )
        return None

    return check


def probes_check(probes: Iterable[ProbeResult]) -> Check:
    failing = [p for p in probes if p.params and probe_is_evidence(p)]

    def check(candidate: Candidate) -> str | None:
        for probe in failing:
            if probe_blocks(probe, candidate):
                why = f" ({probe.signature})" if probe.signature else ""
                return f"probe: {probe.feature} fails on this host{why}"
        return None

    return check


def known_failures_check(profile: HardwareProfile) -> Check:
    """The profile's known failures, for a profile that is not this host's (no probe of such a host
    here); on the host itself (`detected_on`) its probes decide, so a newer engine that runs it is seen."""
    known = [] if profile.detected_on else profile.known_failures

    def check(candidate: Candidate) -> str | None:
        for failure in known:
            if failure.engine == candidate.engine and all(
                candidate.params.get(name) == value for name, value in failure.params.items()
            ):
                arch = f" ({profile.compute_capability})" if profile.compute_capability else ""
                return f"known to fail on {profile.name}{arch}: {failure.reason} [{failure.source}]"
        return None

    return check


class Pruner:
    """All pre-launch checks in one place; `reason(candidate)` is None when it may launch."""

    def __init__(self, checks: list[Check]) -> None:
        self.checks = list(checks)

    def add(self, check: Check) -> None:
        self.checks.append(check)

    def reason(self, candidate: Candidate) -> str | None:
        for check in self.checks:
            why = check(candidate)
            if why:
                return why
        return None

"""What makes two runs the same experiment: the fingerprint of a study's space.

A study records the fingerprint of the space it was created from: engine, model, knobs with their
values and defaults, fixed settings, environment, plugin flags, rules, workload, objective and
gates. A re-run whose space differs is refused with the list of what changed; a change that only
adds values to knobs is told apart (`added_values`) and named as such in the refusal; it is not
extended in place, because Optuna keeps a categorical's choices fixed for a study.

Not part of it: the space's name, description and published numbers (labels, not the experiment).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from autotune.errors import ConfigError
from autotune.models import SearchSpace


#: Gates fields added after studies were first fingerprinted (left out while empty)
LATER_GATES = ("max_regression", "max_gpu_j_per_token", "max_power_w")
#: Objective fields added since (left out while unset), e.g. capacity_at_slo's slo
LATER_OBJECTIVE = ("slo", "energy_workload", "weights")
#: Slo fields added since capacity studies were first fingerprinted (left out while unset)
LATER_SLO = ("max_requests",)
#: Model fields added since (left out while unset)
LATER_MODEL = ("vocab_size", "params_vision_b", "params_mtp_b")


def _later_unset_dropped(data: dict[str, Any], later: tuple[str, ...]) -> dict[str, Any]:
    """`data` without the fields added since that are unset, so studies made before them keep their fingerprint."""
    return {k: v for k, v in data.items() if v is not None or k not in later}


def _objective(data: dict[str, Any]) -> dict[str, Any]:
    objective = _later_unset_dropped(data, LATER_OBJECTIVE)
    if objective.get("slo") is not None:
        objective["slo"] = _later_unset_dropped(objective["slo"], LATER_SLO)
    return objective


def experiment(space: SearchSpace) -> dict[str, Any]:
    """The parts of a space that define the experiment, as plain JSON data."""
    data = space.model_dump(mode="json")
    return {
        "engine": data["engine"],
        "model": _later_unset_dropped(data["model"], LATER_MODEL),
        "knobs": {k["name"]: {f: k[f] for f in ("values", "default", "kind")} for k in data["knobs"]},
        "fixed": data["fixed"],
        "env": data["env"],
        "plugin_flags": data["plugin_flags"],
        "rules": data["rules"],
        "workload": data["workload"],
        "objective": _objective(data["objective"]),
        # a gate added to the schema since is part of the experiment only where a space sets it, so
        # studies made before it keep their fingerprint
        "gates": {k: v for k, v in data["gates"].items() if v or k not in LATER_GATES},
    }


def fingerprint(space: SearchSpace) -> str:
    blob = json.dumps(experiment(space), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _diff(path: str, old: Any, new: Any, out: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in new:
                out.append(f"{where} removed")
            elif key not in old:
                out.append(f"{where} added ({_short(new[key])})")
            else:
                _diff(where, old[key], new[key], out)
    elif old != new:
        out.append(f"{path}: {_short(old)} -> {_short(new)}")


def changes(old: SearchSpace, new: SearchSpace) -> list[str]:
    """What differs between the study's space and this run's, one line per changed field."""
    out: list[str] = []
    _diff("", experiment(old), experiment(new), out)
    return out


def added_values(old: SearchSpace, new: SearchSpace) -> dict[str, list[Any]] | None:
    """knob -> values the new space adds, when that is the only difference; else None."""
    a, b = experiment(old), experiment(new)
    if {k: v for k, v in a.items() if k != "knobs"} != {k: v for k, v in b.items() if k != "knobs"}:
        return None
    if set(a["knobs"]) != set(b["knobs"]):
        return None
    added: dict[str, list[Any]] = {}
    for name, was in a["knobs"].items():
        now = b["knobs"][name]
        if was["default"] != now["default"] or was["kind"] != now["kind"]:
            return None
        if any(v not in now["values"] for v in was["values"]):
            return None
        extra = [v for v in now["values"] if v not in was["values"]]
        if extra:
            added[name] = extra
    return added or None


def check_same_experiment(study: str, old: SearchSpace, new: SearchSpace) -> None:
    """Refuse to resume `study` with a space that is not the one it was created from."""
    if fingerprint(old) == fingerprint(new):
        return
    listed = "; ".join(changes(old, new)[:6])
    more = len(changes(old, new)) - 6
    if more > 0:
        listed += f"; and {more} more"
    grown = added_values(old, new)
    if grown is not None:
        adds = ", ".join(f"{k} + {', '.join(map(_short, v))}" for k, v in grown.items())
        raise ConfigError(
            f"study {study!r} was created from another space: the new one only adds knob values ({adds}), "
            "but a study's choices stay fixed (Optuna); run the wider space as a new study with --study NAME"
        )
    raise ConfigError(
        f"study {study!r} was created from another space ({listed}); "
        "run the changed space as a new study with --study NAME, or restore the space"
    )

"""What the installed vLLM accepts, read from the engine itself rather than from a list written
for one version: every `vllm serve` flag with its choices and default (its own argparse parser),
and the registries behind the knobs a space tunes (attention, MoE and linear backends, KV-cache
dtypes, quantization and speculative methods).

`DUMP` runs in the engine's Python (a subprocess: vLLM imports torch and CUDA); `python -m
autotune.engines.vllm_choices` prints the same JSON, which is how the recorded dumps under
tests/data/ were made on the GPU machine. `cached_choices` keeps each answer on disk per engine
version and host fingerprint (and per DUMP, so a changed question is asked again).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.errors import EngineUnavailable
from autotune.checkpoint.files import cache_dir

# Imports only what both 0.26 and 0.33 hold at the same place; a registry a version lacks is [].
DUMP = r'''
import argparse, enum, json, typing
import vllm

def literal(module, name):
    try:
        mod = __import__(module, fromlist=[name])
        return sorted(str(v) for v in typing.get_args(getattr(mod, name)))
    except (ImportError, AttributeError):
        return []

def plain(value):
    if isinstance(value, enum.Enum):
        return value.name
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)

from vllm.entrypoints.cli.serve import ServeSubcommand
top = argparse.ArgumentParser()
serve = ServeSubcommand().subparser_init(top.add_subparsers())
flags = {}
options = sorted({o for action in serve._actions for o in action.option_strings})
for action in serve._actions:
    longs = [o for o in action.option_strings if o.startswith("--") and not o.startswith("--no-")]
    if not longs:
        continue
    choices = sorted(str(plain(c)) for c in action.choices) if action.choices else None
    flags[longs[0]] = {"choices": choices, "default": plain(action.default)}

try:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    backends = [b.name for b in AttentionBackendEnum if b.name != "CUSTOM"]
except ImportError:
    backends = []
try:
    from vllm.model_executor.layers.quantization import DEPRECATED_QUANTIZATION_METHODS as deprecated
except ImportError:
    deprecated = []
try:
    import dataclasses
    from vllm.config.speculative import SpeculativeConfig
    spec_keys = sorted(f.name for f in dataclasses.fields(SpeculativeConfig))
except (ImportError, TypeError):
    spec_keys = []
from importlib.metadata import entry_points
plugins = sorted({ep.name for ep in entry_points(group="vllm.general_plugins")})
print(json.dumps({
    "version": vllm.__version__,
    "flags": flags,
    "options": options,
    "attention_backends": sorted(backends),
    "kv_cache_dtypes": literal("vllm.config.cache", "CacheDType"),
    "quantization_methods": literal("vllm.model_executor.layers.quantization", "QuantizationMethods"),
    "deprecated_quantization_methods": sorted(deprecated),
    "general_plugins": plugins,
    "speculative_methods": literal("vllm.config.speculative", "SpeculativeMethod"),
    "speculative_config_keys": spec_keys,
    "moe_backends": literal("vllm.config.kernel", "MoEBackend"),
    "linear_backends": literal("vllm.config.kernel", "LinearBackend"),
}, sort_keys=True))
'''


class FlagChoices(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    choices: list[str] | None = Field(None, description="the values argparse accepts; None: any")
    default: bool | int | float | str | None = None


class EngineChoices(BaseModel):
    """One vLLM version's accepted values, as its own code states them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str
    flags: dict[str, FlagChoices] = Field(description="`--flag` -> its choices and default")
    options: list[str] = Field(default_factory=list, description="every option string `vllm serve` accepts, aliases and --no- forms too")
    attention_backends: list[str]
    kv_cache_dtypes: list[str]
    quantization_methods: list[str]
    deprecated_quantization_methods: list[str] = Field(default_factory=list)
    general_plugins: list[str] = Field(
        default_factory=list,
        description="vLLM plugins installed (entry points `vllm.general_plugins`); one may register a "
        "quantization method at start, which the method list above cannot hold",
    )
    speculative_methods: list[str]
    speculative_config_keys: list[str] = Field(
        default_factory=list, description="the keys --speculative-config takes (SpeculativeConfig's fields); "
        "[] where the dump did not read them")
    moe_backends: list[str]
    linear_backends: list[str]


def read_choices(python: str = sys.executable, timeout_s: float = 180.0) -> EngineChoices:
    """Ask the vLLM importable by `python` what it accepts (imports torch: tens of seconds)."""
    try:
        done = subprocess.run([python, "-c", DUMP], capture_output=True, text=True, timeout=timeout_s, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EngineUnavailable(f"reading vLLM's choices: no answer after {timeout_s:.0f} s") from None
    except OSError as exc:
        raise EngineUnavailable(f"reading vLLM's choices: cannot run {python}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EngineUnavailable(f"reading vLLM's choices failed (exit {done.returncode}): {tail}")
    try:
        return EngineChoices.model_validate(json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError, ValidationError) as exc:
        raise EngineUnavailable(f"reading vLLM's choices: unexpected answer ({type(exc).__name__})") from None


def cache_path(version: str, host_key: str) -> Path:
    """Where one engine version's choices on one host fingerprint are kept."""
    question = hashlib.sha1(DUMP.encode()).hexdigest()[:8]
    return cache_dir() / "engine-choices" / f"vllm-{version}-{host_key}-{question}.json"


def cached_choices(python: str, version: str, host_key: str) -> EngineChoices:
    """The choices of the vLLM `python` imports: read once per version and host fingerprint, then
    from the cache (an unreadable cache file is read again from the engine)."""
    path = cache_path(version, host_key)
    try:
        return EngineChoices.model_validate_json(path.read_text())
    except (OSError, ValueError):
        pass
    choices = read_choices(python)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(choices.model_dump_json())
        partial.replace(path)
    except OSError:  # a read-only cache costs the next run another read, nothing more
        pass
    return choices


if __name__ == "__main__":
    print(read_choices().model_dump_json(indent=1))

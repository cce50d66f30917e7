"""vLLM's feature probes: first ask vLLM's own code (a prior), then launch it (the evidence).

(a) `selector_probe()` runs vLLM's attention-backend selector (the program autotune/probe/programs/vllm_features.py), each backend's validation, the
    FlashAttention version logic, the quantization methods' minimum capability and the
    --moe-backend choices in a subprocess on the GPU host, for the target's head_dim and dtype.
    "works" there means "vLLM's code accepts it" (evidence starts with "selector:"); a refusal is
    "fails" because vLLM raises the same error at launch.
(b) `launch_matrix()` starts `vllm serve` once per (KV dtype, attention backend[, draft_k])
    combination, each in its own process group with a timeout, sends one completion request,
    requires non-empty text, and classifies failures with autotune.engines.signatures. vLLM cannot switch
    KV dtype or backend inside one process, so each combination is one launch; launches are made
    cheap (--enforce-eager, --load-format dummy, a short context, a fixed small KV cache) and can
    run side by side on one GPU (--parallel). They run riskiest first (autotune/probe/order.py:
    the reference, then what --space uses that the selector accepted but no launch confirmed),
    so a budget (--budget-s) leaves the safe cells untested, not the ones likely to fail.

  python -m autotune.probe.features.vllm --model DIR --out results.json [--launch] [--timeout 300]
      [--kv auto fp8 ...] [--backends auto FLASH_ATTN ...] [--draft-k 0 4] [--combos fp8:TRITON_ATTN,...]
      [--tiny] [--real-weights] [--golden TEXT] [--parallel N] [--budget-s S]

One module of ~640 lines on purpose: the prior (vLLM's own selector) and the evidence (the launch)
are read together per feature; each half alone would pass the feature list back and forth.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from autotune.engines.base import ProbeRequest, acceptance_length
from autotune.engines.vllm import VllmEngine
from autotune.errors import AutotuneError, ConfigError, ProbeError
from autotune.probe.order import BUDGET_USED_UP, order_cells
from autotune.launchers.base import LaunchOptions, free_port
from autotune.checkpoint.config import read_config, text_fields
from autotune.models import Candidate, FailureCause, FailureInfo, ModelSpec, ProbeResult, Scalar
from autotune.probe.features.vllm_rows import BACKENDS, KV_DTYPES, rows_for
from autotune.probe.runner import PROBES_HOME, probe_env, python_module_argv
from autotune.engines.signatures import classify
from autotune.trial.launch import FALLBACK_CAUSES, StartFailed, engine_up

SELECTOR_PROGRAM = "autotune.probe.programs.vllm_features"
SELECTOR_MARK = "AUTOTUNE_SELECTOR "  # the program prints its answer on the line that starts so
SPEC_METHOD = "ngram"
SERVED_NAME = "probe"
PROMPT = "The capital of France is"
#: `golden` value that compares every launch's greedy answer with the reference launch's
REFERENCE_GOLDEN = "@reference"
GOLDEN_WORDS = 2
SPEC_PROMPT = "1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3,"

# Launch settings that make a probe start fast and fit beside other probes on one GPU.
FAST_PARAMS: dict[str, Scalar] = {
    "enforce_eager": True,
    "load_format": "dummy",
    "max_model_len": 1024,
    "max_num_seqs": 8,
    "gpu_memory_utilization": 0.1,
    "kv_cache_memory_bytes": 1 << 30,  # a fixed KV size skips vLLM's memory profiling
}
# The FlashInfer sampler JIT-compiles on a fresh machine (minutes); the probes test attention.
PROBE_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0"}


@dataclass(frozen=True)
class Combo:
    """One launch: KV-cache dtype x attention backend (None = vLLM chooses) x ngram draft_k."""

    kv_cache_dtype: str
    attention_backend: str | None
    draft_k: int = 0

    def params(self) -> dict[str, Scalar]:
        """Knob values the result is about; draft_k 0 results hold for every draft_k."""
        params: dict[str, Scalar] = {"kv_cache_dtype": self.kv_cache_dtype, "attention_backend": self.attention_backend}
        if self.draft_k:
            params.update(spec_method=SPEC_METHOD, draft_k=self.draft_k)
        return params

    def label(self) -> str:
        spec = f" draft_k={self.draft_k}" if self.draft_k else ""
        return f"kv_cache_dtype={self.kv_cache_dtype} attention_backend={self.attention_backend or 'auto'}{spec}"

    @property
    def is_reference(self) -> bool:
        return self.kv_cache_dtype == "auto" and self.attention_backend is None and not self.draft_k


def _backend(name: str | None) -> str | None:
    return None if name in (None, "", "auto", "null", "None") else name


def make_combos(
    kv_dtypes: Iterable[str], backends: Iterable[str | None], draft_ks: Iterable[int] = (0,)
) -> list[Combo]:
    """Every combination, the reference (auto, auto, 0) first: it doubles as the warm-up launch."""
    combos = [Combo(kv, _backend(be), k) for k in draft_ks for kv in kv_dtypes for be in backends]
    return sorted(dict.fromkeys(combos), key=lambda c: not c.is_reference)


def parse_combos(text: str) -> list[Combo]:
    """'fp8:TRITON_ATTN,auto:auto,fp8:auto:4' -> combos (backend 'auto' = vLLM chooses)."""
    combos = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        parts = item.split(":")
        if len(parts) not in (2, 3) or not parts[0]:
            raise ConfigError(f"combo {item!r} is not KV_DTYPE:BACKEND[:DRAFT_K] (backend 'auto' lets vLLM choose)")
        try:
            draft_k = int(parts[2]) if len(parts) == 3 else 0
        except ValueError:
            raise ConfigError(f"combo {item!r}: draft_k must be an integer") from None
        combos.append(Combo(parts[0], _backend(parts[1]), draft_k))
    return sorted(dict.fromkeys(combos), key=lambda c: not c.is_reference)


def filter_combos(combos: Iterable[Combo], only: Iterable[tuple[str, str | None]] | None) -> list[Combo]:
    """Keep the combos whose (kv_cache_dtype, attention_backend) is in `only` (all when None)."""
    if only is None:
        return list(combos)
    keep = {(kv, _backend(be)) for kv, be in only}
    return [c for c in combos if (c.kv_cache_dtype, c.attention_backend) in keep]


def model_attention(model_dir: str | Path) -> tuple[int, str]:
    """(head_dim, dtype name) of a checkpoint directory, from its config.json."""
    config = text_fields(read_config(model_dir))
    return _head_dim(config, model_dir), _dtype_name(config)


def _head_dim(config: dict[str, Any], model_dir: str | Path) -> int:
    try:
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // int(config["num_attention_heads"]))
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{model_dir}/config.json has no head_dim (nor hidden_size / num_attention_heads)") from None
    return head_dim


def _dtype_name(config: dict[str, Any]) -> str:
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16").removeprefix("torch.")
    return {"float": "float32", "half": "float16"}.get(dtype, dtype)


# ---------------------------------------------------------------------- (a) ask vLLM's code


def selector_probe(
    *,
    head_dim: int,
    dtype: str = "bfloat16",
    num_heads: int | None = None,
    kv_dtypes: Iterable[str] = KV_DTYPES,
    backends: Iterable[str | None] = (None, *BACKENDS),
    quantizations: Iterable[str] = (),
    moe_backends: Iterable[str] = (),
    block_size: int | None = None,
    python: str = sys.executable,
    timeout_s: float = 300.0,
) -> tuple[dict[str, Any], list[ProbeResult]]:
    """Run the selector program (autotune/probe/programs/vllm_features.py) with `python` (a GPU fault must not poison us).

    Returns (info about the device and vLLM, results); an unusable vLLM gives one "untested"
    result saying why, never an exception.
    """
    request = {
        "head_dim": head_dim,
        "dtype": dtype,
        "num_heads": num_heads,
        "kv_dtypes": list(kv_dtypes),
        "backends": [_backend(b) for b in backends],
        "quantizations": list(quantizations),
        "moe_backends": list(moe_backends),
        "block_size": block_size,
        "mark": SELECTOR_MARK,
    }
    argv = [python, *python_module_argv(SELECTOR_PROGRAM, json.dumps(request))[1:]]
    t0 = time.monotonic()
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=probe_env(),
                             cwd=PROBES_HOME, stdin=subprocess.DEVNULL)
        text = out.stdout + out.stderr
    except subprocess.TimeoutExpired as exc:
        text = f"no answer after {timeout_s:.0f} s; " + _as_text(exc.stdout) + _as_text(exc.stderr)
    except OSError as exc:
        text = f"could not run {python}: {exc}"
    duration = time.monotonic() - t0
    line = next((ln for ln in text.splitlines() if ln.startswith(SELECTOR_MARK)), None)
    if line is None:
        why = _error_lines(text) or text[-1500:]
        failed = ProbeResult(feature="selector", status="untested", evidence=f"selector did not run: {why}",
                             duration_s=duration)
        return {}, [failed]
    payload = json.loads(line.removeprefix(SELECTOR_MARK))
    results = [ProbeResult(**r) for r in payload["results"]]
    return payload["info"], results


# ---------------------------------------------------------------------- (b) launch each combination


def _classify(text: str) -> FailureInfo | None:
    return classify(text, engine="vllm")


_ERROR_LINE = re.compile(r"Error|error:|Exception|assert |Traceback|Killed|CUDA out of memory")


def _error_lines(text: str, n: int = 6) -> str:
    lines = [ln.strip() for ln in text.splitlines() if _ERROR_LINE.search(ln) and not ln.lstrip().startswith("File ")]
    return " | ".join(lines[-n:])


def _as_text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


_spawn_lock = threading.Lock()


def ask(base_url: str, prompt: str, max_tokens: int, timeout_s: float = 120.0) -> tuple[str, int]:
    """One greedy completion; returns (text, completion_tokens). Raises httpx errors."""
    body: dict[str, Any] = {"model": SERVED_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                            "ignore_eos": True, "skip_special_tokens": False}
    with httpx.Client(timeout=timeout_s) as http:
        reply = http.post(base_url + "/v1/completions", json=body)
        if reply.status_code == 400:  # a server without the vLLM extras: plain request
            body = {k: body[k] for k in ("model", "prompt", "max_tokens", "temperature")}
            reply = http.post(base_url + "/v1/completions", json=body)
        reply.raise_for_status()
        data = reply.json()
    text = data["choices"][0].get("text") or ""
    tokens = int((data.get("usage") or {}).get("completion_tokens") or 0)
    return text, tokens


def read_metrics(engine: VllmEngine, base_url: str) -> dict[str, float]:
    """The engine's speculative-decoding counters now (Engine.spec_decode_counters' names)."""
    with httpx.Client(timeout=10.0) as http:
        reply = http.get(f"{base_url}{engine.metrics_path}")
        reply.raise_for_status()
        return engine.spec_decode_counters(reply.text)


def launch_one(
    combo: Combo,
    model_dir: str | Path,
    *,
    engine: VllmEngine,
    base_params: dict[str, Scalar],
    env: dict[str, str],
    timeout_s: float,
    log_path: Path,
    golden: str | None = None,
) -> ProbeResult:
    """Start vLLM for one combination, ask once, stop the process group; the outcome as data."""
    params = {**base_params, **combo.params()}
    feature = f"launch:{combo.label()}"
    t0 = time.monotonic()
    model = ModelSpec(name=SERVED_NAME, path=str(model_dir))
    launch = engine.render(Candidate(engine="vllm", params=params, env=env), model, port=free_port())
    prompt, max_tokens = (SPEC_PROMPT, 32) if combo.draft_k else (PROMPT, 8)
    text, tokens, error, spec = "", 0, None, ""
    try:  # one fork at a time: parallel launches come from threads
        with engine_up(engine, launch, log_path, options=LaunchOptions(startup_timeout_s=timeout_s),
                       spawn_lock=_spawn_lock) as server:
            try:
                before = read_metrics(engine, server.base_url) if combo.draft_k else {}
                text, tokens = ask(server.base_url, prompt, max_tokens)
                if combo.draft_k:
                    length = acceptance_length(before, read_metrics(engine, server.base_url))
                    spec = f"; acceptance_length={length:.2f} on one request" if length else "; no drafts counted"
            except (httpx.HTTPError, KeyError, ValueError) as exc:
                error = f"request failed: {type(exc).__name__}: {exc}"
    except StartFailed as exc:
        # a start that timed out is untested (raise --timeout); one that crashed names the signature it
        # shows (the failure path of trial/launch.py), a crash no signature names only its error lines.
        # One the host stopped (an ENVIRONMENT class: another process holds the GPU, NCCL, a missing
        # package) says nothing of the feature: untested too, launched again by the next probe.
        failure = None if exc.timed_out or exc.failure.failure_class in FALLBACK_CAUSES else exc.failure
        host = failure is not None and failure.cause is FailureCause.ENVIRONMENT
        status = "untested" if exc.timed_out or host else "fails"
        evidence = str(exc.error) if exc.timed_out else _failure_evidence(failure, exc.log_tail, str(exc.error))
        if exc.timed_out:
            evidence += " (raise --timeout: first starts compile kernels)"
        elif host:
            evidence = f"{evidence}; not the feature: {failure.fix or 'fix the host'}, then probe again"
        return ProbeResult(feature=feature, status=status, evidence=evidence[:2000],
                           signature=failure.failure_class if failure else None,
                           params=combo.params(), duration_s=round(time.monotonic() - t0, 1))
    log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
    selected = engine.selected(log_text)
    picked = ", ".join(f"{k}={selected[k]}" for k in ("attention_backend", "flash_attn_version", "kv_cache_dtype")
                       if k in selected)
    duration = round(time.monotonic() - t0, 1)
    if error or not text:
        failure = _classify(log_text)
        why = error or f"empty completion ({tokens} tokens)"
        return ProbeResult(feature=feature, status="fails", evidence=_failure_evidence(failure, log_text, why)[:2000],
                           signature=failure.failure_class if failure else ("empty_output" if not error else None),
                           params=combo.params(), duration_s=duration)
    if golden not in (None, REFERENCE_GOLDEN) and golden not in text:
        return ProbeResult(feature=feature, status="fails", signature="golden_mismatch", params=combo.params(),
                           evidence=f"started ({picked}); answer {text!r} lacks {golden!r}", duration_s=duration)
    return ProbeResult(feature=feature, status="works", params=combo.params(), duration_s=duration, output=text,
                       evidence=f"started and answered ({picked}); {tokens} tokens {text[:80]!r}{spec}")


def _failure_evidence(failure: Any, log_text: str, fallback: str) -> str:
    if failure is not None:
        return "; ".join([failure.message, *failure.evidence[:4]])
    lines = _error_lines(log_text)
    return f"{fallback}: {lines}" if lines else fallback


def launch_matrix(
    model_dir: str | Path,
    combos: Iterable[Combo],
    *,
    log_dir: str | Path,
    engine: VllmEngine | None = None,
    base_params: dict[str, Scalar] | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 300.0,
    parallel: int = 1,
    budget_s: float | None = None,
    golden: str | None = None,
    only: Iterable[tuple[str, str | None]] | None = None,
    on_result: Callable[[ProbeResult], None] | None = None,
    launcher: Callable[..., ProbeResult] = launch_one,
) -> list[ProbeResult]:
    """Launch every combination (optionally `only` some), results in the order of `combos`.

    The first combination runs alone (the warm-up: compile caches fill); the rest run `parallel`
    at a time. Combinations not started within `budget_s` come back "untested". A golden string
    only counts when the reference combination (auto KV, auto backend) produces it.
    """
    engine = engine or VllmEngine()
    base = dict(FAST_PARAMS if base_params is None else base_params)
    todo = filter_combos(combos, only)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    deadline = None if budget_s is None else time.monotonic() + budget_s
    results: dict[Combo, ProbeResult] = {}
    reference_combo = next((c for c in todo if c.is_reference), None)

    def run(combo: Combo) -> ProbeResult:
        if deadline is not None and time.monotonic() > deadline:
            result = ProbeResult(feature=f"launch:{combo.label()}", status="untested", params=combo.params(),
                                 evidence=BUDGET_USED_UP)
        else:
            name = re.sub(r"[^\w.=-]+", "_", combo.label())
            for attempt in ("", "-retry"):
                log_path = log_dir / f"{name}{attempt}.log"
                try:
                    result = launcher(combo, model_dir, engine=engine, base_params=base, env=dict(env or {}),
                                      timeout_s=timeout_s, log_path=log_path, golden=golden)
                except AutotuneError as exc:  # the probe itself could not run this combination
                    result = ProbeResult(feature=f"launch:{combo.label()}", status="untested", params=combo.params(),
                                         evidence=f"not launched: {exc}")
                if not (result.status == "fails" and _port_clash(log_path)):
                    break  # a port taken by a neighbouring launch is not the combination's fault: retry once
        results[combo] = result  # as launched; the golden rule applies at the end, over all of them
        if on_result:  # the reference runs first, so progress can already show the final verdict
            reference = results.get(reference_combo) if reference_combo is not None else None
            on_result(_golden_rule(result, reference, golden) if reference else result)
        return result

    if todo:
        run(todo[0])
        with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            list(pool.map(run, todo[1:]))
    ordered = [results[c] for c in todo]
    return _apply_golden_rule(ordered, todo, golden)


def _port_clash(log_path: Path) -> bool:
    try:
        return "Address already in use" in log_path.read_text(errors="replace")
    except OSError:
        return False


def _apply_golden_rule(results: list[ProbeResult], combos: list[Combo], golden: str | None) -> list[ProbeResult]:
    """Golden mismatches stand only if the reference combination produced the golden text."""
    reference = next((r for r, c in zip(results, combos) if c.is_reference), None)
    return [_golden_rule(r, reference, golden) for r in results]


def _first_words(text: str | None, n: int = GOLDEN_WORDS) -> list[str]:
    return re.findall(r"\w+", (text or "").lower())[:n]


def _against_reference(result: ProbeResult, reference: ProbeResult | None) -> ProbeResult:
    """Golden check for every model: the first words of the greedy answer equal the reference
    launch's (auto KV, auto backend) to the same prompt. Draft combos answer another prompt."""
    if (result.status != "works" or reference is None or reference is result or reference.status != "works"
            or result.feature == reference.feature or "draft_k" in result.params):
        return result
    mine, theirs = _first_words(result.output), _first_words(reference.output)
    if mine == theirs:
        return result
    return result.model_copy(update={
        "status": "fails", "signature": "golden_mismatch",
        "evidence": f"greedy answer {result.output!r} differs from the reference launch's {reference.output!r} "
                    f"in its first {GOLDEN_WORDS} words; {result.evidence}"[:2000],
    })


def _golden_rule(result: ProbeResult, reference: ProbeResult | None, golden: str | None) -> ProbeResult:
    if golden == REFERENCE_GOLDEN:
        return _against_reference(result, reference)
    if golden is None or result.signature != "golden_mismatch" or (reference is not None and reference.status == "works"):
        return result
    why = "the reference launch did not produce it" if reference else "no reference launch (auto, auto) to trust it"
    return result.model_copy(
        update={"status": "works", "signature": None, "evidence": f"{result.evidence} (golden ignored: {why})"}
    )


# ---------------------------------------------------------------------- CLI


def feature_probes(engine: VllmEngine, request: ProbeRequest) -> list[ProbeResult]:
    """`Engine.feature_probes` for vLLM: its own selectors first (a prior), then real launches of
    every KV dtype x attention backend the selectors accept (eager, real weights), within
    `budget_s`, what the space uses first; each launch's greedy answer must start like the
    reference launch's (auto KV dtype, auto backend). The matrix's rows come from the installed
    version's choices where they are known (probe/features/vllm_rows.py). With `stored` (a resume), only the cells an
    earlier probe left untested are launched."""
    only = [r for r in request.stored if r.status == "untested" and r.params]
    logs_dir = request.logs_dir
    logs_dir.mkdir(parents=True, exist_ok=True)
    out = logs_dir / "vllm_features.json"
    argv = ["--model", request.model_path, "--out", str(out), "--logs", str(logs_dir), "--launch", "--real-weights"]
    argv += ["--golden", REFERENCE_GOLDEN, "--parallel", "3", "--timeout", f"{request.timeout_s:g}",
             "--budget-s", f"{request.budget_s:g}"]
    from autotune.space.candidates import load_space

    rows = rows_for(engine, request, load_space(request.space_name) if request.space_name else None)
    argv += ["--kv", *rows.kv_dtypes, "--backends", "auto", *rows.backends]
    argv += ["--python", engine.python]
    if request.space_name:
        argv += ["--space", request.space_name]
    if only:
        argv += ["--combos", ",".join(_combo_text(r.params) for r in only) + ",auto:auto"]
    with contextlib.redirect_stdout(sys.stderr):  # its progress lines must not mix into --json output
        code = main(argv)
    if not out.exists():
        raise ProbeError(f"vLLM feature probes wrote no results (exit {code}); logs in {logs_dir}")
    return [ProbeResult.model_validate(r) for r in json.loads(out.read_text())["results"]]


def _combo_text(params: dict[str, Scalar]) -> str:
    """A launch cell's params as a --combos item: KV:BACKEND[:K]."""
    text = f"{params.get('kv_cache_dtype') or 'auto'}:{params.get('attention_backend') or 'auto'}"
    return text + (f":{params['draft_k']}" if params.get("draft_k") else "")


def refused_combos(combos: Iterable[Combo], results: Iterable[dict[str, Any]]) -> list[Combo]:
    """Combos the selector already refused (the launch would raise the same error)."""
    refused_pairs, refused_kv = set(), set()
    for r in results:
        params = r.get("params") or {}
        if r.get("status") != "fails" or not str(r.get("feature", "")).startswith("selector:"):
            continue
        if "attention_backend" in params:
            refused_pairs.add((params.get("kv_cache_dtype"), params["attention_backend"]))
        elif set(params) == {"kv_cache_dtype"}:
            refused_kv.add(params["kv_cache_dtype"])
    return [c for c in combos
            if c.kv_cache_dtype in refused_kv or (c.kv_cache_dtype, c.attention_backend) in refused_pairs]


DEFAULTS: dict[str, Scalar] = {"kv_cache_dtype": "auto", "attention_backend": None, "draft_k": 0, "spec_method": None}


def plan_launches(combos: list[Combo], space_name: str | None, prior: Iterable[dict[str, Any]]) -> dict[Combo, str]:
    """The combos in launch order (autotune/probe/order.py), each with why it sits there."""
    from autotune.space.candidates import load_space

    space = load_space(space_name) if space_name else None
    prior_results = [ProbeResult.model_validate(r) for r in prior]
    ordered = order_cells(combos, Combo.params, is_reference=lambda c: c.is_reference, space=space,
                          defaults=DEFAULTS, prior=prior_results)
    return dict(ordered)


def _usable_fast_params(python: str, base: dict[str, Scalar]) -> tuple[dict[str, Scalar], dict[str, str], list[str]]:
    """Drop launch settings (and probe env vars) this vLLM does not have, instead of failing on them."""
    from autotune.engines import vllm as V

    notes: list[str] = []
    try:
        flags = V.supported_flags(python)
    except AutotuneError as exc:
        return base, dict(PROBE_ENV), [f"flag check skipped: {exc}"]
    kept = {}
    for knob, value in base.items():
        missing = [f for f in V.option_names(V.option_args({knob: value})) if f not in flags]
        if missing:
            notes.append(f"dropped {knob}={value}: this vLLM has no {', '.join(missing)}")
        else:
            kept[knob] = value
    try:
        known = V.known_env_vars(python)
        env = {k: v for k, v in PROBE_ENV.items() if k in known}
    except AutotuneError:
        env = {}
    return kept, env, notes


def _tiny_mirror(model_dir: Path, out: Path, weights: bool) -> Path:
    """A tiny random-weight mirror of `model_dir` (the program autotune/probe/programs/tiny_models.py builds it)."""
    argv = python_module_argv("autotune.probe.programs.tiny_models", "--like", str(model_dir), "--out", str(out))
    done = subprocess.run(argv + ([] if weights else ["--no-weights"]), env=probe_env(), cwd=PROBES_HOME,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise ConfigError(f"could not build a tiny mirror of {model_dir} (exit {done.returncode})")
    return out


def _write(out: Path, payload: dict[str, Any]) -> None:
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    tmp.replace(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotune.probe.features.vllm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, metavar="DIR", help="Hugging Face checkpoint directory of the target")
    parser.add_argument("--out", required=True, metavar="FILE", help="results JSON (rewritten after every result)")
    parser.add_argument("--launch", action="store_true", help="also launch vLLM for each combination")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for one engine to become healthy")
    parser.add_argument("--kv", nargs="+", default=list(KV_DTYPES), metavar="DTYPE")
    parser.add_argument("--backends", nargs="+", default=["auto", *BACKENDS], metavar="NAME",
                        help="'auto' = vLLM chooses")
    parser.add_argument("--draft-k", nargs="+", type=int, default=[0], metavar="K",
                        help="ngram draft lengths to launch")
    parser.add_argument("--combos", metavar="LIST",
                        help="launch only these: KV:BACKEND[:K],... (overrides --kv/--backends)")
    parser.add_argument("--quantization", nargs="*", default=[], metavar="METHOD",
                        help="selector: min-capability check")
    parser.add_argument("--moe-backends", nargs="*", default=[], metavar="NAME", help="selector: --moe-backend choices")
    parser.add_argument("--tiny", action="store_true", help="launch on a tiny random-weight mirror of --model")
    parser.add_argument("--real-weights", action="store_true", help="load the checkpoint (no --load-format dummy)")
    parser.add_argument("--no-eager", action="store_true", help="launch with CUDA graphs (slower starts)")
    parser.add_argument("--golden", metavar="TEXT", help=f"require TEXT in the answer to {PROMPT!r} (real weights)")
    parser.add_argument("--parallel", type=int, default=1, help="launches side by side after the first")
    parser.add_argument("--budget-s", type=float, help="start no launch after this many seconds")
    parser.add_argument("--launch-refused", action="store_true", help="also launch combos the selector refused")
    parser.add_argument("--no-selector", action="store_true")
    parser.add_argument("--logs", metavar="DIR", help="engine logs (default: next to --out)")
    parser.add_argument("--python", default=sys.executable, help="interpreter that has vLLM")
    parser.add_argument("--space", metavar="NAME|FILE",
                        help="launch first what this search space uses (autotune/probe/order.py)")
    args = parser.parse_args(argv)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    log_dir = Path(args.logs) if args.logs else out.with_name(out.stem + "-logs")
    head_dim, dtype = model_attention(args.model)
    num_heads = text_fields(read_config(args.model)).get("num_attention_heads")
    combos = parse_combos(args.combos) if args.combos else make_combos(args.kv, args.backends, args.draft_k)
    payload: dict[str, Any] = {"model": str(args.model), "head_dim": head_dim, "dtype": dtype, "info": {}, "notes": [],
                               "results": []}

    if not args.no_selector:
        kv_all = list(dict.fromkeys(c.kv_cache_dtype for c in combos))
        backends_all = list(dict.fromkeys(c.attention_backend for c in combos))
        info, results = selector_probe(head_dim=head_dim, dtype=dtype, num_heads=num_heads, kv_dtypes=kv_all,
                                       backends=backends_all,
                                       quantizations=args.quantization, moe_backends=args.moe_backends,
                                       python=args.python)
        payload["info"] = info
        payload["results"] += [r.model_dump() for r in results]
        _write(out, payload)
        _print_results(results)

    if args.launch:
        skipped = [] if args.launch_refused else refused_combos(combos, payload["results"])
        if skipped:
            combos = [c for c in combos if c not in skipped]
            payload["notes"].append("not launched, refused by the selector: " + "; ".join(c.label() for c in skipped))
        model_dir = Path(args.model)
        if args.tiny:
            model_dir = _tiny_mirror(model_dir, out.with_name(out.stem + "-tiny-model"), args.real_weights)
            payload["notes"].append(f"launched on a tiny mirror: {model_dir}")
        base = dict(FAST_PARAMS)
        if args.real_weights:
            base.pop("load_format")
        if args.no_eager:
            base.pop("enforce_eager")
        base, env, notes = _usable_fast_params(args.python, base)
        payload["notes"] += notes
        payload["launch_params"] = base
        payload["launch_env"] = env

        write_lock = threading.Lock()

        def record(result: ProbeResult) -> None:  # called from the launch threads
            with write_lock:
                payload["results"].append(result.model_dump())
                _write(out, payload)
                line = f"{result.status:9s} {result.duration_s:6.1f}s {result.feature}  {result.signature or ''}"
                print(line, flush=True)

        why = plan_launches(combos, args.space, payload["results"])
        combos = list(why)
        results = launch_matrix(model_dir, combos, log_dir=log_dir, engine=VllmEngine(python=args.python),
                                base_params=base, env=env, timeout_s=args.timeout, parallel=args.parallel,
                                budget_s=args.budget_s, golden=args.golden, on_result=record)
        results = [r.model_copy(update={"evidence": f"{r.evidence}; {why[c]}"}) if r.status == "untested" else r
                   for r, c in zip(results, combos)]
        launched = {r.feature for r in results}
        payload["results"] = [r for r in payload["results"] if r["feature"] not in launched]
        payload["results"] += [r.model_dump() for r in results]
    _write(out, payload)
    print(f"wrote {out} ({len(payload['results'])} results)")
    for note in payload["notes"]:
        print("note:", note)
    return 0


def _print_results(results: Iterable[ProbeResult]) -> None:
    for r in results:
        print(f"{r.status:9s} {r.feature}  {r.signature or ''}  {r.evidence[:160]}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AutotuneError as exc:
        sys.exit(f"error: {exc}")

"""vLLM selector probe program: ask vLLM's own code which settings it accepts, without a launch.

`python -m autotune.probe.programs.vllm_features REQUEST_JSON` runs vLLM's attention-backend selector, each
backend's validation, the FlashAttention version logic, the quantization methods' minimum
capability and the --moe-backend choices on this GPU host, for the request's head_dim and dtype,
and prints them as one JSON line that starts with the request's `mark`. "works" means "vLLM's code
accepts it" (evidence starts with "selector:"); a refusal is "fails" because vLLM raises the same
error at launch. The parent side (the request, the launches) is autotune/probe/features/vllm.py.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable
from typing import Any

from autotune.engines.signatures import classify


def selector_main(request_json: str) -> None:
    """Subprocess entry: print the selector results as one marked JSON line on stdout."""
    info, results = selector_checks(json.loads(request_json))
    print(json.loads(request_json)["mark"] + json.dumps({"info": info, "results": results}), flush=True)


def selector_checks(req: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Inside the GPU host's vLLM: every check in its own try, API differences -> "untested"."""
    results: list[dict[str, Any]] = []

    def add(feature: str, status: str, evidence: str, params: dict | None = None, signature: str | None = None) -> None:
        results.append({"feature": feature, "status": status, "evidence": evidence[:2000],
                        "params": params or {}, "signature": signature})

    try:
        import importlib.metadata
        from typing import get_args

        import torch
        from vllm.platforms import current_platform

        cap = current_platform.get_device_capability()
        cap_int = cap.to_int() if hasattr(cap, "to_int") else cap[0] * 10 + cap[1]
        info = {
            "vllm": importlib.metadata.version("vllm"),
            "torch": torch.__version__,
            "device": current_platform.get_device_name(),
            "compute_capability": f"sm_{cap_int}",
        }
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        add("selector", "untested", f"vLLM's platform did not load: {type(exc).__name__}: {exc}")
        return {}, results

    head_dim, dtype = int(req["head_dim"]), getattr(torch, req["dtype"])

    try:
        from vllm.v1.attention.backends.fa_utils import get_flash_attn_version

        version = _call_supported(get_flash_attn_version, head_size=head_dim)
        add("flash_attn_version", "works" if version else "unsupported",
            f"selector: get_flash_attn_version(head_size={head_dim}) -> {version}", {"attention_backend": "FLASH_ATTN"})
    except Exception as exc:  # noqa: BLE001
        add("flash_attn_version", "untested", f"selector API differs: {type(exc).__name__}: {exc}")

    try:
        from vllm.config.cache import CacheDType

        allowed: set[str] | None = set(get_args(CacheDType))
    except Exception:  # noqa: BLE001
        allowed = None
    backend_enum = _import_first("vllm.v1.attention.backends.registry:AttentionBackendEnum",
                                 "vllm.attention.backends.registry:AttentionBackendEnum",
                                 "vllm.attention.backends.registry:_Backend")
    config_cls = _import_first("vllm.v1.attention.selector:AttentionSelectorConfig",
                               "vllm.attention.selector:AttentionSelectorConfig")
    for kv in req["kv_dtypes"]:
        if allowed is not None and kv not in allowed:
            add(f"selector:kv_cache_dtype={kv}", "fails",
                f"selector: {kv!r} is not a --kv-cache-dtype of this vLLM (allowed: {', '.join(sorted(allowed))})",
                {"kv_cache_dtype": kv})
            continue
        for backend in req["backends"]:
            params = {"kv_cache_dtype": kv, "attention_backend": backend}
            feature = f"selector:attention kv_cache_dtype={kv} attention_backend={backend or 'auto'}"
            try:
                if backend_enum is None:
                    raise ImportError("no AttentionBackendEnum in this vLLM")
                chosen = _select_attention(current_platform, backend_enum, config_cls, backend, head_dim, dtype, kv,
                                           req.get("block_size"), req.get("num_heads"))
                add(feature, "works", f"selector: accepted -> {chosen} (vLLM's code, not a launch)", params)
            except KeyError:
                add(feature, "fails", f"selector: this vLLM has no attention backend named {backend}", params)
            except ValueError as exc:
                add(feature, "fails", f"selector: {exc}", params, _signature(str(exc)))
            except Exception as exc:  # noqa: BLE001
                add(feature, "untested", f"selector API differs: {type(exc).__name__}: {exc}", params)

    if req.get("quantizations"):
        try:
            from vllm.model_executor.layers.quantization import get_quantization_config
        except Exception as exc:  # noqa: BLE001
            get_quantization_config = None
            add("selector:quantization", "untested", f"selector API differs: {type(exc).__name__}: {exc}")
        for method in req["quantizations"] if get_quantization_config else ():
            params = {"quantization": method}
            try:
                minimum = get_quantization_config(method).get_min_capability()
                status = "works" if cap_int >= minimum else "fails"
                add(f"selector:quantization={method}", status,
                    f"selector: get_min_capability() = {minimum}, device sm_{cap_int}", params)
            except ValueError as exc:
                add(f"selector:quantization={method}", "fails", f"selector: {exc}", params)
            except Exception as exc:  # noqa: BLE001
                add(f"selector:quantization={method}", "untested",
                    f"selector API differs: {type(exc).__name__}: {exc}", params)

    if req.get("moe_backends"):
        try:
            from vllm.config.kernel import MoEBackend

            choices = set(get_args(MoEBackend))
        except Exception as exc:  # noqa: BLE001
            choices = set()
            add("selector:moe_backend", "untested", f"selector API differs: {type(exc).__name__}: {exc}")
        for name in req["moe_backends"] if choices else ():
            params = {"moe_backend": name}
            if name in choices:
                add(f"selector:moe_backend={name}", "untested",
                    "selector: a --moe-backend choice of this vLLM; whether it runs depends on the MoE quantization",
                    params)
            else:
                add(f"selector:moe_backend={name}", "fails",
                    f"selector: not a --moe-backend choice (choices: {', '.join(sorted(choices))})", params)
    return info, results


def _select_attention(platform: Any, backend_enum: Any, config_cls: Any, backend: str | None, head_dim: int,
                      dtype: Any, kv: str, block_size: int | None, num_heads: int | None = None) -> str:
    """The platform's own get_attn_backend_cls, called the way this vLLM version wants it."""
    selected = backend_enum[backend] if backend else None
    fn = platform.get_attn_backend_cls
    parameters = list(inspect.signature(fn).parameters.values())
    names = {p.name for p in parameters}
    if "attn_selector_config" in names and config_cls is not None:
        fields = getattr(config_cls, "_fields", None) or list(inspect.signature(config_cls).parameters)
        values = {"head_size": head_dim, "dtype": dtype, "kv_cache_dtype": kv, "block_size": block_size}
        config = config_cls(**{k: v for k, v in values.items() if k in fields})
        extra = {"num_heads": num_heads} if "num_heads" in names and num_heads is not None else {}
        return str(fn(selected, attn_selector_config=config, **extra))
    values = {"head_size": head_dim, "dtype": dtype, "kv_cache_dtype": kv, "block_size": block_size or 16,
              "use_v1": True, "use_mla": False, "has_sink": False, "use_sparse": False, "use_mm_prefix": False,
              "num_heads": num_heads}
    kwargs = {}
    for p in parameters[1:]:
        if p.name in values:
            kwargs[p.name] = values[p.name]
        elif p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"get_attn_backend_cls needs {p.name!r}, which this probe does not know")
    return str(fn(selected, **kwargs))


def _call_supported(fn: Callable[..., Any], **kwargs: Any) -> Any:
    names = set(inspect.signature(fn).parameters)
    return fn(**{k: v for k, v in kwargs.items() if k in names})


def _import_first(*targets: str) -> Any:
    import importlib

    for target in targets:
        module, _, attr = target.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
    return None


def _signature(text: str) -> str | None:
    failure = classify(text, engine="vllm")
    return failure.failure_class if failure else None


if __name__ == "__main__":
    selector_main(sys.argv[1])

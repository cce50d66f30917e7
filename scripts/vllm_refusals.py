"""Generate autotune's table of vLLM's refusals from the source inside a vLLM wheel.

    python scripts/vllm_refusals.py WHEEL [--out DIR]

Reads the wheel as a zip (never installs it; the Python source is in the wheel) and writes
DIR/vllm-<version>.tsv (default: autotune/engines/vllm_refusals/), then prints the diff against
the table that was there and against the nearest other version's table. Run it on a version
bump, not in CI (a wheel is some 300 MB), and commit the table with that diff.

What it reads: every `raise E(message)` (E a ValueError, NotImplementedError, RuntimeError,
ImportError, ModuleNotFoundError or AssertionError) and every `assert cond, message` in vLLM's config
validation (vllm/config/, vllm/engine/arg_utils.py), attention-backend selection
(vllm/platforms/cuda.py, vllm/v1/attention/), the quantization methods
(vllm/model_executor/layers/quantization/) and the spec-decode proposers (vllm/v1/spec_decode/).
A message is its literal text with each formatted value a gap (f-strings, `%`, `.format`,
concatenation, a message first assigned to a local name).

What it writes per message: a pattern of at most 6 words of one literal run of the message's first
line (words glued to a gap are cut, they print differently), one that no other message of another
class or knob and no log call of the whole wheel holds; the knobs the message names, from a flag
(`--max-model-len`) or a config field (`max_model_len`, `num_speculative_tokens`, ...), else the
knob of the file's area (a spec-decode proposer: spec_method); the class from those knobs. A
message that names no knob and no missing package is left out: it says nothing a study can act on.
A row whose message (its first line, each gap a 0) a hand-written signature
(autotune/engines/signatures.py) already classifies is left out too: one path for one message.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import zipfile
from collections import Counter
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autotune.engines.refusals import TABLE_DIR, Refusal, read_table, table_path, versions, write_table  # noqa: E402

#: the sources read, each with the knob its messages concern when they name none
AREAS: tuple[tuple[str, str | None], ...] = (
    ("vllm/config/speculative.py", "spec_method"),
    ("vllm/config/quantization.py", "quantization"),
    ("vllm/config/attention.py", "attention_backend"),
    ("vllm/config/*.py", None),
    ("vllm/engine/arg_utils.py", None),
    ("vllm/platforms/cuda.py", None),
    ("vllm/v1/attention/selector.py", "attention_backend"),
    ("vllm/v1/attention/backends/*", "attention_backend"),
    ("vllm/model_executor/layers/quantization/*", "quantization"),
    ("vllm/v1/spec_decode/*", "spec_method"),
)
RAISED = frozenset({"ValueError", "NotImplementedError", "RuntimeError", "ImportError", "ModuleNotFoundError", "AssertionError"})
LOG_CALLS = frozenset({"debug", "info", "warning", "warning_once", "info_once", "debug_once", "error", "exception",
                       "critical", "warn"})

#: config fields and flag names (without dashes) -> autotune's vLLM knob. Only names that mean the
#: knob wherever they appear: `dtype`, `block_size`, `method` or `backend` also name other things
FIELDS = {
    "max_model_len": "max_model_len",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "distributed_executor_backend": "distributed_executor_backend",
    "enforce_eager": "enforce_eager",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "enable_prefix_caching": "enable_prefix_caching",
    "async_scheduling": "async_scheduling",
    "disable_custom_all_reduce": "disable_custom_all_reduce",
    "kv_cache_dtype": "kv_cache_dtype",
    "cache_dtype": "kv_cache_dtype",
    "attention_backend": "attention_backend",
    "moe_backend": "moe_backend",
    "linear_backend": "linear_backend",
    "quantization": "quantization",
    "load_format": "load_format",
    "performance_mode": "performance_mode",
    "cudagraph_mode": "cudagraph_mode",
    "num_speculative_tokens": "draft_k",
    "speculative_config": "spec_method",
    "prompt_lookup_max": "spec_prompt_lookup_max",
    "prompt_lookup_min": "spec_prompt_lookup_min",
}
#: names that mean a knob only in the areas listed
AREA_FIELDS = {"block_size": ("attention_backend",), "method": ("spec_method",)}
FIELD_KNOB = {"block_size": "block_size", "method": "spec_method"}

SPEC_KNOBS = frozenset({"spec_method", "draft_k", "spec_model", "spec_prompt_lookup_max", "spec_prompt_lookup_min"})
PARALLEL_KNOBS = frozenset({"tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend",
                            "disable_custom_all_reduce"})
DEPENDENCY_RE = re.compile(r"pip install|not installed|please install|install (?:it|via)|to be installed|"
                           r"package \S+ is required|upgrade (?:to|your|the)|outdated|newer version|"
                           r"No module named|Failed to import", re.IGNORECASE)
MAX_WORDS = 6
MIN_WORDS = 3
MIN_CHARS = 20


class Gap:
    """A formatted value in a message: its source expression."""

    def __init__(self, source: str) -> None:
        self.source = source


Part = str | Gap


@dataclass(frozen=True)
class Message:
    parts: tuple[Part, ...]
    file: str
    area_knob: str | None
    raised: str

    def text(self) -> str:
        return "".join(p if isinstance(p, str) else "{}" for p in self.parts)

    def example(self) -> str:
        """The message's first line as it might print, each gap a 0."""
        return "".join(p if isinstance(p, str) else "0" for p in self.first_line_parts())

    def first_line_parts(self) -> list[Part]:
        out: list[Part] = []
        for p in self.parts:
            if isinstance(p, str) and "\n" in p:
                out.append(p.split("\n", 1)[0])
                break
            out.append(p)
        return out


# ---------------------------------------------------------------- reading the source

def _format_parts(text: str, gap: re.Pattern[str]) -> list[Part]:
    parts: list[Part] = []
    last = 0
    for m in gap.finditer(text):
        parts += [text[last:m.start()], Gap(m.group(0))]
        last = m.end()
    return parts + [text[last:]]


_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*\d*(?:\.\d+)?[sdrifgeExXoc]")
_BRACES = re.compile(r"\{[^{}]*\}")


def parts_of(node: ast.expr, names: dict[str, ast.expr], depth: int = 0) -> list[Part]:
    """The literal text and gaps of a message expression."""
    if depth > 5:
        return [Gap(ast.unparse(node))]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        out: list[Part] = []
        for value in node.values:
            inner = value.value if isinstance(value, ast.FormattedValue) else value
            if isinstance(value, ast.Constant):
                out.append(str(value.value))
            elif isinstance(inner, ast.Name) and inner.id in names:  # f"{msg} ..." with msg assigned above
                out += parts_of(names[inner.id], names, depth + 1)
            else:
                out.append(Gap(ast.unparse(inner)))
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return parts_of(node.left, names, depth + 1) + parts_of(node.right, names, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
            and isinstance(node.left.value, str):
        return _format_parts(node.left.value, _PERCENT)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format" \
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str):
        return _format_parts(node.func.value.value, _BRACES)
    if isinstance(node, ast.Name) and node.id in names:
        return parts_of(names[node.id], names, depth + 1)
    return [Gap(ast.unparse(node))]


def _exception_name(node: ast.expr | None) -> str | None:
    call = node.func if isinstance(node, ast.Call) else node
    if isinstance(call, ast.Name):
        return call.id
    if isinstance(call, ast.Attribute):
        return call.attr
    return None


class _Reader(ast.NodeVisitor):
    """Collects the raised and asserted messages of one file, and every log call's literal text."""

    def __init__(self, file: str, area_knob: str | None) -> None:
        self.file, self.area_knob = file, area_knob
        self.messages: list[Message] = []
        self.logged: list[str] = []
        self._names: list[dict[str, ast.expr]] = [{}]

    def _scoped(self, node: ast.AST) -> None:
        self._names.append({})
        self.generic_visit(node)
        self._names.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _scoped

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                self._names[-1][target.id] = node.value
        self.generic_visit(node)

    def _add(self, message: ast.expr, raised: str) -> None:
        parts = tuple(p for p in parts_of(message, self._names[-1]) if p != "")
        if any(isinstance(p, str) and p.strip() for p in parts):
            self.messages.append(Message(parts, self.file, self.area_knob, raised))

    def visit_Raise(self, node: ast.Raise) -> None:
        name = _exception_name(node.exc)
        if name in RAISED and isinstance(node.exc, ast.Call) and node.exc.args:
            self._add(node.exc.args[0], name)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if node.msg is not None:
            self._add(node.msg, "AssertionError")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in LOG_CALLS and node.args:
            text = "".join(p for p in parts_of(node.args[0], self._names[-1]) if isinstance(p, str))
            if text.strip():
                self.logged.append(" ".join(text.split()))
        self.generic_visit(node)


def area_of(name: str) -> tuple[bool, str | None]:
    for glob, knob in AREAS:
        if fnmatch(name, glob):
            return True, knob
    return False, None


def read_wheel(wheel: Path) -> tuple[str, list[Message], list[str]]:
    """The wheel's vLLM version, the messages of the areas read, and every log call's text in the wheel."""
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise SystemExit(f"{wheel}: not a readable wheel ({exc})") from exc
    with archive:
        metadata = next((n for n in archive.namelist() if re.fullmatch(r"vllm-[^/]+\.dist-info/METADATA", n)), None)
        if metadata is None:
            raise SystemExit(f"{wheel}: no vllm-*.dist-info/METADATA: not a vLLM wheel")
        version_line = re.search(r"^Version: (\S+)$", archive.read(metadata).decode(), re.MULTILINE)
        if version_line is None:
            raise SystemExit(f"{wheel}: its METADATA has no Version line")
        messages: list[Message] = []
        logged: list[str] = []
        for name in sorted(archive.namelist()):
            if not (name.startswith("vllm/") and name.endswith(".py")):
                continue
            read, area_knob = area_of(name)
            try:
                tree = ast.parse(archive.read(name).decode("utf-8", errors="replace"))
            except SyntaxError:
                continue
            reader = _Reader(name, area_knob)
            reader.visit(tree)
            logged += reader.logged
            if read:
                messages += reader.messages
    return version_line.group(1), messages, logged


# ---------------------------------------------------------------- from a message to a row

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FLAG = re.compile(r"--([a-z][a-z0-9-]+)")


def knobs_named(message: Message) -> tuple[str, ...]:
    """The knobs a message names, in the order it names them; else its area's knob."""
    found: list[str] = []
    for part in message.parts:
        source = part if isinstance(part, str) else part.source
        for flag in _FLAG.findall(source):
            knob = FIELDS.get(flag.replace("-", "_"))
            if knob and knob not in found:
                found.append(knob)
        for name in _IDENT.findall(source):
            knob = FIELDS.get(name)
            if knob is None and message.area_knob in AREA_FIELDS.get(name, ()):
                knob = FIELD_KNOB[name]
            if knob and knob not in found:
                found.append(knob)
    if not found and message.area_knob:
        found.append(message.area_knob)
    return tuple(found)


def class_of(message: Message, knobs: tuple[str, ...]) -> str | None:
    if message.raised in ("ImportError", "ModuleNotFoundError") or DEPENDENCY_RE.search(message.text()):
        return "missing_dependency"
    if not knobs:
        return None
    if SPEC_KNOBS & set(knobs):
        return "spec_decode_unsupported"
    first = knobs[0]
    if first == "max_model_len":
        return "max_model_len_rejected"
    if first == "kv_cache_dtype":
        return "kv_dtype_unsupported"
    if first == "quantization":
        return "quantization_unsupported"
    if first in ("attention_backend", "block_size"):
        return "backend_unsupported_config"
    if first in PARALLEL_KNOBS:
        return "parallel_config_rejected"
    return "config_rejected"


_DISTINCT = re.compile(r"[_=\-.'`0-9A-Z]|\w{8,}")


def identifying(words: list[str]) -> bool:
    """Enough to name one message: 4 words, or 3 of which 2 are no plain short word (an
    identifier, a number, a capital, a long word); always at least one such word."""
    distinct = sum(bool(_DISTINCT.search(w)) for w in words)
    text = " ".join(words)
    return distinct >= 1 and len(text) >= MIN_CHARS and (len(words) >= MIN_WORDS + 1 or distinct >= 2)


def windows(message: Message) -> list[str]:
    """Candidate patterns, best first: runs of whole words of the message's first line, in the
    order the message prints them, each from its start, at most MAX_WORDS words."""
    parts = message.first_line_parts()
    runs: list[list[str]] = []
    for i, part in enumerate(parts):
        if not isinstance(part, str):
            continue
        words = part.split()
        if words and i > 0 and not part[:1].isspace():
            words = words[1:]  # glued to the gap before it: "(" + value
        if words and i < len(parts) - 1 and not part[-1:].isspace():
            words = words[:-1]  # glued to the gap after it
        if len(words) >= MIN_WORDS:
            runs.append(words)
    out: list[str] = []
    for words in runs:
        for start in range(0, len(words) - MIN_WORDS + 1):
            for size in range(min(MAX_WORDS, len(words) - start), MIN_WORDS - 1, -1):
                window = words[start:start + size]
                pattern = " ".join(window)
                if identifying(window) and pattern not in out:
                    out.append(pattern)
    return out


def hand_row_matches(line: str) -> bool:
    from autotune.engines.signatures import SIGNATURES

    return any(s.applies_to("vllm") and not s.weak and s.pattern.search(line) for s in SIGNATURES)


def build_rows(version: str, messages: list[Message], logged: list[str]) -> tuple[list[Refusal], Counter[str]]:
    """One row per message that names a knob or a missing package, with a pattern no other outcome
    and no log call holds. The counter says why the others were left out."""
    outcome = {m: (class_of(m, knobs_named(m)), knobs_named(m)) for m in messages}
    texts = [(" ".join(m.text().split()), outcome[m]) for m in messages]
    log_text = "\n".join(logged)
    left_out: Counter[str] = Counter()
    rows: dict[str, Refusal] = {}
    for message in messages:
        failure_class, knobs = outcome[message]
        if failure_class is None:
            left_out["names no knob"] += 1
            continue
        if failure_class == "missing_dependency":
            knobs = ()
        pattern = next((w for w in windows(message)
                        if w not in log_text
                        and not any(w in text and other != outcome[message] for text, other in texts)), None)
        if pattern is None:
            left_out["no pattern of its own"] += 1
            continue
        if hand_row_matches(f"ValueError: {pattern}") or hand_row_matches(f"ValueError: {message.example()}"):
            left_out["a hand-written signature classifies it"] += 1
            continue
        if pattern in rows:
            left_out["same pattern as another message"] += 1
            continue
        rows[pattern] = Refusal(pattern, failure_class, knobs, version, message.file)
    return sorted(rows.values(), key=lambda r: (r.file, r.pattern)), left_out


# ---------------------------------------------------------------- the diff

def describe(row: Refusal) -> str:
    return f"{row.pattern!r} -> {row.failure_class} [{'+'.join(row.knobs) or '-'}] ({row.file})"


def diff(before: list[Refusal], after: list[Refusal]) -> list[str]:
    old = {(r.pattern, r.failure_class, r.knobs) for r in before}
    new = {(r.pattern, r.failure_class, r.knobs) for r in after}
    by_key = {(r.pattern, r.failure_class, r.knobs): r for r in [*before, *after]}
    return ([f"- {describe(by_key[k])}" for k in sorted(old - new)]
            + [f"+ {describe(by_key[k])}" for k in sorted(new - old)])


def nearest_other(version: str, folder: Path) -> str | None:
    key = tuple(int(x) for x in version.split("."))
    others = [v for v in versions(folder) if v != version]
    below = [v for v in others if tuple(int(x) for x in v.split(".")) < key]
    return (below or others or [None])[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path, help="a vllm-*.whl (downloaded, not installed)")
    parser.add_argument("--out", type=Path, default=TABLE_DIR, help="folder of the tables")
    args = parser.parse_args(argv)
    if not args.wheel.is_file():
        print(f"{args.wheel}: no such file", file=sys.stderr)
        return 2
    version, messages, logged = read_wheel(args.wheel)
    rows, left_out = build_rows(version, messages, logged)
    path = table_path(version, args.out)
    before = read_table(path) if path.exists() else []
    other = nearest_other(version, args.out)
    write_table(path, version, rows)
    classes = Counter(r.failure_class for r in rows)
    print(f"vLLM {version}: {len(messages)} messages read, {len(rows)} rows written to {path}")
    print("  by class: " + ", ".join(f"{c} {n}" for c, n in classes.most_common()))
    print("  left out: " + ", ".join(f"{why} {n}" for why, n in left_out.most_common()))
    changes = diff(before, rows)
    print(f"diff against the table that was there ({len(before)} rows): {len(changes)} change(s)")
    print("\n".join(f"  {line}" for line in changes))
    if other is not None:
        changes = diff(read_table(table_path(other, args.out)), rows)
        added = sum(line.startswith("+") for line in changes)
        print(f"diff against vLLM {other}: {added} added, {len(changes) - added} removed")
        print("\n".join(f"  {line}" for line in changes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The NCCL a multi-node launch will load, read on every node before it starts, and what to refuse.

How a version is read (`READER`, run with the engine's own Python and the node's environment, on
the node: a local process for the Ray launcher, a throw-away container of the image for docker):

- pip: every installed distribution named `nvidia-nccl-cu<N>` (its version from the package
  metadata) and the `nvidia/nccl/lib/libnccl.so.2` it installed;
- the system library: `libnccl.so.2` found in LD_LIBRARY_PATH, then in `ldconfig -p`, then in the
  usual library folders; the Debian package that owns it (`dpkg-query -S`, then `-W` for
  `libnccl2`'s version) where dpkg is there;
- `VLLM_NCCL_SO_PATH` when the node's environment sets it (vLLM then loads that file);
- each library file's own version: the `2.X.Y+cudaA.B` string NCCL compiles into itself (what it
  prints as "NCCL version ..."), else the `libnccl.so.2.X.Y` its symlink resolves to; and its GNU
  build id (the ELF note), else a SHA-256 of the file, to tell two builds of one version apart.

Which one the engine loads: `VLLM_NCCL_SO_PATH` if set; else the pip wheel's (torch loads it from
site-packages when it is imported, and vLLM's own NCCL wrapper then finds it already loaded); else
the system's.

Refused, with the reason and the fix (public reports from DGX Sparks):
- pip NCCL 2.28.9 loaded beside DGX OS's system libnccl2 2.28.9, a different build: TP across two
  Sparks wedges after about 20 minutes (vllm-project/vllm#41725, #42354; fixed by loading the
  system build);
- nodes loading different NCCL builds (every rank of one launch must run the same NCCL);
- per candidate: CUDA graphs across nodes with NCCL older than 2.30.4, which deadlock within a few
  requests (vllm-project/vllm#52504): such a candidate is skipped unless it runs eager.
"""

from __future__ import annotations

import json
import os
import subprocess

from autotune.models import LaunchSpec, NcclLibrary, NcclReading, NcclSource, NodeLaunch

NCCL_MARKER = "AUTOTUNE_NCCL "
#: CUDA-graph replay across nodes deadlocks before this NCCL (vllm-project/vllm#52504)
GRAPHS_ACROSS_NODES_FROM = (2, 30, 4)
#: the version whose pip wheel and DGX OS package are different builds that wedge TP 2 (vllm#41725, #42354)
MIXED_BUILD_VERSION = "2.28.9"
READ_TIMEOUT_S = 60.0

# Standard library only: it runs in whatever Python the engine has (a container's python3 too).
READER = r'''
import hashlib, json, mmap, os, re, struct, subprocess, sys
from importlib import metadata

VERSION = re.compile(rb"(?<![\d.])(\d+\.\d+\.\d+)\+cuda(\d+\.\d+)")
NAME = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)$")
FOLDERS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
           "/usr/local/lib", "/usr/local/cuda/lib64"]


def build_id(data):
    # the GNU build id from an ELF64 little-endian file's PT_NOTE segments, else None
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type != 4:
            continue
        at, end = p_offset, p_offset + p_filesz
        while at + 12 <= end:
            namesz, descsz, kind = struct.unpack_from("<III", data, at)
            name_at = at + 12
            desc_at = name_at + ((namesz + 3) & ~3)
            if kind == 3 and data[name_at:name_at + namesz].rstrip(b"\0") == b"GNU":
                return data[desc_at:desc_at + descsz].hex()
            at = desc_at + ((descsz + 3) & ~3)
    return None


def library(path, source, package=None, package_version=None):
    real = os.path.realpath(path)
    out = {"source": source, "path": path, "real_path": real, "package": package,
           "package_version": package_version, "version": None, "cuda": None, "build_id": None, "sha256": None}
    try:
        with open(real, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            found = VERSION.search(data)
            if found:
                out["version"], out["cuda"] = found.group(1).decode(), found.group(2).decode()
            out["build_id"] = build_id(data)
            if out["build_id"] is None:
                out["sha256"] = hashlib.sha256(data).hexdigest()
    except (OSError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    named = NAME.search(os.path.basename(real))
    if out["version"] is None and named and "error" not in out:
        out["version"] = named.group(1)
    return out


def run(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


libs = []
pip_paths = set()
for dist in metadata.distributions():
    name = (dist.metadata["Name"] or "").lower().replace("_", "-")
    if not re.fullmatch(r"nvidia-nccl-cu\d+", name):
        continue
    files = [f for f in (dist.files or []) if str(f).replace("\\", "/").endswith("nvidia/nccl/lib/libnccl.so.2")]
    path = str(dist.locate_file(files[0])) if files else None
    if path and os.path.exists(path):
        pip_paths.add(os.path.realpath(path))
        libs.append(library(path, "pip", name, dist.version))
    else:
        libs.append({"source": "pip", "path": path, "real_path": None, "package": name,
                     "package_version": dist.version, "version": None, "error": "the wheel's libnccl.so.2 is missing"})

system = None
for folder in [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]:
    candidate = os.path.join(folder, "libnccl.so.2")
    if os.path.exists(candidate) and os.path.realpath(candidate) not in pip_paths:
        system = candidate
        break
if system is None:
    for line in run(["ldconfig", "-p"]).splitlines():
        if line.strip().startswith("libnccl.so.2 ") and "=>" in line:
            candidate = line.split("=>", 1)[1].strip()
            if os.path.realpath(candidate) not in pip_paths:
                system = candidate
                break
if system is None:
    for folder in FOLDERS:
        candidate = os.path.join(folder, "libnccl.so.2")
        if os.path.exists(candidate):
            system = candidate
            break
if system is not None:
    owner = run(["dpkg-query", "-S", os.path.realpath(system)]).split(":", 1)[0].strip() or None
    version = run(["dpkg-query", "-W", "-f=${Version}", owner]).strip() or None if owner else None
    libs.append(library(system, "system", owner, version))
override = os.environ.get("VLLM_NCCL_SO_PATH")
if override:
    libs.append(library(override, "override"))
print("AUTOTUNE_NCCL " + json.dumps({"libraries": libs}), flush=True)
'''


def loaded_source(libraries: list[NcclLibrary]) -> NcclSource | None:
    """Which library the engine loads: the override, else the pip wheel's, else the system's."""
    for source in (NcclSource.OVERRIDE, NcclSource.PIP, NcclSource.SYSTEM):
        if any(lib.source == source and lib.version for lib in libraries):
            return source
    return None


def parse_reading(node: int, output: str) -> NcclReading:
    line = next((ln for ln in reversed(output.splitlines()) if ln.startswith(NCCL_MARKER)), None)
    if line is None:
        tail = " ".join(output.strip().splitlines()[-2:])[:300]
        return NcclReading(node=node, error=f"the NCCL reader printed no report: {tail or 'no output'}")
    libraries = [NcclLibrary.model_validate(lib) for lib in json.loads(line.removeprefix(NCCL_MARKER))["libraries"]]
    return NcclReading(node=node, libraries=libraries, loaded=loaded_source(libraries))


def reader_argv(python: str) -> list[str]:
    return [python, "-c", READER]


def read_local(node: NodeLaunch, timeout_s: float = READ_TIMEOUT_S) -> NcclReading:
    """Run the reader on this host with the node's Python (its argv[0]) and environment."""
    env = {**os.environ, **node.env}
    try:
        done = subprocess.run(reader_argv(node.argv[0]), env=env, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as exc:
        return NcclReading(node=node.node, error=f"the NCCL reader did not run: {type(exc).__name__}: {exc}")
    return parse_reading(node.node, done.stdout + done.stderr)


def rank_nodes(launch: LaunchSpec) -> list[NodeLaunch]:
    """One entry per node whose processes load NCCL: the Ray head and workers (or the servers)."""
    members = [n for n in launch.nodes if n.role in ("head", "worker")] or list(launch.nodes)
    seen: dict[int, NodeLaunch] = {}
    for node in members:
        seen.setdefault(node.node, node)
    return [seen[i] for i in sorted(seen)]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3])


def _same_build(a: NcclLibrary, b: NcclLibrary) -> bool:
    if a.real_path and a.real_path == b.real_path:
        return True
    if a.build_id and b.build_id:
        return a.build_id == b.build_id
    return bool(a.sha256) and a.sha256 == b.sha256


def launch_refusal(readings: list[NcclReading]) -> str | None:
    """Why no candidate of this launch should start (None: nothing known to fail)."""
    for reading in readings:
        loaded = reading.loaded_library()
        system = next((lib for lib in reading.libraries if lib.source == NcclSource.SYSTEM), None)
        if (loaded is not None and system is not None and loaded.source == NcclSource.PIP
                and loaded.version == system.version == MIXED_BUILD_VERSION and not _same_build(loaded, system)):
            return (
                f"node {reading.node} loads pip {loaded.package} {loaded.version} ({loaded.path}) beside the system "
                f"libnccl2 {system.version} ({system.real_path}), a different build: TP across Sparks wedges after "
                "about 20 minutes (vllm-project/vllm#41725, #42354); fix: load the system build "
                f"(ln -sf {system.real_path} {loaded.path}) or install NCCL >= 2.30.4 (pip install -U {loaded.package})"
            )
    builds = {r.node: r.loaded_library() for r in readings}
    known = {n: lib for n, lib in builds.items() if lib is not None}
    if len({lib.version for lib in known.values()}) > 1:
        listed = ", ".join(f"node {n}: {lib.version} ({lib.source.value})" for n, lib in sorted(known.items()))
        return f"the nodes load different NCCL versions ({listed}); every rank must run the same: use one image everywhere"
    return None


def graphs_refusal(readings: list[NcclReading]) -> str | None:
    """Why a candidate with CUDA graphs must not run across these nodes (None: it may)."""
    old = [(r.node, lib) for r in readings if (lib := r.loaded_library()) and lib.version
           and _version(lib.version) < GRAPHS_ACROSS_NODES_FROM]
    if not old:
        return None
    node, lib = old[0]
    floor = ".".join(map(str, GRAPHS_ACROSS_NODES_FROM))
    return (
        f"CUDA graphs across nodes deadlock within a few requests with NCCL {lib.version} < {floor} "
        f"(node {node}, {lib.source.value}; vllm-project/vllm#52504): set enforce_eager=true or install NCCL >= {floor}"
    )


def summary(readings: list[NcclReading]) -> str:
    """One line: what each node loads."""
    parts = []
    for r in readings:
        lib = r.loaded_library()
        parts.append(f"node {r.node}: " + (f"NCCL {lib.version} ({lib.source.value})" if lib else (r.error or "no NCCL found")))
    return "; ".join(parts)


__all__ = [
    "GRAPHS_ACROSS_NODES_FROM",
    "READER",
    "graphs_refusal",
    "launch_refusal",
    "parse_reading",
    "rank_nodes",
    "read_local",
    "summary",
]

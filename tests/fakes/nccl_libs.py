"""FAKE, hand-written: NCCL libraries for tests, laid out where the real ones are found.

`write_pip_nccl(site, version)` writes an `nvidia-nccl-cu13` distribution (dist-info with METADATA
and a RECORD naming `nvidia/nccl/lib/libnccl.so.2`) into a site-packages folder; `write_system_nccl
(folder, version)` writes `libnccl.so.<version>` with the `libnccl.so.2` symlink to it, as the
libnccl2 package installs it. Each file holds the version string NCCL compiles into itself
(`2.X.Y+cudaA.B`) among filler bytes, so it is read the way the real one is; `build` changes the
filler, so two files of one version are two builds. They are not ELF files and load nowhere.
"""

from __future__ import annotations

from pathlib import Path


def _library_bytes(version: str, cuda: str, build: str) -> bytes:
    return b"\x00FAKE libnccl " + build.encode() + b"\x00" * 64 + f"{version}+cuda{cuda}".encode() + b"\x00" * 64


def write_pip_nccl(site: Path, version: str, *, cuda: str = "13.0", build: str = "pip") -> Path:
    lib = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    lib.parent.mkdir(parents=True, exist_ok=True)
    lib.write_bytes(_library_bytes(version, cuda, build))
    info = site / f"nvidia_nccl_cu13-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: nvidia-nccl-cu13\nVersion: {version}\n")
    (info / "RECORD").write_text(f"nvidia/nccl/lib/libnccl.so.2,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    return lib


def write_system_nccl(folder: Path, version: str | None, *, cuda: str = "13.0", build: str = "dgx-os",
                      file_version: str | None = None) -> Path:
    """`version` None: a library without the compiled-in string (only its file name tells)."""
    folder.mkdir(parents=True, exist_ok=True)
    real = folder / f"libnccl.so.{file_version or version}"
    real.write_bytes(_library_bytes(version, cuda, build) if version else b"\x00FAKE libnccl, no version string\x00")
    link = folder / "libnccl.so.2"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(real.name)
    return link

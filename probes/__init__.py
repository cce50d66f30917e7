"""Probes: what this host is and what actually runs on it, with evidence.

Each probe runs in its own process (`runner.run_probe_subprocess`) and returns a ProbeResult;
a feature that fails is data, not an exception. Heavy imports (torch, triton, llama_cpp) happen
only inside the probe processes, so this package imports on any machine.
"""

from probes.runner import run_probe_subprocess
from probes.signatures import classify, classify_file, signature_table

__all__ = ["classify", "classify_file", "run_probe_subprocess", "signature_table"]

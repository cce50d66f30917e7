"""Search spaces: load a space file, enumerate and prune candidates, a space's layout on N boxes,
choose the shipped space for a hardware and node count, fingerprint. May import engines, hardware, model, bench, models."""

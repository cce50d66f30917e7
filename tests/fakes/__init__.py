"""Fakes for what cannot run in CI. Each module says so in its first line."""

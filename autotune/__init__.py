"""autotune: find the fastest accurate way to serve an LLM on given hardware."""

__version__ = "0.1.0"

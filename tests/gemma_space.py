"""The engine and model lines every real-engine test space shares: llama.cpp serving the Gemma 3
270M GGUF from PyPI. A str.format template (fill `alias` and `model`); the test's own space text
goes around it with its braces doubled, as before."""

GEMMA_ON_LLAMACPP = """engine: llamacpp
model:
  name: gemma-3-270m-q4_k_m
  served_name: {alias}
  path: {model}
  prompt_style: completion
  context_max: 2048
hardware: auto
"""

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

#: the shortest workload of the real-engine tests that need a trial, not numbers: one prose prompt,
#: 16 tokens once, no prefill (plain text, no braces: it goes into the templates as it is)
SHORT_WORKLOAD = """workload:
  decode_max_tokens: 16
  prompt_sets: [prose]
  prompts_per_set: 1
  repeats: 1
  warmup_requests: 1
  prefill_tokens: []
  startup_timeout_s: 120
"""

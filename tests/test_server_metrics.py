"""benchmarks/server_metrics.py: the server's own view of a load level, the referee between two
clients that disagree (the H100 cross-check of 2026-12-07: GuideLLM failed 192 streams that autotune
passed, and GuideLLM's output stayed flat at ~12k tok/s from 128 to 256 streams)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import server_metrics as sm  # noqa: E402

pytest.importorskip("prometheus_client")

#: hand-written in vLLM 0.26.0's /metrics format (names and buckets from vllm/v1/metrics/loggers.py), two engines
TEXT = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
vllm:num_requests_running{{engine="1",model_name="m"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {generated}
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.5",model_name="m"}} {fast}
vllm:time_to_first_token_seconds_bucket{{engine="0",le="1.0",model_name="m"}} {within}
vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {count}
vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {count}
vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m"}} {ttft_sum}
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {tokens}
vllm:inter_token_latency_seconds_count{{engine="0",model_name="m"}} {tokens}
vllm:inter_token_latency_seconds_sum{{engine="0",model_name="m"}} {itl_sum}
"""


def poll(t: float, running: int, generated: int, within: int, count: int, ttft_sum: float, tokens: int,
         itl_sum: float, waiting: int = 0) -> sm.Poll:
    return sm.parse(TEXT.format(running=running, waiting=waiting, generated=generated, fast=within // 2,
                                within=within, count=count, ttft_sum=ttft_sum, tokens=tokens, itl_sum=itl_sum), t)


def test_a_level_window_reads_the_servers_load_speed_and_first_tokens():
    polls = [poll(0.0, 0, 0, 0, 0, 0.0, 0, 0.0),  # before the level
             poll(10.0, 90, 1000, 100, 100, 30.0, 900, 9.0),
             poll(11.0, 96, 13000, 160, 200, 110.0, 12800, 130.0),
             poll(12.0, 96, 25000, 200, 300, 210.0, 24700, 250.0),
             poll(20.0, 0, 26000, 210, 310, 215.0, 25600, 260.0)]  # after it
    seen = sm.window(polls, 10.0, 12.0)
    assert seen["running_mean"] == pytest.approx((180 + 192 + 192) / 3, abs=0.05)  # two engines summed
    assert seen["generated_tps"] == 12000.0
    assert seen["requests"] == 200 and seen["ttft_le_1s"] == 0.5  # 100 of 200 first tokens within 1 s
    assert seen["ttft_mean_ms"] == 900.0 and seen["itl_mean_ms"] == 10.13  # 241 s over 23,800 tokens
    assert sm.window(polls, 10.5, 10.9) == {}  # no two polls inside: nothing to say


def test_a_level_window_reads_the_engines_waiting_queue():
    """A client that counts N in flight while the server runs fewer: the waiting queue says whether
    the rest waited in the engine (its scheduler) or never reached it (the H100 cross-check of
    2026-12-07: GuideLLM counted 254 in flight at 256 streams, the server ran 147)."""
    polls = [poll(10.0, 70, 0, 0, 0, 0.0, 0, 0.0, waiting=4), poll(11.0, 74, 100, 0, 0, 0.0, 0, 0.0, waiting=8)]
    seen = sm.window(polls, 10.0, 11.0)
    assert seen["running_mean"] == 144.0 and seen["waiting_mean"] == 6.0

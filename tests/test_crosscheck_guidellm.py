"""benchmarks/crosscheck_guidellm_goodput.py: GuideLLM's levels read as autotune's, with the client's
own count of requests in flight and its mean TTFT beside the server's (the H100 cross-check of
2026-12-07: at 256 streams GuideLLM counted 254 in flight and a mean TTFT of 805 ms; the server ran 147
on average and its mean TTFT from arrival was 199 ms)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import crosscheck_guidellm_goodput as xc  # noqa: E402


def dist(mean: float, p99: float | None = None) -> dict:
    return {"successful": {"mean": mean, "percentiles": {"p99": p99 if p99 is not None else mean}}}


def bench(streams: int, attainment: float, determined: int, in_flight: float, ttft_mean: float) -> dict:
    """One benchmark of GuideLLM 0.8.1's JSON output, the fields levels_of reads."""
    return {"config": {"strategy": {"type_": "concurrent", "streams": streams, "worker_count": 10}},
            "metrics": {"slo_determined_requests": determined, "slo_attainment": attainment,
                        "output_tokens_per_second": dist(16360.3), "time_to_first_token_ms": dist(ttft_mean, 1432.5),
                        "inter_token_latency_ms": dist(9.3, 11.08), "request_concurrency": dist(in_flight, 256.0),
                        "request_totals": {"successful": 1790, "errored": 0, "incomplete": 60}}}


def test_guidellm_levels_carry_its_own_in_flight_count_and_mean_ttft():
    found = xc.levels_of({"benchmarks": [bench(128, 1.0, 1465, 127.6, 120.0), bench(256, 0.9011, 1790, 253.86, 805.04)]},
                         0.95)
    assert found["capacity"] == 128
    top = found["levels"][1]
    assert top["streams"] == 256 and top["verdict"] == "fail" and not top["guidellm_passed"]
    assert top["in_flight_mean"] == pytest.approx(253.9) and top["ttft_mean_ms"] == pytest.approx(805.0)
    assert top["p99_ttft_ms"] == 1432.5


def test_the_level_line_sets_the_clients_count_beside_the_servers():
    line = xc.client_server_line({"in_flight_mean": 253.9, "ttft_mean_ms": 805.0},
                                 {"running_mean": 147.3, "waiting_mean": 0.4, "ttft_mean_ms": 199.0})
    assert line == ("client: 253.9 in flight, mean TTFT 805.0 ms; server: 147.3 running + 0.4 waiting, "
                    "mean TTFT from arrival 199.0 ms: 106.2 requests and 606.0 ms a request outside the engine")

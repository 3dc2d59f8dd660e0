"""`make bench`: throughput, latency and memory figures, each beside a baseline (python -m bench.run)."""

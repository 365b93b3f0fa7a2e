"""Micro benchmarks: call latency, copy throughput, launch throughput and
start-up cost, each next to the baseline it is held to, measured in the same
run."""

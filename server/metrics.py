"""`rcuda server --metrics-port PORT`: Prometheus metrics of the server.

Served by prometheus_client on its own thread, read from the daemon's
status (server/status.py) at each scrape: per GPU memory used and total,
utilisation, sessions, calls and bytes moved in each direction; the number
of sessions.  It listens on the server's own interface (loopback unless
the server listens elsewhere).
"""
from __future__ import annotations

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry


class DaemonCollector(Collector):
    def __init__(self, daemon):
        self.daemon = daemon

    def collect(self):
        status = self.daemon.status()
        labels = ["gpu", "name"]
        gauges = {
            "memory_used": GaugeMetricFamily("rcuda_gpu_memory_used_bytes", "Device memory held by sessions", labels=labels),
            "memory_total": GaugeMetricFamily("rcuda_gpu_memory_total_bytes", "Device memory", labels=labels),
            "utilization": GaugeMetricFamily("rcuda_gpu_utilization_ratio",
                                             "Fraction of time the GPU served requests (sim: ran kernels)",
                                             labels=labels),
            "sessions": GaugeMetricFamily("rcuda_gpu_sessions", "Client sessions using the GPU", labels=labels),
        }
        calls = CounterMetricFamily("rcuda_gpu_calls", "Requests and launches served", labels=labels)
        moved = CounterMetricFamily("rcuda_gpu_bytes", "Bytes copied between host and device", labels=labels + ["direction"])
        for gpu in status["gpus"]:
            key = [str(gpu["index"]), gpu["name"]]
            for field, gauge in gauges.items():
                if gpu.get(field) is not None:
                    gauge.add_metric(key, gpu[field])
            calls.add_metric(key, gpu["calls"])
            moved.add_metric(key + ["to_device"], gpu["bytes_to_device"])
            moved.add_metric(key + ["from_device"], gpu["bytes_from_device"])
        sessions = GaugeMetricFamily("rcuda_sessions", "Client sessions on this server")
        sessions.add_metric([], len(status["sessions"]))
        yield from gauges.values()
        yield from (calls, moved, sessions)


def serve_metrics(daemon, host: str, port: int) -> int:
    """Start the endpoint; returns the port (0 picks a free one)."""
    registry = CollectorRegistry()
    registry.register(DaemonCollector(daemon))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server.server_address[1]

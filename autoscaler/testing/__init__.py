"""A small kit for testing and benchmarking the daemon against real servers, as ``kopf.testing`` is for kopf.

Nothing here fakes an API: :mod:`.kube` starts a real kube-apiserver with etcd, :mod:`.servers` a real
Prometheus and an exporter shaped like vLLM's ``/metrics``, :mod:`.fault_proxy` injects the faults a healthy
server will not produce on demand. It is importable from a plain install (``python -m autoscaler.bench``).
"""

"""vllm-autoscaler: a controller that scales vLLM Deployments on vLLM's own Prometheus signals."""

__version__ = "0.1.0"

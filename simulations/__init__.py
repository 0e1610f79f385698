"""Offline evaluation: open-loop replay of recorded metrics and the closed-loop fleet simulator.

Both decide through ``policies.pipeline.WorkloadDecider``, exactly as the daemon does.
"""

"""The lab: experiment drivers and the commands that write the reports in ``docs/results/`` (``lab/README.md``).
Not installed, and no product module imports it (import-linter's contracts in ``pyproject.toml``)."""

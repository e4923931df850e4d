"""memory_plugin benchmarks: `python -m bench.run [--quick]` (see bench/README.md)."""

"""Benchmarks of chaos: probe overhead, runner overhead, step accuracy. Run all: ``python -m benchmarks.run_all``."""

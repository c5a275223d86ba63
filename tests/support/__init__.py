"""Data and helpers shared by tests and benchmarks."""

"""Data and helpers shared by tests and bench scripts."""

"""Verify jobs and the workers that run them (the check itself is the top-level ``verifier`` package)."""

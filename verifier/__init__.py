"""The independent verifier (issue 4): runs a repository's check on one exact commit, sandboxed.

Not built yet. The package exists so that the project layout is stable; nothing imports it, and nothing in
Mergebot claims to verify anything until it is written.
"""

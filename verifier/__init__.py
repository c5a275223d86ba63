"""The independent verifier: runs a repository's check on one exact commit and reports the evidence.

``verifier.runner.run_check`` is the whole step: materialize the commit's tree in a checkout the verifier
owns (a reusable slot per worker, or a temporary one), prove the checkout is that tree before the run and
that the check left the tracked files alone after it, run the command sandboxed with bubblewrap when it is
usable (no network, read-only system, writable checkout overlay and private ``/tmp``, time, process and
memory limits, scrubbed environment) or plainly otherwise, and return a ``Result`` with a bounded log.

- ``verifier.runner``: ``run_check`` and ``Result``, the public interface;
- ``verifier.spec``: ``CheckSpec`` — what one run is asked to do (command, timeout, limits, sandbox paths, report,
  setup, caches, plugins, own tests), as a job carries it in JSON;
- ``verifier.checkout``: slots — how a checkout is created, moved between commits and checked;
- ``verifier.sandbox``: how a command runs — bwrap or plain, the limits, the bounded log.

Each module's docstring states its rules.
"""

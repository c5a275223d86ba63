"""Signed provenance for every move of main (issue 44): in-toto statements in DSSE envelopes, signed with the
server's Ed25519 key, checked against a trust file the operators publish.

Rules:
  * ``statement`` builds the statements from a landing's facts (pure): the Mergebot landing predicate
    (``schema/landing-v1.json`` documents it) and in-toto's test-result predicate. A skipped or failed test is never
    among the passed ones, and a statement says PASSED only when none failed and none was skipped.
  * ``envelope`` seals a statement in a DSSE envelope and opens one; the envelope, the PAE and the signatures are
    securesystemslib's, never written here by hand.
  * ``keys`` makes and reads the signing key (``signing-key.pem`` in ``DATA_DIR/attest`` or ``MERGEBOT_ATTEST_DIR``,
    mode 0600, where no check's sandbox sees it) and the trust file (``trust.json`` beside it): a chain of versions,
    each a DSSE envelope listing the public keys with the time each is valid from (and until), the first signed by
    a key it lists, every later one by a key of the version it replaces.
  * ``chain`` checks main's first-parent history against the notes (pure): every commit since the repository's
    start has exactly one landing statement, its main-before is the commit's parent, it is signed by a key valid
    when it was signed, and the landings' numbers only ever go up.
  * ``notes`` is the git notes' text: one JSON document per landed commit under ``refs/notes/mergebot``.
  * ``shown`` is a landed record's provenance as its page and the API show it: its statements decoded, and
    whether its landing statement verifies with the trust file, checked as ``chain`` checks a note.
Layer 0: pure but for ``keys`` reading and writing the key's two files.
"""

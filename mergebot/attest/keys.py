"""The server's signing key and the trust file that names the keys a verifier accepts.

The key: Ed25519, ``signing-key.pem`` in the key folder (``Settings.attest_folder``: ``DATA_DIR/attest``, or
``MERGEBOT_ATTEST_DIR`` where replicas on data directories of their own share one key) (PKCS8, mode 0600, in a
directory of mode 0700), made once by ``mergebot init`` (or the first ``serve`` with none) and never shown to a
check: the data directory is hidden from every sandbox (``verifier.view``), and so is a key folder outside it.

The trust file (``trust.json`` beside the key, the operators publish it): ``{"versions": [envelope, ...]}``, each
version a DSSE envelope of type ``TRUST_TYPE`` whose payload is ``{"version": n, "previous": digest or null,
"issuedAt": time, "keys": [{"keyid", "public", "validFrom", "validUntil"}]}``. The first version is signed by a key
it lists (whoever publishes it vouches for it); each later one names its predecessor's payload digest and is signed
by a key of that predecessor, valid when it was issued: a change of the trust file is signed by a key it replaces.
A verifier that saw an earlier trust file (``pinned``) accepts only a file that extends it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from securesystemslib.formats import encode_canonical
from securesystemslib.signer import CryptoSigner, SSlibKey

from mergebot import messages as say
from mergebot.attest.envelope import Untrusted, open_envelope, seal

KEY_FILE = "signing-key.pem"
TRUST_FILE = "trust.json"
TRUST_TYPE = "application/vnd.mergebot.trust+json"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def when(text: object) -> datetime:
    """A statement's or key's time (ISO 8601 with its offset); ``Untrusted`` if it is none."""
    try:
        t = datetime.fromisoformat(str(text))
    except ValueError as e:
        raise Untrusted(say.attest_unreadable("time", text)) from e
    if t.tzinfo is None:
        raise Untrusted(say.attest_unreadable("time", text))
    return t


@dataclass(frozen=True)
class TrustedKey:
    keyid: str
    public: str  # the Ed25519 public key, hex
    valid_from: str
    valid_until: str | None = None

    def key(self) -> SSlibKey:
        return SSlibKey(self.keyid, "ed25519", "ed25519", {"public": self.public})

    def valid_at(self, at: datetime) -> bool:
        return when(self.valid_from) <= at and (self.valid_until is None or at < when(self.valid_until))

    def as_json(self) -> dict[str, Any]:
        return {"keyid": self.keyid, "public": self.public, "validFrom": self.valid_from,
                "validUntil": self.valid_until}

    @classmethod
    def from_json(cls, data: Any) -> TrustedKey:
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("keyid", "public",
                                                                                         "validFrom")):
            raise Untrusted(say.attest_unreadable("trust_key", data))
        key = cls(data["keyid"], data["public"], data["validFrom"], data.get("validUntil"))
        when(key.valid_from)
        if key.valid_until is not None:
            when(key.valid_until)
        if _keyid(key.public) != key.keyid:
            raise Untrusted(say.attest_unreadable("trust_key", data))
        return key


def _keyid(public_hex: str) -> str:
    """The key id securesystemslib gives an Ed25519 public key: the digest of its canonical JSON form."""
    form = encode_canonical({"keytype": "ed25519", "scheme": "ed25519", "keyval": {"public": public_hex}})
    return hashlib.sha256(str(form).encode()).hexdigest()


@dataclass(frozen=True)
class Trust:
    """A trust file that held: its versions' payloads (oldest first) and the keys of the newest."""

    payloads: tuple[dict[str, Any], ...]

    @property
    def keys(self) -> tuple[TrustedKey, ...]:
        return tuple(TrustedKey.from_json(k) for k in self.payloads[-1]["keys"])

    @property
    def root(self) -> str:
        return digest(self.payloads[0])

    @property
    def version(self) -> int:
        return int(self.payloads[-1]["version"])

    def key(self, keyid: str) -> TrustedKey | None:
        return next((k for k in self.keys if k.keyid == keyid), None)


def digest(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def read_trust(text: str, pinned: tuple[str, int] | None = None) -> Trust:
    """The trust file's text, checked (see the module's rules); ``pinned``: the root digest and version a verifier
    accepted before, which this file must extend."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise Untrusted(say.attest_unreadable("trust", e)) from e
    versions = data.get("versions") if isinstance(data, dict) else None
    if not isinstance(versions, list) or not versions:
        raise Untrusted(say.attest_unreadable("trust", "no versions"))
    payloads: list[dict[str, Any]] = []
    for i, envelope in enumerate(versions, start=1):
        payload = _peek(envelope)
        keys = [TrustedKey.from_json(k) for k in payload.get("keys") or []]
        if payload.get("version") != i or not keys:
            raise Untrusted(say.attest_trust_version(i))
        signers = keys if i == 1 else [TrustedKey.from_json(k) for k in payloads[-1]["keys"]]
        if i > 1:
            if payload.get("previous") != digest(payloads[-1]):
                raise Untrusted(say.attest_trust_version(i))
            issued = when(payload.get("issuedAt"))
            signers = [k for k in signers if k.valid_at(issued)]
        try:
            opened, _ = open_envelope(envelope, [k.key() for k in signers], TRUST_TYPE)
        except Untrusted as e:
            raise Untrusted(say.attest_trust_signature(i, e.message)) from e
        payloads.append(opened)
    trust = Trust(tuple(payloads))
    if pinned is not None:
        root, version = pinned
        if trust.root != root or trust.version < version:
            raise Untrusted(say.attest_trust_not_extended(version))
    return trust


def _peek(envelope: Any) -> dict[str, Any]:
    """An envelope's payload before it is checked (only to find which keys must have signed it)."""
    try:
        payload = json.loads(base64.b64decode(envelope["payload"], validate=True))
    except (KeyError, TypeError, ValueError) as e:
        raise Untrusted(say.attest_unreadable("envelope", e)) from e
    if not isinstance(payload, dict):
        raise Untrusted(say.attest_unreadable("envelope", type(payload).__name__))
    return payload


# -- the files in the key folder (``Settings.attest_folder``) --------------------------------------------------


def key_path(folder: Path) -> Path:
    return folder / KEY_FILE


def trust_path(folder: Path) -> Path:
    return folder / TRUST_FILE


def trust_text(folder: Path) -> str | None:
    """The data directory's trust file as it stands, or None when it has none (yet)."""
    try:
        return trust_path(folder).read_text()
    except FileNotFoundError:
        return None


def signer(folder: Path) -> CryptoSigner:
    """The data directory's signing key, made (with the trust file's first version) if it has none."""
    path = key_path(folder)
    if not path.exists():
        _make(folder)
    return _from_pem(path.read_bytes())


def _from_pem(pem: bytes) -> CryptoSigner:
    private = load_pem_private_key(pem, password=None)
    if not isinstance(private, Ed25519PrivateKey):
        raise Untrusted(say.ATTEST_KEY_NOT_ED25519)
    return CryptoSigner(private)


def _private_file(folder: Path, s: CryptoSigner) -> Path:
    """``s``'s private key written whole, mode 0600, to a file of its own beside the key's place: linked or moved
    into place by the caller."""
    tmp = folder / f".{KEY_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(s.private_bytes)
    return tmp


def _make(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    new = CryptoSigner.generate_ed25519()
    tmp = _private_file(folder, new)
    try:
        os.link(tmp, key_path(folder))  # whole or not at all, and never over a key another process made first
    except FileExistsError:
        return
    finally:
        tmp.unlink()
    if not trust_path(folder).exists():
        write_trust(folder, json.dumps({"versions": [seal(first_version(new), TRUST_TYPE, new)]}, indent=1))


def trusted(s: CryptoSigner, valid_from: str | None = None) -> TrustedKey:
    public = s.public_key.keyval["public"]
    return TrustedKey(s.public_key.keyid, public, valid_from or now())


def first_version(s: CryptoSigner) -> dict[str, Any]:
    issued = now()
    return {"version": 1, "previous": None, "issuedAt": issued, "keys": [trusted(s, issued).as_json()]}


def rotated(trust_text: str, old: CryptoSigner, new: CryptoSigner) -> str:
    """The trust file's text with a version that adds ``new`` and ends ``old``'s validity now, signed by ``old``
    (the key it replaces)."""
    trust = read_trust(trust_text)
    versions = json.loads(trust_text)["versions"]
    issued = now()
    keys = [TrustedKey(k.keyid, k.public, k.valid_from, issued if k.keyid == old.public_key.keyid
                       and k.valid_until is None else k.valid_until).as_json() for k in trust.keys]
    keys.append(trusted(new, issued).as_json())
    payload = {"version": trust.version + 1, "previous": digest(trust.payloads[-1]), "issuedAt": issued,
               "keys": keys}
    return json.dumps({"versions": [*versions, seal(payload, TRUST_TYPE, old)]}, indent=1)


def write_trust(folder: Path, text: str) -> None:
    """The trust file's new text, put in place whole."""
    path = trust_path(folder)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def rotate(folder: Path) -> tuple[CryptoSigner, Trust]:
    """A new signing key for the data directory: the trust file gains a version, signed by the key it replaces,
    that lists the new key from now and ends the old one's validity now; the old key is kept beside it, retired."""
    old = signer(folder)
    new = CryptoSigner.generate_ed25519()
    text = rotated(trust_path(folder).read_text(), old, new)
    path = key_path(folder)
    os.link(path, path.with_name(f"retired-{old.public_key.keyid[:16]}.pem"))
    _private_file(folder, new).replace(path)
    write_trust(folder, text)
    return new, read_trust(text)

"""Validate the SSH public keys a researcher will log in with.

A key is accepted only as one ``authorized_keys``-style line without options: algorithm,
base64 blob, optional comment. The blob must decode strictly, name the same algorithm,
and parse (cryptography's parser, or the wire format for security-key types). RSA needs
2048 bits or more; DSA is refused. Anything that looks like a private key is refused
with its own message and is never echoed back, logged or stored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

from reservations.errors import CodedError

MAX_KEYS = 10
MIN_RSA_BITS = 2048
MAX_LINE = 16_384

_PLAIN_TYPES = {
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
}
_SK_TYPES = {"sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com"}
_PRIVATE_MARKERS = re.compile(
    r"PRIVATE KEY|PuTTY-User-Key-File|BEGIN SSH2 ENCRYPTED PRIVATE|b3BlbnNzaC1rZXktdjE",
)
"""``b3BlbnNzaC1rZXktdjE`` is base64 of ``openssh-key-v1``, the private key container."""
_COMMENT_OK = re.compile(r"^[\x20-\x7e]{0,200}$")


class SshKeyError(CodedError):
    """A key that cannot be used, and on which line of what was pasted."""

    def __init__(self, code: str, line_number: int | None = None, detail: str = "") -> None:
        super().__init__(code)
        self.line_number = line_number
        self.detail = detail


@dataclass(frozen=True)
class PublicKey:
    algorithm: str
    blob: bytes
    comment: str

    @property
    def line(self) -> str:
        encoded = base64.b64encode(self.blob).decode()
        return f"{self.algorithm} {encoded} {self.comment}".rstrip()

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256(self.blob).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def looks_like_private_key(text: str) -> bool:
    return bool(_PRIVATE_MARKERS.search(text))


def parse_public_keys(text: str) -> list[PublicKey]:
    """Every key in ``text`` (one per line; blank lines and ``#`` comments skipped).

    Raises ``SshKeyError`` for the first unusable line, or for the whole text when it holds
    a private key. Duplicates (same key blob) are kept once.
    """
    if looks_like_private_key(text):
        raise SshKeyError("ssh_private_key")
    keys: list[PublicKey] = []
    seen: set[bytes] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key = parse_public_key(line, number)
        if key.blob not in seen:
            seen.add(key.blob)
            keys.append(key)
    if not keys:
        raise SshKeyError("ssh_key_required")
    if len(keys) > MAX_KEYS:
        raise SshKeyError("ssh_too_many_keys")
    return keys


def parse_public_key(line: str, line_number: int = 1) -> PublicKey:
    if len(line) > MAX_LINE:
        raise SshKeyError("ssh_key_invalid", line_number, "line too long")
    parts = line.split(None, 2)
    if len(parts) < 2:
        raise SshKeyError("ssh_key_invalid", line_number, "expected: algorithm, key, comment")
    algorithm, encoded = parts[0], parts[1]
    comment = parts[2].strip() if len(parts) == 3 else ""
    if algorithm == "ssh-dss":
        raise SshKeyError("ssh_key_weak", line_number, "DSA keys are no longer accepted")
    if algorithm not in _PLAIN_TYPES | _SK_TYPES:
        raise SshKeyError(
            "ssh_key_invalid", line_number, f"unsupported key type {algorithm[:40]!r}"
        )
    if not _COMMENT_OK.match(comment):
        raise SshKeyError("ssh_key_invalid", line_number, "the comment has unusual characters")
    try:
        blob = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise SshKeyError("ssh_key_invalid", line_number, "the key is not valid base64") from None
    fields = _wire_strings(blob, line_number)
    if not fields or fields[0] != algorithm.encode():
        raise SshKeyError("ssh_key_invalid", line_number, "the key does not match its type")
    if algorithm in _SK_TYPES:
        _check_security_key(algorithm, fields, line_number)
    else:
        try:
            loaded = load_ssh_public_key(f"{algorithm} {encoded}".encode())
        except (ValueError, TypeError):
            raise SshKeyError("ssh_key_invalid", line_number, "the key does not parse") from None
        if isinstance(loaded, rsa.RSAPublicKey) and loaded.key_size < MIN_RSA_BITS:
            raise SshKeyError(
                "ssh_key_weak", line_number, f"RSA keys need at least {MIN_RSA_BITS} bits"
            )
    return PublicKey(algorithm=algorithm, blob=blob, comment=comment)


def _wire_strings(blob: bytes, line_number: int) -> list[bytes]:
    """The SSH wire format: a sequence of uint32-length-prefixed strings."""
    fields: list[bytes] = []
    offset = 0
    while offset < len(blob):
        if offset + 4 > len(blob):
            raise SshKeyError("ssh_key_invalid", line_number, "the key is truncated")
        (length,) = struct.unpack(">I", blob[offset : offset + 4])
        offset += 4
        if offset + length > len(blob):
            raise SshKeyError("ssh_key_invalid", line_number, "the key is truncated")
        fields.append(blob[offset : offset + length])
        offset += length
    return fields


def _check_security_key(algorithm: str, fields: list[bytes], line_number: int) -> None:
    if algorithm == "sk-ssh-ed25519@openssh.com":
        ok = len(fields) == 3 and len(fields[1]) == 32 and fields[2].startswith(b"ssh:")
    else:
        ok = (
            len(fields) == 4
            and fields[1] == b"nistp256"
            and len(fields[2]) == 65
            and fields[2][0] == 4
            and fields[3].startswith(b"ssh:")
        )
    if not ok:
        raise SshKeyError("ssh_key_invalid", line_number, "the security key does not parse")

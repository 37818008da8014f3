"""Validate the SSH public keys a researcher will log in with.

A key is accepted as one ``authorized_keys``-style line without options: algorithm,
base64 blob, optional comment; or as an RFC 4716 block ("---- BEGIN SSH2 PUBLIC KEY ----",
headers such as ``Comment:``, the blob wrapped over several lines), which is what PuTTYgen's
"Save public key" and ``ssh-keygen -e`` write: it is converted to that one-line form and
checked as one. The blob must decode strictly, name the same algorithm,
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
_KNOWN_TYPES = {name.encode() for name in _PLAIN_TYPES | _SK_TYPES | {"ssh-dss"}}
_PRIVATE_MARKERS = re.compile(
    r"PRIVATE KEY|PuTTY-User-Key-File|BEGIN SSH2 ENCRYPTED PRIVATE|b3BlbnNzaC1rZXktdjE"
    r"|^\s*(Proc-Type|DEK-Info|Private-Lines|Private-MAC):",
    re.MULTILINE,
)
"""``b3BlbnNzaC1rZXktdjE`` is base64 of ``openssh-key-v1``, the private key container;
``Proc-Type``/``DEK-Info`` head an encrypted PEM key, ``Private-Lines`` a PuTTY key."""
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")
_BODY_LINE = re.compile(r"[A-Za-z0-9+/]{60,76}={0,2}")
_COMMENT_OK = re.compile(r"^[\x20-\x7e]{0,200}$")
_ALGORITHM_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9@.]+)+$")
"""What a key type looks like (``ssh-ed25519``): only such a word is quoted in a refusal,
never a piece of base64 that may be a secret."""
_PASSWORD_BASED = (bytes.fromhex("2a864886f70d0105"), bytes.fromhex("2a864886f70d010c"))
"""OID prefixes of PKCS#5 and PKCS#12 password-based encryption (encrypted PKCS#8)."""


SSH2_BEGIN = "---- BEGIN SSH2 PUBLIC KEY ----"
SSH2_END = "---- END SSH2 PUBLIC KEY ----"
_SSH2_HEADER = re.compile(r"^([\x21-\x39\x3b-\x7e]{1,64}):\s?(.*)$")
"""An RFC 4716 header line: a tag of printable characters but the colon, ``: ``, a value."""
MAX_BLOCK_LINES = 400


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
    """A private key in any usual form, with or without its BEGIN/END lines: by its
    markers, or by a run of base64 that starts a private key's encoding (OpenSSH's
    container, PKCS#1, PKCS#8 plain or encrypted, SEC1, SSH.com's)."""
    if _PRIVATE_MARKERS.search(text):
        return True
    if any(_starts_a_private_key(run) for run in _BASE64_RUN.findall(text)):
        return True
    return any(_is_private_body_line(line.strip()) for line in text.splitlines())


def _is_private_body_line(line: str) -> bool:
    """A line of nothing but base64, as long as the lines inside a key's armour, that is
    not a public key's blob: a piece of a private key's body (e.g. pasted from its second
    line on). No public key line looks like this: it starts with its type."""
    if not _BODY_LINE.fullmatch(line):
        return False
    try:
        head = base64.b64decode(line[: len(line) // 4 * 4][:64], validate=True)
    except (binascii.Error, ValueError):
        return False
    (length,) = struct.unpack(">I", head[:4])
    if head[4 : 4 + length] in _KNOWN_TYPES:
        return False  # a public key's blob, its type left out
    body = _der_body(head, 0)
    return not (body is not None and head[body : body + 1] == b"\x30")  # SPKI, certificate


def _starts_a_private_key(run: str) -> bool:
    prefix = run[: len(run) // 4 * 4][:64]
    try:
        head = base64.b64decode(prefix, validate=True)
    except (binascii.Error, ValueError):
        return False
    if head.startswith((b"openssh-key-v1\x00", bytes.fromhex("3f6ff9eb"))):
        return True
    # DER: SEQUENCE, then INTEGER 0 or 1 (the version of PKCS#1, PKCS#8 and SEC1 private
    # keys; a public key's SubjectPublicKeyInfo starts with a SEQUENCE instead), or a
    # SEQUENCE naming password-based encryption (EncryptedPrivateKeyInfo).
    body = _der_body(head, 0)
    if body is None:
        return False
    if head[body : body + 3] in (b"\x02\x01\x00", b"\x02\x01\x01"):
        return True
    algorithm = _der_body(head, body)
    if algorithm is None or head[algorithm : algorithm + 1] != b"\x06":
        return False
    oid_length = head[algorithm + 1] if len(head) > algorithm + 1 else 0
    oid = head[algorithm + 2 : algorithm + 2 + oid_length]
    return oid.startswith(_PASSWORD_BASED)


def _der_body(data: bytes, offset: int) -> int | None:
    """Where the contents of the constructed DER element at ``offset`` begin (None: not one)."""
    if len(data) < offset + 2 or data[offset] != 0x30:
        return None
    length = data[offset + 1]
    if length < 0x80:
        return offset + 2
    octets = length & 0x7F
    return offset + 2 + octets if 1 <= octets <= 4 else None


def parse_public_keys(text: str) -> list[PublicKey]:
    """Every key in ``text`` (one per line; blank lines and ``#`` comments skipped).

    Raises ``SshKeyError`` for the first unusable line, or for the whole text when it holds
    a private key. Duplicates (same key blob) are kept once.
    """
    # Markers first: a private key is refused before anything of it is converted or parsed.
    if _PRIVATE_MARKERS.search(text):
        raise SshKeyError("ssh_private_key")
    lines = one_line_form(text)
    if looks_like_private_key("\n".join(line for _n, line, _e in lines if not _e)):
        raise SshKeyError("ssh_private_key")
    keys: list[PublicKey] = []
    seen: set[bytes] = set()
    for number, line, error in lines:
        if error is not None:
            raise error
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


def one_line_form(text: str) -> list[tuple[int, str, SshKeyError | None]]:
    """``text`` as (line number, stripped line, error) with every RFC 4716 block converted
    to one OpenSSH line (numbered by its BEGIN line); a block that cannot be converted
    carries its error instead of a line. Other lines pass unchanged."""
    found: list[tuple[int, str, SshKeyError | None]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].strip()
        number = index + 1
        index += 1
        if not _is_marker(line, SSH2_BEGIN):
            found.append((number, line, None))
            continue
        block: list[str] = []
        while index < len(lines) and not _is_marker(lines[index].strip(), SSH2_END):
            block.append(lines[index].strip())
            index += 1
        if index >= len(lines) or len(block) > MAX_BLOCK_LINES:
            detail = "the SSH2 key block has no END line"
            found.append((number, "", SshKeyError("ssh_key_invalid", number, detail)))
            continue
        index += 1  # the END line
        try:
            found.append((number, _from_rfc4716(block, number), None))
        except SshKeyError as exc:
            found.append((number, "", exc))
    return found


def _is_marker(line: str, marker: str) -> bool:
    """A BEGIN or END line, however its dashes and spaces were copied."""
    return " ".join(line.strip("- ").upper().split()) == marker.strip("- ")


def _from_rfc4716(block: list[str], number: int) -> str:
    """An RFC 4716 block's inside (headers, then the wrapped base64) as one OpenSSH line:
    algorithm (read from inside the blob), base64, comment (its Comment header)."""
    comment = ""
    body: list[str] = []
    lines = iter(block)
    for line in lines:
        header = _SSH2_HEADER.match(line) if not body else None
        if header is None:
            if line:
                body.append(line)
            continue
        value = header.group(2)
        while value.endswith("\\"):  # a header value continued on the next line
            value = value[:-1] + next(lines, "")
        if header.group(1).lower() == "comment":
            comment = value.strip()
            if len(comment) >= 2 and comment[0] == comment[-1] == '"':
                comment = comment[1:-1]
    encoded = "".join(body)
    try:
        blob = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise SshKeyError("ssh_key_invalid", number, "the key is not valid base64") from None
    fields = _wire_strings(blob, number)
    algorithm = fields[0].decode("ascii", "replace") if fields else ""
    if not (len(algorithm) <= 40 and _ALGORITHM_NAME.match(algorithm)):
        raise SshKeyError("ssh_key_invalid", number, "the SSH2 key block holds no key type")
    if not _COMMENT_OK.match(comment):
        comment = ""  # only a label: one that authorized_keys cannot carry is left out
    return f"{algorithm} {encoded} {comment}".rstrip()


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
        named = len(algorithm) <= 40 and _ALGORITHM_NAME.match(algorithm)
        detail = f"unsupported key type {algorithm!r}" if named else "unsupported key type"
        raise SshKeyError("ssh_key_invalid", line_number, detail)
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

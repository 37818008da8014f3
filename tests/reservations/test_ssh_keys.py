"""SSH public keys: parsed for real, weak or private keys refused."""

from __future__ import annotations

import base64
import struct

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from reservations.ssh_keys import SshKeyError, parse_public_key, parse_public_keys
from tests.conftest import openssh_public_key

# Produced by `ssh-keygen -t ed25519`; `ssh-keygen -lf` printed this fingerprint.
KNOWN = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHYRHhEGbyZH3Bu5Kvq+fbY34OnhAE+pRyQNyOi6s9F7 root@vm"
KNOWN_FINGERPRINT = "SHA256:4IdcdBIJeU6Sf/VctTUkeKwcPYtY24S8hWoaXoKZkJA"


def wire(*fields: bytes) -> str:
    return base64.b64encode(b"".join(struct.pack(">I", len(f)) + f for f in fields)).decode()


def openssh(key: object) -> str:
    return key.public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()


def code_of(text: str) -> str:
    with pytest.raises(SshKeyError) as info:
        parse_public_keys(text)
    return info.value.code


def test_the_fingerprint_is_the_one_ssh_keygen_prints() -> None:
    key = parse_public_key(KNOWN)
    assert key.fingerprint == KNOWN_FINGERPRINT
    assert key.line == KNOWN


def test_it_accepts_the_common_key_types() -> None:
    rsa_key = openssh(rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key())
    ecdsa_key = openssh(ec.generate_private_key(ec.SECP384R1()).public_key())
    sk_key = "sk-ssh-ed25519@openssh.com " + wire(
        b"sk-ssh-ed25519@openssh.com", b"\x01" * 32, b"ssh:"
    )
    keys = parse_public_keys("\n".join([openssh_public_key(), rsa_key, ecdsa_key, sk_key]))
    assert [k.algorithm for k in keys] == [
        "ssh-ed25519",
        "ssh-rsa",
        "ecdsa-sha2-nistp384",
        "sk-ssh-ed25519@openssh.com",
    ]


def test_it_refuses_private_keys_in_every_usual_wrapping() -> None:
    for text in (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n",
        "-----BEGIN PRIVATE KEY-----\nMC4CAQ\n",
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\n",
        # the body of an OpenSSH private key pasted without its armour lines
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW",
        f"{KNOWN}\n-----BEGIN OPENSSH PRIVATE KEY-----",
    ):
        assert code_of(text) == "ssh_private_key"


def test_it_refuses_weak_keys() -> None:
    small = openssh(rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key())
    assert code_of(small) == "ssh_key_weak"
    assert code_of("ssh-dss " + wire(b"ssh-dss", b"p", b"q", b"g", b"y")) == "ssh_key_weak"


def test_it_refuses_malformed_keys_naming_the_line() -> None:
    body = KNOWN.split()[1]
    cases = [
        "ssh-ed25519",  # no key
        "ssh-ed25519 !!!notbase64",  # not base64
        f"ssh-rsa {body}",  # the blob says ed25519
        f"ssh-ed25519 {body[:-8]}",  # truncated
        f'command="rm -rf /" {KNOWN}',  # authorized_keys options are not ours to take
        f"ssh-ed25519 {body} bad\x07comment",
        "ssh-ed25519 " + wire(b"ssh-ed25519", b"\x00" * 5),  # wrong length point
        "sk-ssh-ed25519@openssh.com " + wire(b"sk-ssh-ed25519@openssh.com", b"\x01" * 32),
        "x" * 20_000,
    ]
    for line in cases:
        with pytest.raises(SshKeyError) as info:
            parse_public_keys(f"# first line is a comment\n{line}")
        assert info.value.code == "ssh_key_invalid", line
        assert info.value.line_number == 2


def test_it_needs_one_key_and_takes_at_most_ten() -> None:
    assert code_of("\n# only a comment\n") == "ssh_key_required"
    assert code_of("\n".join(openssh_public_key() for _ in range(11))) == "ssh_too_many_keys"
    assert len(parse_public_keys("\n".join([KNOWN] * 11))) == 1  # duplicates count once

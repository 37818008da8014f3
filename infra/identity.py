"""One e-mail address, one identity, compared one way everywhere.

Look-alike addresses took over guest orders: PostgreSQL's ``upper()`` maps the dotless i
(U+0131) to ``I``, so ``victim@v\u0131sible.example`` matched ``victim@visible.example`` under
``iexact`` while its mail went to another domain (``xn--vsible-p9a.example``). Every address
is now kept and compared in one canonical form, the one mail is actually delivered to:

- Unicode NFKC, then the domain in ASCII as mail servers resolve it (IDNA, as Django encodes
  it when sending), lower case;
- the local part ASCII only (a non-ASCII one needs SMTPUTF8, which we do not promise), lower
  case — every mail provider we deliver to treats it case-insensitively.

Look-ups compare this form exactly (never ``iexact``), so two addresses are one identity only
when mail to both reaches the same mailbox.
"""

from __future__ import annotations

import unicodedata


class NotAnAddress(ValueError):
    """The address has no canonical form (a non-ASCII local part, a domain IDNA refuses)."""


def canonical_email(address: str) -> str:
    text = unicodedata.normalize("NFKC", address.strip())
    local, at, domain = text.rpartition("@")
    if not at or not local or not domain:
        raise NotAnAddress(address)
    if not local.isascii():
        raise NotAnAddress(address)
    try:
        ascii_domain = domain.encode("idna").decode("ascii")
    except UnicodeError:
        raise NotAnAddress(address) from None
    return f"{local.lower()}@{ascii_domain.lower()}"


def is_canonical_address(address: str) -> bool:
    try:
        canonical_email(address)
    except NotAnAddress:
        return False
    return True


DOTLESS_DOMAINS = {"gmail.com": "gmail.com", "googlemail.com": "gmail.com"}
"""Domains whose mailboxes ignore dots before the @ (and the domain their mail reaches)."""


def mailbox_of(address: str) -> str:
    """The mailbox ``address`` delivers to, for limits only (never an identity: an account
    is its canonical address, ``canonical_email``).

    Sub-addresses are one mailbox: ``victim+1@``, ``victim+2@`` … all reach ``victim@``, so
    the ``+tag`` is dropped for every domain. Gmail also ignores dots (``v.i.ctim@gmail.com``
    is ``victim@gmail.com``, and so is ``@googlemail.com``); other providers' dots are kept,
    since for them a dot names another mailbox. Raises ``NotAnAddress`` like
    ``canonical_email``.
    """
    local, _at, domain = canonical_email(address).rpartition("@")
    base = local.partition("+")[0] or local
    if domain in DOTLESS_DOMAINS:
        base = base.replace(".", "") or base
        domain = DOTLESS_DOMAINS[domain]
    return f"{base}@{domain}"

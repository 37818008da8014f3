"""Sign-in by e-mail link: the link asked for, mailed, and used (the address proven)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import translation
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from accounts.events import address_proven
from accounts.models import User
from accounts.tokens import LINK_MINUTES, sign_in_tokens
from infra import limits
from infra.identity import NotAnAddress, canonical_email, mailbox_of
from infra.mail import send_templated

log = logging.getLogger(__name__)


def request_sign_in(email: str, language: str, client: str) -> None:
    """Hand the sign-in to a worker (``send_sign_in_link``) and return.

    Nothing is looked up or sent here, so the page answers the same, in the same time,
    whether the address has an account, is new, is an operator's or has asked too often
    (the mail used to go out inside the request: staff and throttled addresses answered
    measurably faster). A broker outage is logged; the page still answers the same.
    """
    # The tasks' module imports this one: its task is looked up when first queued.
    from accounts.tasks import send_sign_in_link as task

    try:
        task.delay(email, language, client)
    except Exception:  # any broker failure: the researcher asks again
        log.warning("sign-in link not queued", exc_info=True)


def send_sign_in_link(email: str, language: str, client: str, *, count: bool = True) -> bool:
    """Mail a one-time sign-in link to ``email``, creating the researcher's account if new.

    Sends nothing (and creates no account) when ``client`` (infra.clients.client_key) asked
    for more than ``SIGN_IN_LIMIT_CLIENT`` links, or the mailbox (``mailbox_of``: +tags and
    Gmail's dots dropped) was sent more than ``SIGN_IN_LIMIT_MAILBOX``, or the address is an
    operator's, who signs in with a password. ``count=False`` for a retry of a send that was
    counted already. True if the mail went out.
    """
    try:
        email = canonical_email(email)
        mailbox = mailbox_of(email)
    except NotAnAddress:
        return False
    if count:
        # The client first: a client over its limit uses up no mailbox's allowance.
        for scope, name, rate in (
            ("client", client, settings.SIGN_IN_LIMIT_CLIENT),
            ("mailbox", mailbox, settings.SIGN_IN_LIMIT_MAILBOX),
        ):
            if not limits.hit_rate(f"sign-in:{scope}:{name}", rate).allowed:
                log.warning("sign-in link not sent: %s limit", scope, extra={"email": email})
                return False
    user = User.objects.filter(email=email).first()
    if user is None:
        try:
            with transaction.atomic():
                user = User.objects.create_user(email=email)
        except IntegrityError:  # created by a concurrent sign-in for the same address
            user = User.objects.get(email=email)
    if user.is_staff or not user.is_active:
        return False
    with translation.override(language):
        path = reverse(
            "accounts:sign_in_link",
            args=[urlsafe_base64_encode(force_bytes(user.pk)), sign_in_tokens.make_token(user)],
        )
    context = {"link": f"{settings.SITE_URL}{path}", "minutes": LINK_MINUTES}
    send_templated("sign_in", context, user.email, language)
    return True


def proven_by_link(user: User) -> None:
    """The researcher signed in with the link mailed to their address: the address is
    theirs. Announces ``address_proven`` (reservations gives them the guest orders placed
    with it)."""
    address_proven.announce(user_id=user.pk)

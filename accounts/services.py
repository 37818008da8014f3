"""Sign-in by e-mail link, and the guest orders that come with a proven address."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.cache import cache
from django.urls import reverse
from django.utils import translation
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from accounts.models import User
from accounts.tokens import LINK_MINUTES, sign_in_tokens
from config.identity import NotAnAddress, canonical_email
from config.mail import send_templated
from reservations.models import Order

log = logging.getLogger(__name__)

LINKS_PER_HOUR = 5


def request_sign_in(email: str, language: str) -> bool:
    """Mail a one-time sign-in link to ``email``, creating the researcher's account if new.

    Returns False (and sends nothing) when the address asked too often this hour or belongs
    to an operator, who signs in with a password. Callers show the same answer either way,
    so the page does not reveal which addresses have accounts.
    """
    try:
        email = canonical_email(email)
    except NotAnAddress:
        return False
    counter = f"sign-in-links:{email}"
    cache.add(counter, 0, timeout=3600)
    if cache.incr(counter) > LINKS_PER_HOUR:
        log.warning("sign-in links throttled", extra={"email": email})
        return False
    user = User.objects.filter(email=email).first()
    if user is None:
        user = User.objects.create_user(email=email)
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


def attach_guest_orders(user: User) -> int:
    """Give ``user`` the guest orders placed with their (now proven) e-mail address."""
    try:
        email = canonical_email(user.email)
    except NotAnAddress:
        return 0
    # Exactly the canonical form (config.identity): never a look-alike's orders.
    return Order.objects.filter(user__isnull=True, contact_email=email).update(user=user)

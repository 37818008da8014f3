"""The backend a host's steps run through: the one configured (PROVISIONING_BACKEND), above
both of them, so that neither imports the other (provisioning.backends holds what they
share and the local one; provisioning.ssh builds on it)."""

from __future__ import annotations

from django.conf import settings

from provisioning.backends import Backend, LocalBackend
from provisioning.ssh import SshBackend
from reservations.models import Host


def backend_for(host: Host) -> Backend:
    """The configured backend (PROVISIONING_BACKEND): "ssh" for the inventory's hosts, else
    this machine's sandbox."""
    if settings.PROVISIONING_BACKEND == "ssh":
        return SshBackend()
    return LocalBackend()

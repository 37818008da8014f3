"""Sign-in is no mail relay (issue 10, items 7 and 11): one client gets a few links an hour,
one mailbox (+tags and Gmail's dots aside) a few, whoever asks; the page answers the same,
without sending anything inside the request, for every address."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.conf import settings
from django.core import mail
from django.test import Client

from accounts.models import User
from accounts.tasks import send_sign_in_link
from infra.env import parse_rate
from infra.identity import mailbox_of
from tests.workers import WorkerProcess, wait_for

PER_CLIENT = parse_rate(settings.SIGN_IN_LIMIT_CLIENT)[0]
PER_MAILBOX = parse_rate(settings.SIGN_IN_LIMIT_MAILBOX)[0]


def ask(client: Client, email: str, peer: str = "127.0.0.1") -> Any:
    response = client.post("/en/account/sign-in/", {"email": email}, REMOTE_ADDR=peer)
    assert response.status_code == 200
    return response


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The sign-in tasks the requests hand to the broker, kept to be run when the test says."""
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(send_sign_in_link, "delay", lambda *args: calls.append(args))
    return calls


def run(enqueued: list[tuple[Any, ...]]) -> None:
    for args in enqueued:
        send_sign_in_link.apply(args=args)
    enqueued.clear()


def test_a_mailbox_is_its_address_without_tags_and_gmails_dots() -> None:
    assert mailbox_of("Victim+17@Example.org") == "victim@example.org"
    assert mailbox_of("v.i.c.t.i.m+x@googlemail.com") == "victim@gmail.com"
    assert mailbox_of("first.last@example.org") == "first.last@example.org"  # dots kept
    assert mailbox_of("+only@example.org") == "+only@example.org"


@pytest.mark.django_db
def test_one_client_gets_at_most_its_limit_of_links_whatever_the_addresses(
    client: Client, eager_tasks: None
) -> None:
    for n in range(40):
        ask(client, f"stranger{n}@example.org", peer="203.0.113.20")

    assert len(mail.outbox) == PER_CLIENT
    assert User.objects.count() == PER_CLIENT  # no account for a refused request
    ask(client, "someone@example.org", peer="203.0.113.21")  # another client is not held up
    assert len(mail.outbox) == PER_CLIENT + 1


@pytest.mark.django_db
def test_one_mailbox_gets_at_most_its_limit_of_links_whatever_the_tags(
    client: Client, eager_tasks: None
) -> None:
    for n in range(20):
        ask(client, f"victim+{n}@example.org", peer=f"198.51.100.{n + 1}")

    assert len(mail.outbox) == PER_MAILBOX
    assert all(m.to[0].startswith("victim+") for m in mail.outbox)
    assert User.objects.count() == PER_MAILBOX

    dotted = ["v.ictim@gmail.com", "Vic.Tim+1@googlemail.com", "victim+2@gmail.com"]
    for n, address in enumerate(dotted * 3):
        ask(client, address, peer=f"192.0.2.{n + 1}")
    assert len(mail.outbox) == 2 * PER_MAILBOX


@pytest.mark.django_db
def test_the_answer_is_the_same_for_every_address_and_nothing_is_sent_inside_the_request(
    client: Client, enqueued: list[tuple[Any, ...]]
) -> None:
    User.objects.create_superuser("op@example.org", "a-long-operator-password")
    User.objects.create_user("ada@example.org")
    for n in range(PER_MAILBOX):  # thr@ uses up its mailbox's allowance, from other clients
        ask(client, f"thr+{n}@example.org", peer=f"198.51.100.{n + 1}")
    run(enqueued)
    assert len(mail.outbox) == PER_MAILBOX
    mail.outbox.clear()

    cases = {
        "staff": "op@example.org",
        "existing": "ada@example.org",
        "new": "new@example.org",
        "throttled": "thr@example.org",
    }
    pages = {}
    for case, address in cases.items():
        response = ask(client, address)
        assert response.templates[0].name == "accounts/sign_in_sent.html"
        assert not [t.name for t in response.templates if t.name.startswith("emails/")]
        pages[case] = re.sub(r'value="[^"]+"', "", response.content.decode()).replace(
            address, "ADDRESS"
        )

    assert len(set(pages.values())) == 1, pages  # one page, whatever the address
    assert mail.outbox == []  # nothing sent inside the request …
    assert not User.objects.filter(email="new@example.org").exists()  # … nor created
    assert [args[0] for args in enqueued] == list(cases.values())  # every one handed on

    run(enqueued)  # the worker's part: limits, the account, the mail (or silently none)
    assert sorted(m.to[0] for m in mail.outbox) == ["ada@example.org", "new@example.org"]
    assert User.objects.filter(email="new@example.org").exists()
    assert not User.objects.filter(email="thr@example.org").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_a_real_worker_mails_the_link_after_the_page_has_answered(
    client: Client, celery_worker: WorkerProcess
) -> None:
    User.objects.create_superuser("op@example.org", "a-long-operator-password")

    ask(client, "op@example.org")
    ask(client, "ada@example.org")
    assert mail.outbox == []  # the page answered; the request itself sent nothing

    def done() -> bool:
        return len(re.findall(r"send_sign_in_link\[\S+\] succeeded", celery_worker.log())) >= 2

    assert wait_for(done), celery_worker.log()
    log = celery_worker.log()
    assert "To: ada@example.org" in log  # the worker's console mail
    assert "To: op@example.org" not in log  # never to an operator
    assert mail.outbox == []
    assert User.objects.filter(email="ada@example.org").exists()

"""Settings for every environment, read from environment variables (12-factor).

Local defaults (``make run``, ``make test``) need nothing but ``DJANGO_DEBUG=1``, which the
Makefile sets. Production sets ``DJANGO_SECRET_KEY`` and ``DJANGO_ALLOWED_HOSTS`` and leaves
``DJANGO_DEBUG`` unset; ``manage.py check --deploy`` is then clean (a test checks it).
Every variable has its meaning in docs/reference/environment.yml, from which the documentation
renders its table (tests/test_docs.py checks both against ``infra.env.READ``).
"""

from __future__ import annotations

import shlex
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from infra.env import (
    database_from_url,
    env_bool,
    env_int,
    env_list,
    env_networks,
    env_rate,
    env_required,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env_required(
    "DJANGO_SECRET_KEY", default_when=DEBUG, default="insecure-local-development-key-only"
)
SITE_URL = (env_str("SITE_URL", "http://127.0.0.1:8000") or "").rstrip("/")
"""Where the site is reached from outside: links in e-mails start with it."""
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "infra",
    "accounts",
    "reservations",
    "payments",
    "provisioning",
    "api",
    "pages",
    "desk",
    "webhooks",
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "infra.security.SecurityHeadersMiddleware",
    # The database or Redis down: a 503 (JSON for the API) with Retry-After, not a 500.
    "infra.outages.OutageMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out sign-in into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.i18n",
                "infra.context_processors.languages",
            ],
        },
    },
]

_database = database_from_url(
    env_str("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpulots") or ""
)
# The hottest statements are prepared once per connection (infra.prepared: placing an
# order, the order page's state, the API's token); Django's own are bound on the client.
# Set 0 behind a pooler in transaction mode (e.g. PgBouncer before 1.21), where prepared
# statements break: None disables them in psycopg (its default of 5 would prepare).
_prepared = env_bool("DATABASE_PREPARED_STATEMENTS", default=True)
_database["OPTIONS"] = {"prepare_threshold": 5 if _prepared else None, **_database["OPTIONS"]}
# A database host that does not answer fails a request within seconds (a clear 503, see
# infra.outages) instead of holding a web process until it is killed.
_database["OPTIONS"].setdefault(
    "connect_timeout", env_int("DATABASE_CONNECT_TIMEOUT_SECONDS", 5, minimum=1)
)
DATABASES = {
    "default": {
        **_database,
        "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
        "CONN_HEALTH_CHECKS": True,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_USER_MODEL = "accounts.User"
# django-axes first: it refuses a locked-out (address, e-mail) pair before any password is
# checked (accounts.lockout).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0") or ""
REDIS_TIMEOUT_SECONDS = env_int("REDIS_TIMEOUT_SECONDS", 2, minimum=1)
"""How long the web processes wait for Redis (connect, and each reply) before treating it
as down: the cache then misses, read-only API requests pass unthrottled, writes answer 503
(infra.cache, api.throttles, infra.outages)."""
CACHES = {
    "default": {
        # Django's RedisCache, whose reads miss and writes are dropped (logged) while Redis
        # is down; add() and incr(), which locks and counters rely on, still raise.
        "BACKEND": "infra.cache.ResilientRedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "gpulots",
        "OPTIONS": {
            "socket_connect_timeout": REDIS_TIMEOUT_SECONDS,
            "socket_timeout": REDIS_TIMEOUT_SECONDS,
        },
    }
}

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("de", "Deutsch"), ("fr", "Français")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
FORMAT_MODULE_PATH = ["infra.formats"]
USE_TZ = True

STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("DJANGO_STATIC_ROOT", str(BASE_DIR / "var" / "static")) or "")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# --- Security: strict unless DEBUG; every switch can be overridden behind a proxy. ---
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 0 if DEBUG else 31_536_000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_SECONDS > 0
SECURE_HSTS_PRELOAD = SECURE_HSTS_SECONDS > 0
if env_bool("DJANGO_TRUST_X_FORWARDED_PROTO", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES", "")
"""Reverse proxies (addresses or CIDR networks) whose X-Forwarded-For is believed: every
per-client limit counts the right-most forwarded hop that is not one of them
(infra.clients). Empty: the connecting peer is the client, X-Forwarded-For is ignored."""
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
DATA_UPLOAD_MAX_MEMORY_SIZE = 256 * 1024
CSRF_FAILURE_VIEW = "infra.error_pages.csrf_failure"
LOGIN_URL = "accounts:sign_in"
SIGN_IN_LIMIT_CLIENT = env_rate("SIGN_IN_LIMIT_CLIENT", "10/hour")
"""Sign-in links one client (infra.clients) may ask for; more are silently not sent."""
SIGN_IN_LIMIT_MAILBOX = env_rate("SIGN_IN_LIMIT_MAILBOX", "5/hour")
"""Sign-in links mailed to one mailbox (infra.identity.mailbox_of: +tags and Gmail's dots
dropped), whoever asks."""

# --- Password sign-in (the admin login) is rate-limited: django-axes, see accounts.lockout. ---
AXES_ENABLED = env_bool("AXES_ENABLED", default=True)
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
"""Failed passwords for one e-mail address from one client address before it is locked out."""
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AXES_COOLOFF_MINUTES", 15, minimum=1))
"""How long a lockout lasts (each try during it starts it again)."""
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_USERNAME_FORM_FIELD = "username"  # the admin login form's field (axes' default: "email")
AXES_USERNAME_CALLABLE = "accounts.lockout.username"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "accounts.lockout.locked_out"
AXES_CLIENT_IP_CALLABLE = "accounts.lockout.client_ip"  # behind TRUSTED_PROXIES only
# The client address is REMOTE_ADDR (django-ipware is not installed, so X-Forwarded-For is
# never believed): behind a reverse proxy every client shares the proxy's address.

# --- E-mail: console in development, SMTP when EMAIL_HOST is set. ---
EMAIL_HOST = env_str("EMAIL_HOST", "") or ""
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=False)
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "GPU lots <bookings@localhost>") or ""
SERVER_EMAIL = DEFAULT_FROM_EMAIL
ADMINS = [("Operator", address) for address in env_list("OPERATOR_EMAILS")]
"""Who gets the operator's alerts (mail_admins): a host key refused, a lot's keys not
installed, a payment configuration drifting, a domain event's reaction out of attempts."""
HELP_EMAIL = env_str("HELP_EMAIL", "help@localhost") or ""
"""Where researchers write for help: in every page's footer and at the end of every mail."""
HELP_URL = env_str("HELP_URL", "") or ""
"""An optional help page, shown next to HELP_EMAIL."""

# --- Webhooks (webhooks.services) ---
WEBHOOK_TIMEOUT_SECONDS = env_int("WEBHOOK_TIMEOUT_SECONDS", 10, minimum=1)
"""A delivery's whole exchange (connect, send, answer) is cut after this."""
WEBHOOK_MAX_ENDPOINTS = env_int("WEBHOOK_MAX_ENDPOINTS", 10, minimum=1)
"""The most endpoints one account may have."""
WEBHOOK_DISABLE_AFTER_DAYS = env_int("WEBHOOK_DISABLE_AFTER_DAYS", 3, minimum=1)
"""An endpoint failing this long is turned off and its owner mailed."""
WEBHOOK_SECRETS_KEY = env_str("WEBHOOK_SECRETS_KEY", "") or ""
"""The Fernet key that seals the endpoints' signing secrets in the database (derived from
DJANGO_SECRET_KEY when not given: either way it lives in the environment, not the dump)."""
WEBHOOK_ALLOW_PRIVATE_ADDRESSES = env_bool("WEBHOOK_ALLOW_PRIVATE_ADDRESSES", default=DEBUG)
"""Deliver to loopback and private addresses: local development and the tests only."""
WEBHOOK_ALLOW_HTTP = env_bool("WEBHOOK_ALLOW_HTTP", default=DEBUG)
"""Accept http:// endpoints: local development and the tests only."""
if not DEBUG and (WEBHOOK_ALLOW_PRIVATE_ADDRESSES or WEBHOOK_ALLOW_HTTP):
    raise ImproperlyConfigured(
        "WEBHOOK_ALLOW_PRIVATE_ADDRESSES and WEBHOOK_ALLOW_HTTP are for development "
        "(DJANGO_DEBUG=1)"
    )

# --- Celery (Redis broker). Tasks take primary keys and are enqueued after commit. ---
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "gpulots") or "gpulots"
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 3600,
    # Publishing (a web request's .delay(), beat's schedule) gives up within seconds when
    # Redis does not answer, instead of hanging; the workers' blocking reads wait 1 s.
    "socket_connect_timeout": REDIS_TIMEOUT_SECONDS,
    "socket_timeout": REDIS_TIMEOUT_SECONDS + 5,
    "retry_on_timeout": True,
}
# A Redis outage is waited out: workers and beat reconnect for as long as it lasts (every
# 2 s at first, then at most every 30 s), they never exit because of it.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# A task running when the connection drops finishes (an SSH step is never cut halfway);
# its acknowledgement may be lost, so it may run once more later: every task is idempotent,
# the database is the truth.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE_FILENAME = str(BASE_DIR / "var" / "celerybeat-schedule")
# Each periodic message carries its period's number: a second beat started by mistake
# sends the same one, and the task finds it claimed (infra.beat).
CELERY_BEAT_SCHEDULER = "infra.beat:SlottedScheduler"
PROVISIONING_TICK_SECONDS = env_int("PROVISIONING_TICK_SECONDS", 60, minimum=1)
"""How often beat opens and closes access that is due (and catches up with the overdue)."""
PROVISIONING_CLOCK_QUEUE = (
    env_str("PROVISIONING_CLOCK_QUEUE", CELERY_TASK_DEFAULT_QUEUE) or CELERY_TASK_DEFAULT_QUEUE
)
"""The queue of the access tick. Give it a worker of its own (`make run` and docker-compose
do) so that a tick never waits behind a long benchmark: a window's end is revoked on time."""
WEBHOOK_QUEUE = env_str("WEBHOOK_QUEUE", CELERY_TASK_DEFAULT_QUEUE) or CELERY_TASK_DEFAULT_QUEUE
"""The queue of webhook deliveries. Give it a worker of its own with a thread pool (`make run`
and docker-compose do): a slow receiver then never delays provisioning or payments."""
CELERY_TASK_ROUTES = {
    f"provisioning.tasks.{name}": {"queue": PROVISIONING_CLOCK_QUEUE}
    for name in ("access_tick", "health_tick")
}
if WEBHOOK_QUEUE != CELERY_TASK_DEFAULT_QUEUE:  # else they follow the default queue
    CELERY_TASK_ROUTES.update(
        {f"webhooks.tasks.{name}": {"queue": WEBHOOK_QUEUE} for name in ("deliver", "deliver_due")}
    )
PAYMENT_SCAN_SECONDS = env_int("PAYMENT_SCAN_SECONDS", 5, minimum=1)
"""How often beat runs the payment scanner over every open invoice."""
PAYMENT_REFUND_CHECK_SECONDS = env_int("PAYMENT_REFUND_CHECK_SECONDS", 30, minimum=1)
"""How often beat verifies the refunds sent (their transactions on-chain) and mails each
step of a refund."""
WEBHOOK_DUE_SECONDS = env_int("WEBHOOK_DUE_SECONDS", 5, minimum=1)
"""How often beat looks for webhook deliveries that are due (retries, lost tasks)."""
CELERY_BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "expire-unpaid-holds": {
        "task": "payments.tasks.expire_unpaid_holds",
        "schedule": crontab(minute="*"),
    },
    "send-missing-order-mails": {
        "task": "reservations.tasks.send_missing_order_mails",
        "schedule": crontab(minute="*"),
    },
    "checkpoint-reminders": {  # 30-day campaigns (reservations.campaign)
        "task": "reservations.tasks.send_checkpoint_reminders",
        "schedule": crontab(minute="*/5"),
    },
    "access-tick": {  # open, close, resume and remind what is due (provisioning.schedule)
        "task": "provisioning.tasks.access_tick",
        # Every minute on the minute by default: windows start on the hour, so access opens
        # within a second or two of the start rather than up to a minute after it.
        "schedule": crontab(minute="*")
        if PROVISIONING_TICK_SECONDS == 60
        else timedelta(seconds=PROVISIONING_TICK_SECONDS),
    },
    "health-tick": {  # read the cards of every lot whose access is open (provisioning.health)
        "task": "provisioning.tasks.health_tick",
        "schedule": timedelta(seconds=60),  # each lot is read when its reading is due
    },
    "scan-open-invoices": {
        "task": "payments.tasks.scan_open_invoices",
        "schedule": timedelta(seconds=PAYMENT_SCAN_SECONDS),
    },
    "retry-failed-reactions": {  # receivers of domain events that failed (infra.events)
        "task": "infra.tasks.retry_failed_reactions",
        "schedule": crontab(minute="*"),
    },
    "check-refunds": {
        "task": "payments.tasks.check_refunds",
        "schedule": timedelta(seconds=PAYMENT_REFUND_CHECK_SECONDS),
    },
    "webhooks-due": {  # retries that are due, and deliveries whose task was lost
        "task": "webhooks.tasks.deliver_due",
        "schedule": timedelta(seconds=WEBHOOK_DUE_SECONDS),
    },
    "webhooks-disable-failing": {
        "task": "webhooks.tasks.disable_failing",
        "schedule": crontab(minute="17"),
    },
}

# --- Reservations ---
RESERVATION_TURNAROUND = timedelta(hours=env_int("RESERVATION_TURNAROUND_HOURS", 6, minimum=0))
"""Blocked after each booking of a lot before the next may start (wipe, re-image, checks)."""
RESERVATION_HORIZON = timedelta(days=env_int("RESERVATION_HORIZON_DAYS", 180, minimum=1))
"""How far ahead a window may start."""
RESERVATION_HANDOVER_HOUR = env_int("RESERVATION_HANDOVER_HOUR", 12, minimum=0)
"""Windows booked in the browser start at this hour (UTC) of the chosen day."""
DEMO_MODE = env_bool("DEMO_MODE", default=False)
"""The local demo (`make run` sets it): a window booked for today starts within
DEMO_START_MINUTES instead of at the handover hour, so that a newcomer sees access and the
report in one sitting; every page says so. Refused in production (without DJANGO_DEBUG)."""
if DEMO_MODE and not DEBUG:
    raise ImproperlyConfigured("DEMO_MODE=1 is the local demo's setting: it needs DJANGO_DEBUG=1")
DEMO_START_MINUTES = 5
"""Under DEMO_MODE, today's windows start at the next whole five minutes, one minute ahead."""
RESERVATION_HOLD_DURATION = timedelta(minutes=env_int("RESERVATION_HOLD_MINUTES", 120, minimum=1))
"""How long an unpaid order keeps its lots."""
RESERVATION_EXTENSION_PAY_LEAD = timedelta(
    minutes=env_int("RESERVATION_EXTENSION_PAY_LEAD_MINUTES", 120, minimum=10)
)
"""An extension must be paid this long before the window it continues ends (its hold ends
then, and access closes as booked): room for the payment's confirmations."""
RESERVATION_UNCONFIRMED_HOLD = timedelta(
    minutes=env_int("RESERVATION_UNCONFIRMED_HOLD_MINUTES", 20, minimum=1)
)
"""How long a guest's order keeps its lots until its contact address is confirmed (a full
payment mined before then keeps them while it confirms); then the full hold, counted from
the booking."""
RESERVATION_UNPAID_ORDERS_PER_CLIENT = env_int("RESERVATION_UNPAID_ORDERS_PER_CLIENT", 5, minimum=1)
"""Unpaid orders one client (network address) may hold at once."""
RESERVATION_UNPAID_ORDERS_PER_MAILBOX = env_int(
    "RESERVATION_UNPAID_ORDERS_PER_MAILBOX", 3, minimum=1
)
"""Unpaid orders one mailbox (or one account) may hold at once."""
RESERVATION_UNPAID_SHARE = Decimal(env_int("RESERVATION_UNPAID_SHARE_PERCENT", 10, minimum=1)) / 100
"""The share of a kind's lot-days over the horizon one party's unpaid orders may hold."""

# --- Payments: watch-only. The server holds an account-level extended PUBLIC key only;
# deposit addresses are derived from it, the operator's wallet holds the private keys. ---
PAYMENT_XPUB = (
    env_str(
        "PAYMENT_XPUB",
        # The local dev chain's receiving account (m/44'/60'/0' of the public BIP39 test
        # mnemonic "abandon … about"): for `make run` only, never for real funds.
        "xpub6DCoCpSuQZB2jawqnGMEPS63ePKWkwWPH4TU45Q7LPXWuNd8TMtVxRrgjtEshuqpK3mdhaWHPFsBngh5GFZaM6si3yZdUsT8ddYM3PwnATt",
    )
    or ""
)
if not PAYMENT_XPUB.startswith(("xpub", "tpub")):
    raise ImproperlyConfigured(
        "PAYMENT_XPUB must be an account-level extended PUBLIC key (xpub…); "
        "a private key (xprv…) or anything else is refused"
    )
PAYMENT_MONITOR_HOURS = env_int("PAYMENT_MONITOR_HOURS", 24, minimum=0)
"""How long after an invoice expires late payments are still watched for."""
PAYMENT_RPC_TIMEOUT = env_int("PAYMENT_RPC_TIMEOUT_SECONDS", 10, minimum=1)
DESK_REVOCATION_GRACE_MINUTES = env_int("DESK_REVOCATION_GRACE_MINUTES", 15, minimum=0)
"""The desk's "Today" lists a grant as an overdue revocation once its window ended this long
ago without its access confirmed removed."""
PAYMENT_SCAN_RANGES_PER_CYCLE = env_int("PAYMENT_SCAN_RANGES_PER_CYCLE", 25, minimum=1)
"""A scan cycle reads at most this many block ranges (each the chain's block_range_limit)
past its cursor: after downtime the scanner catches up in bounded steps, cycle by cycle."""
PAYMENT_RPC_BATCH_LIMIT = env_int("PAYMENT_RPC_BATCH_LIMIT", 100, minimum=1)
"""Most calls in one JSON-RPC batch request (providers cap batches, often at 100-1000)."""
PAYMENT_ENDPOINT_BACKOFF_SECONDS = env_int("PAYMENT_ENDPOINT_BACKOFF_SECONDS", 30, minimum=1)
"""An RPC endpoint that failed is tried after the healthy ones for this long."""
PAYMENT_CHECK_DELAYED_SECONDS = env_int(
    "PAYMENT_CHECK_DELAYED_SECONDS", 3 * PAYMENT_SCAN_SECONDS, minimum=1
)
"""An open invoice says "checking is delayed" (page and API) once its chain's last
successful scan is older than this: a node that stops answering, or scanning that stopped
(no worker, no beat, no broker), shows within a few scan intervals."""
HEALTH_CHAIN_CHECK_SECONDS = env_int("HEALTH_CHAIN_CHECK_SECONDS", 30, minimum=1)
"""How long /healthz reuses its check of the chain nodes (it asks them at most this often,
however often it is asked)."""
PAYMENT_CLAIM_CHECK_SECONDS = env_int("PAYMENT_CLAIM_CHECK_SECONDS", 10, minimum=1)
"""However often "I've paid" is pressed, an invoice's claim is verified at most once in this
many seconds, by its one pending verification."""
PAYMENT_OPEN_INVOICES_PER_ORDER = env_int("PAYMENT_OPEN_INVOICES_PER_ORDER", 3, minimum=1)
"""At most this many payable invoices (one per coin) per order at once."""
PAYMENT_COIN_SWITCHES_PER_HOUR = env_int("PAYMENT_COIN_SWITCHES_PER_HOUR", 10, minimum=1)
"""How often an order's coin may be chosen or changed in an hour."""
PAYMENT_BLOCK_PROPAGATION = timedelta(
    seconds=env_int("PAYMENT_BLOCK_PROPAGATION_SECONDS", 30, minimum=0)
)
"""A block is on the node at most this long after its timestamp: a chain head read this
long after a deadline has every block up to it (an idle chain mines none after it)."""
PAYMENT_CONFIRMING_GRACE = timedelta(
    minutes=env_int("PAYMENT_CONFIRMING_GRACE_MINUTES", 60, minimum=0)
)
"""A full payment mined before the hold's deadline keeps the lots while it confirms, at
most this long after the deadline; then the hold ends and the invoice is flagged."""
PAYMENT_EXPIRY_MAX_WAIT = timedelta(
    minutes=env_int("PAYMENT_EXPIRY_MAX_WAIT_MINUTES", 60, minimum=0)
)
"""An unpaid order's hold ends only once its invoices' chain has been read up to the
deadline; a chain that cannot be read is waited for at most this long after it (then the
hold ends and the invoices are flagged for the operator)."""
PAYMENT_ASSET_CHECK_SECONDS = env_int("PAYMENT_ASSET_CHECK_SECONDS", 300, minimum=1)
"""How long a check of a coin's configuration against its contract (chain id, decimals,
symbol) is reused before the next invoice in it asks the node again."""

# --- Receipts (payments.receipts): who issues them, and the font the PDF is set in ---
RECEIPT_ISSUER_NAME = env_str("RECEIPT_ISSUER_NAME", "GPU lots (local development)") or ""
"""The operator's name as printed on every receipt."""
RECEIPT_ISSUER_ADDRESS = [
    line.strip()
    for line in (
        env_str("RECEIPT_ISSUER_ADDRESS", "Not for accounting; set RECEIPT_ISSUER_ADDRESS") or ""
    ).split(";")
    if line.strip()
]
"""The operator's postal address on receipts, its lines separated by semicolons."""
RECEIPT_ISSUER_VAT_ID = env_str("RECEIPT_ISSUER_VAT_ID", "") or ""
"""The operator's VAT id on receipts (empty: none printed)."""
RECEIPT_FONT = env_str("RECEIPT_FONT", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf") or ""
"""A Unicode TrueType font for the receipt PDF (Debian's fonts-dejavu-core); its -Bold
sibling, if present, sets the headings."""

# --- Provisioning ---
PROVISIONING_AUTO_APPROVE = env_bool("PROVISIONING_AUTO_APPROVE", default=False)
"""Approve paid orders without waiting for an operator."""
PROVISIONING_LOCAL_ROOT = Path(
    env_str("PROVISIONING_LOCAL_ROOT", str(BASE_DIR / "var" / "hosts")) or ""
)
"""The local backend's sandbox: one folder per host, no real system accounts."""
PROVISIONING_PREPARE_LEAD = timedelta(
    hours=env_int("PROVISIONING_PREPARE_LEAD_HOURS", 6, minimum=0)
)
"""How long before a window's start its lots may be prepared and benchmarked (no keys yet;
never before the previous tenant's access is removed and the turnaround has passed)."""
PROVISIONING_REMINDER_HOURS = env_int("PROVISIONING_REMINDER_HOURS", 24, minimum=0)
"""Mail the researcher this long before the window ends (0: no reminder)."""
PROVISIONING_HOLD_ON_CRASH = env_bool("PROVISIONING_HOLD_ON_CRASH", default=False)
"""Hold access for the operator when a lot's benchmark crashed (else it is delivered, with
the crash in its report)."""
PROVISIONING_REPLACE_FAILED_LOTS = env_bool("PROVISIONING_REPLACE_FAILED_LOTS", default=True)
"""A lot that fails its acceptance moves its booking to a free lot of the kind (a spare
first) at once (provisioning.replacement); off: it waits for the operator. Either way the
time lost is credited."""
PROVISIONING_HEALTH_SECONDS = env_int("PROVISIONING_HEALTH_SECONDS", 300, minimum=10)
"""How often each lot whose access is open is read (provisioning.health): its cards, XID
lines, ECC counters and remapped rows, throttling, temperature."""
PROVISIONING_HEALTH_CONCURRENCY = env_int("PROVISIONING_HEALTH_CONCURRENCY", 16, minimum=1)
"""How many hosts one health tick reads at once (each reading is one SSH session)."""
PROVISIONING_HEALTH_KEEP = timedelta(hours=env_int("PROVISIONING_HEALTH_KEEP_HOURS", 72, minimum=1))
"""How long a lot's health readings are kept (a short time series; incidents keep theirs)."""
PROVISIONING_HEALTH_REPLACE_AFTER = timedelta(
    minutes=env_int("PROVISIONING_HEALTH_REPLACE_AFTER_MINUTES", 30, minimum=0)
)
"""A lot that reads degraded (hot, throttled, memory rows pending, host not reached) for
this long is replaced; a card gone, changed, or a fatal XID or ECC error at once."""
PROVISIONING_REPLACED_ACCESS_GRACE = timedelta(
    minutes=env_int("PROVISIONING_REPLACED_ACCESS_GRACE_MINUTES", 60, minimum=0)
)
"""A lot replaced while its access was open stays reachable this long after access opens on
the spare (the researcher copies files off it); then it is revoked."""
ACCEPTANCE_DRIFT_SHARE = float(env_str("ACCEPTANCE_DRIFT_SHARE", "0.9") or "0.9")
"""A lot whose latest acceptance figures (matrix product and HBM shares of the datasheet,
all-reduce bus bandwidth) fall below this share of its kind's median over all lots is
flagged in the lot list (provisioning.fleet)."""
if not 0 < ACCEPTANCE_DRIFT_SHARE <= 1:
    raise ImproperlyConfigured("ACCEPTANCE_DRIFT_SHARE must be above 0 and at most 1")
PROVISIONING_CPU_STAND_IN_HOSTS = env_list("PROVISIONING_CPU_STAND_IN_HOSTS")
"""Hosts without GPUs on purpose (test machines), by name: their benchmark runs on a CPU
stand-in (no --require-gpu) and a stand-in report delivers, saying so on the page — as the
local sandbox always does. Empty in production: a host that shows no GPU is held."""
PROVISIONING_BACKEND = env_str("PROVISIONING_BACKEND", "local")
"""Where the host-side steps run: "local" (the sandbox above, for `make run` and the demo)
or "ssh" (the inventory's hosts, each reached at its address with its pinned host key)."""
if PROVISIONING_BACKEND not in ("local", "ssh"):
    raise ImproperlyConfigured('PROVISIONING_BACKEND must be "local" or "ssh"')
PROVISIONING_SSH_KEY = env_str("PROVISIONING_SSH_KEY", "") or ""
"""The operator's private key for the hosts (OpenSSH format; PROVISIONING_SSH_KEY_FILE
names a file holding it). A secret: from the environment only."""
PROVISIONING_SSH_CONNECT_TIMEOUT = env_int("PROVISIONING_SSH_CONNECT_TIMEOUT", 15, minimum=1)
PROVISIONING_REMOTE_DIR = env_str("PROVISIONING_REMOTE_DIR", "/var/lib/gpulots") or ""
"""On each host: the shipped scripts, the benchmark and its reports."""
PROVISIONING_REMOTE_ROOT = env_str("PROVISIONING_REMOTE_ROOT", "/") or ""
"""The root the host-side scripts work under ("/" on a real host: homes in /home)."""
PROVISIONING_REMOTE_ACCOUNTS = env_bool("PROVISIONING_REMOTE_ACCOUNTS", default=True)
"""Create real system accounts on the hosts (off only for a sandboxed test host)."""
PROVISIONING_REMOTE_PYTHON = env_str("PROVISIONING_REMOTE_PYTHON", "python3") or ""
"""The Python (with the environment's PyTorch) that runs the benchmark on a host."""
PROVISIONING_BENCHMARK_ARGS = shlex.split(env_str("PROVISIONING_BENCHMARK_ARGS", "") or "")
"""Extra arguments for the benchmark on SSH hosts (e.g. "--quick" on a CPU test host)."""

# --- REST API: personal bearer tokens, JSON only, errors with stable codes, throttled. ---
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["api.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.BoundedJSONParser"],
    "DEFAULT_THROTTLE_CLASSES": [
        "api.throttles.TokenRateThrottle",
        "api.throttles.AddressRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "token": env_rate("API_THROTTLE_TOKEN", "120/minute"),
        "address": env_rate("API_THROTTLE_ADDRESS", "300/minute"),
    },
    "EXCEPTION_HANDLER": "api.handler.handle",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
API_TOKENS_PER_USER = env_int("API_TOKENS_PER_USER", 20, minimum=1)
"""How many active (unrevoked) API tokens one account may hold."""
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU lots API",
    "DESCRIPTION": "Book lots of two GPUs, pay on-chain, follow the order. "
    "Authenticate with `Authorization: Bearer <token>` (create tokens on your account page).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # An order's status appears in the order and in its extensions: one enum, by name.
    "ENUM_NAME_OVERRIDES": {"OrderStatusEnum": "reservations.models.Order.STATUS_CHOICES"},
}

# --- Logging: one line per event; JSON for log shippers. ---
LOG_LEVEL = (env_str("LOG_LEVEL", "INFO") or "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "infra.logs.JsonFormatter"},
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if env_str("LOG_FORMAT", "text") == "json" else "text",
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}

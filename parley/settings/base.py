"""Settings shared by every environment, read from the environment.

With no ``DATABASE_URL`` and no ``REDIS_URL`` this is the *embedded default*
(docs/design.md#processes): a SQLite file, Celery on an in-memory broker served by a worker
thread inside the process, and the in-memory Channels layer.
"""

import hashlib
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import environ
from cryptography.fernet import Fernet
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()

DEBUG = env.bool("DEBUG", default=False)
# The embedded default's key is public (it is in this file): parley.settings.production refuses it.
EMBEDDED_SECRET_KEY = "parley-embedded-default-not-for-production"
SECRET_KEY = env.str("SECRET_KEY", default=EMBEDDED_SECRET_KEY)
# Keys of the secrets stored encrypted (parley.encryption): Fernet keys (32 bytes, url-safe base64),
# comma-separated, the first encrypting new values, every one reading. The embedded default's is
# public too: parley.settings.production refuses it.
EMBEDDED_FIELD_ENCRYPTION_KEY = "cGFybGV5LWVtYmVkZGVkLWRlZmF1bHQtcHVibGljISE="
FIELD_ENCRYPTION_KEYS = env.list("FIELD_ENCRYPTION_KEYS", default=[EMBEDDED_FIELD_ENCRYPTION_KEY])
if not FIELD_ENCRYPTION_KEYS:
    raise ImproperlyConfigured("FIELD_ENCRYPTION_KEYS is empty: give at least one key.")
for _position, _key in enumerate(FIELD_ENCRYPTION_KEYS, start=1):
    try:
        Fernet(_key)
    except ValueError:
        # The key itself is not shown: it is a secret, and may be nearly right.
        raise ImproperlyConfigured(
            f"FIELD_ENCRYPTION_KEYS: key {_position} is not a Fernet key (32 bytes in url-safe base64); "
            "make one with: python -c "
            '"from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"'
        ) from None
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]", "testserver"])
PUBLIC_BASE_URL = env.str("PUBLIC_BASE_URL", default="http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_htmx",
    "allauth",
    "allauth.account",
    "csp",
    "parley",
    "agents",
    "negotiations",
    "exchange",
    "representative",
    "a2a_gateway",
    "api",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # The Content-Security-Policy header (CONTENT_SECURITY_POLICY below) on every response, those the
    # middleware below answers itself included.
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # ETags on GET responses, and 304 to a matching If-None-Match (the host API's reads).
    "django.middleware.http.ConditionalGetMiddleware",
    # A form too large to read is answered with its page and a message, not a bare 400 (before the
    # CSRF check reads it; after the session, authentication and messages, whose process_request
    # hooks all run before any process_view).
    "parley.middleware.TooLargeFormMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Content Security Policy (django-csp, CSP Level 3): every page loads scripts, styles, fonts and images
# from this origin only; no inline script, style or style attribute runs (templates and our scripts use
# none; htmx's indicator <style> is turned off in templates/base.html), nothing may frame a page, and
# forms post here only. img-src allows data: for the empty favicon (href="data:,") of base.html.
# connect-src: fetch and htmx go to 'self', which CSP Level 3 lets match the live socket's ws:/wss:
# on the same host too; browsers that predate that (Safari before 16) need the socket's origin named,
# PUBLIC_BASE_URL's. The API docs page (api/urls.py) widens its own policy.
_public_origin = urlsplit(PUBLIC_BASE_URL)
LIVE_SOCKET_ORIGIN = f"{'wss' if _public_origin.scheme == 'https' else 'ws'}://{_public_origin.netloc}"
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF, LIVE_SOCKET_ORIGIN],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

ROOT_URLCONF = "parley.urls"
ASGI_APPLICATION = "parley.asgi.application"

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
            ],
        },
    },
]

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'parley.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded worker thread and the web server write concurrently: take the
    # write lock at BEGIN and wait for it rather than failing with "locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {"transaction_mode": "IMMEDIATE", "timeout": 30, "init_command": "PRAGMA journal_mode=WAL;"}
    )
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=0)
    if pool_size := env.int("DATABASE_POOL_SIZE", default=0):
        # Django's connection pool (psycopg_pool): a connection closed after a task or request goes
        # back to the pool, open and warm, instead of to Postgres. With health checks on, the pool
        # checks a connection before lending it and replaces one Postgres dropped.
        DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {"min_size": 1, "max_size": pool_size}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django's standard four: not like the username or e-mail, at least 8 characters, not one of 20,000
# common passwords, not all digits. Sign-up, password change and reset all check them.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": f"django.contrib.auth.password_validation.{name}"}
    for name in (
        "UserAttributeSimilarityValidator",
        "MinimumLengthValidator",
        "CommonPasswordValidator",
        "NumericPasswordValidator",
    )
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    # django-allauth's: log in by username or e-mail address.
    "allauth.account.auth_backends.AuthenticationBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-gb"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Where collectstatic gathers the static files a deployment serves (the container image's /app/staticfiles).
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(BASE_DIR / "staticfiles")))
# Static files straight from the apps' folders, with no collectstatic (parley.asgi): the embedded
# default and the tests. Production serves the collected ones instead (ServeStatic).
SERVE_STATIC_FROM_APPS = True

REDIS_URL = env.str("REDIS_URL", default="")
EMBEDDED = not REDIS_URL

CHANNEL_LAYERS: dict[str, dict[str, Any]]
if EMBEDDED:
    CELERY_BROKER_URL = "memory://localhost/"
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
else:
    CELERY_BROKER_URL = REDIS_URL
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # channels-redis waits for a socket's next message in 5-second BZPOPMIN blocks, and
            # redis-py 8 gives up on any read after 5 s by default: an idle socket's consumer would
            # die (redis-py#4091). A read may take the block and then some; a dead Redis still fails.
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}]},
        }
    }

# E-mail (sign-up verification, password reset, invitations). EMAIL_URL names the server
# (django-environ: smtp://user:password@host:25, smtp+tls://…:587, smtp+ssl://…:465, consolemail://,
# filemail://). Unset, the embedded default writes each message to a file in EMAIL_FILE_PATH (default
# sent-mail/ in the checkout), where a local user reads it; anything else prints it on the console.
EMAIL_URL = env.str("EMAIL_URL", default="filemail://" if EMBEDDED else "consolemail://")
vars().update(env.email_url_config(EMAIL_URL))
EMAIL_FILE_PATH = env.str("EMAIL_FILE_PATH", default=str(BASE_DIR / "sent-mail"))
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="Parley <parley@localhost>")

# Accounts (django-allauth): sign-up, e-mail verification, password reset, login rate limits.
ACCOUNT_ADAPTER = "parley.accounts.AccountAdapter"
ACCOUNT_FORMS = {
    "login": "parley.accounts.LoginForm",
    "signup": "parley.accounts.SignupForm",
    "reset_password": "parley.accounts.ResetPasswordForm",
}
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
# mandatory: an account logs in once it has confirmed its e-mail address (the invited address of an
# accepted invitation counts as confirmed); optional or none for a deployment that cannot send mail.
ACCOUNT_EMAIL_VERIFICATION = env.str("ACCOUNT_EMAIL_VERIFICATION", default="mandatory")
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
ACCOUNT_SESSION_REMEMBER = True
ACCOUNT_EMAIL_SUBJECT_PREFIX = "[Parley] "
# Whether anyone may sign up (SIGNUP_OPEN). Closed, only people holding an invitation do, and the first
# account of a deployment that has none yet (parley.accounts.AccountAdapter).
ACCOUNT_SIGNUP_ENABLED = env.bool("SIGNUP_OPEN", default=True)
# Days an invitation link stays valid.
INVITATION_DAYS = env.int("INVITATION_DAYS", default=7)

CELERY_TASK_IGNORE_RESULT = True
# Every task: a worker killed mid-task leaves it to run again (tasks are idempotent).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# On Redis, a task whose worker died is handed out again once it has been out this long (seconds):
# longer than the longest task (a negotiation's pump), or a task still running would run twice.
# Tasks out that long are looked for every restore interval (kombu's default looks every 100 s).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=3600),
    "unacked_restore_interval": env.float("CELERY_RESTORE_INTERVAL", default=10.0),
    "unacked_restore_throttle": 1,
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Where `celery -A parley beat` keeps the periodic tasks' last run times (shelve files: the name plus
# suffixes). Unless set: outside the checkout, in the system's temporary directory, named after the
# checkout's path, so two checkouts' beats on one machine keep apart. Beat makes its directory, or
# refuses to start naming this setting (parley.celery.ScheduleFileScheduler).
CELERY_BEAT_SCHEDULE_FILENAME = env.str(
    "CELERY_BEAT_SCHEDULE_FILENAME",
    default=str(
        Path(tempfile.gettempdir())
        / f"parley-celerybeat-schedule-{hashlib.sha256(str(BASE_DIR).encode()).hexdigest()[:12]}"
    ),
)
# Work whose broker message was lost (Redis restarted or flushed) is sent again from Postgres: every
# SWEEP_INTERVAL seconds, each app's sweep finds the runs, approved tools, delegates' results,
# negotiation pumps and exchange sends that should be moving and have not moved for
# SWEEP_STALLED_AFTER seconds. That bound must outlast any task in flight that writes nothing until it
# ends — a run step (time limit 330 s), one outbound turn (a move's model call, then up to
# A2A_SEND_TIMEOUT for the answer) — or such work would be sent twice (it is then applied once, but
# a step's model call may be paid twice).
SWEEP_INTERVAL = env.float("SWEEP_INTERVAL", default=60.0)
SWEEP_STALLED_AFTER = env.float("SWEEP_STALLED_AFTER", default=900.0)
# Periodic tasks; `celery -A parley beat` sends them (the embedded default runs beat in-process).
CELERY_BEAT_SCHEDULE = {
    "expire-runs": {"task": "agents.tasks.runs_expire_due", "schedule": 60.0},
    "resend-stalled-agent-work": {"task": "agents.tasks.stalled_work_resend", "schedule": SWEEP_INTERVAL},
    "resend-stalled-pumps": {"task": "negotiations.tasks.stalled_pumps_resend", "schedule": SWEEP_INTERVAL},
    "resend-stalled-exchanges": {"task": "exchange.tasks.stalled_sends_resend", "schedule": SWEEP_INTERVAL},
    # A2A Tasks whose web process stopped mid-turn get the answer that process would have given.
    "answer-abandoned-a2a-tasks": {
        "task": "a2a_gateway.tasks.abandoned_tasks_answer",
        "schedule": SWEEP_INTERVAL,
    },
    "expire-idempotency-keys": {"task": "api.tasks.idempotency_keys_expire", "schedule": 3600.0},
    # Webhook deliveries whose scheduled attempt never ran (a lost broker message) are sent again.
    "webhooks-overdue": {"task": "parley.tasks.webhook_deliveries_overdue", "schedule": 300.0},
    # Agent Exchange requests that expired unrun: their tokens and protected values are deleted.
    "expire-prepared-exchanges": {"task": "exchange.tasks.prepared_expire", "schedule": 300.0},
}
# Threads in the embedded worker: one agent step plus a negotiation per target at once.
PARLEY_EMBEDDED_WORKER_THREADS = env.int("PARLEY_EMBEDDED_WORKER_THREADS", default=8)

# A2A public endpoint.
# Threads of a web process that run inbound turns (a2a_gateway.executor.turn_pool): that many turns
# wait on their models at once. Each holds a database connection while it runs.
A2A_TURN_THREADS = env.int("A2A_TURN_THREADS", default=32)
# Threads of a web process that run the gateways' database work (parley.gateway_threads), each
# keeping one database connection: requests at once share them, each request on one.
GATEWAY_THREADS = env.int("GATEWAY_THREADS", default=8)
A2A_MAX_BODY_BYTES = env.int("A2A_MAX_BODY_BYTES", default=64 * 1024)
# Seconds our client waits for a counterparty's answer to one move (seed default: 180 s).
A2A_SEND_TIMEOUT = env.float("A2A_SEND_TIMEOUT", default=180.0)
A2A_CARD_TIMEOUT = env.float("A2A_CARD_TIMEOUT", default=30.0)
# Inbound keys are stored as HMAC-SHA256 of their secret under this key; changing it voids them all.
# Keys every stored API key and inbound key hash (parley.keys); A2A_INBOUND_KEY_SECRET is its former name.
KEY_HASH_SECRET = env.str("KEY_HASH_SECRET", default=env.str("A2A_INBOUND_KEY_SECRET", default=SECRET_KEY))
# Headers our own proxy sets to the caller's address (first present wins; X-Forwarded-For: its last
# entry), telling anonymous callers apart. Empty: the TCP peer's address. See a2a_gateway.auth.
A2A_TRUSTED_PROXY_HEADERS = env.list("A2A_TRUSTED_PROXY_HEADERS", default=[])
# The per-caller rate limit's sliding window, seconds: Agent.rate_limit messages per window.
A2A_RATE_LIMIT_WINDOW = env.float("A2A_RATE_LIMIT_WINDOW", default=60.0)
# How stale a live socket's view of its user and memberships may get: re-read at most this often (s).
LIVE_RECHECK_SECONDS = env.float("LIVE_RECHECK_SECONDS", default=1.0)
# Push notifications go only to URLs whose host resolves to public addresses, unless this allows
# private, loopback and link-local ones too (a test receiver on loopback).
A2A_PUSH_ALLOW_PRIVATE = env.bool("A2A_PUSH_ALLOW_PRIVATE", default=False)

# The host's webhooks (parley.webhooks). Seconds one delivery attempt may take in all (at most 60).
WEBHOOK_TIMEOUT = env.float("WEBHOOK_TIMEOUT", default=10.0)
# A failed attempt is retried after WEBHOOK_BACKOFF_BASE seconds x 2^(attempts-1) (or a longer
# Retry-After on 429/503), at most WEBHOOK_BACKOFF_MAX (kept under CELERY_VISIBILITY_TIMEOUT), until
# WEBHOOK_RETRY_FOR seconds after the delivery was made or last re-sent; then it has failed.
WEBHOOK_BACKOFF_BASE = env.float("WEBHOOK_BACKOFF_BASE", default=30.0)
WEBHOOK_BACKOFF_MAX = env.float("WEBHOOK_BACKOFF_MAX", default=1800.0)
WEBHOOK_RETRY_FOR = env.float("WEBHOOK_RETRY_FOR", default=24 * 3600.0)
# Webhook URLs must resolve to public addresses and use https, unless these allow private,
# loopback and link-local addresses, and plain http (a receiver on loopback in tests).
WEBHOOKS_ALLOW_PRIVATE = env.bool("WEBHOOKS_ALLOW_PRIVATE", default=False)
WEBHOOKS_ALLOW_HTTP = env.bool("WEBHOOKS_ALLOW_HTTP", default=False)

# Host operations (tools that call a host's URL) must use HTTPS unless this allows plain HTTP,
# as on loopback in tests.
PARLEY_HOST_OPERATIONS_ALLOW_HTTP = env.bool("PARLEY_HOST_OPERATIONS_ALLOW_HTTP", default=False)

# URLs a tenant or a counterparty chose (evaluation hooks, model endpoints, host operations,
# counterparties' cards and endpoints, Agent Exchange) must resolve to public addresses
# (parley.outbound), unless this allows private, loopback and link-local ones: on the embedded
# default, whose demo counterparties and local models (Ollama at 127.0.0.1:11434) are on loopback.
OUTBOUND_ALLOW_PRIVATE = env.bool("OUTBOUND_ALLOW_PRIVATE", default=EMBEDDED)
# Receipt checks one client address may make a minute, at POST /api/v1/receipts/verify and the
# /receipts/verify/ page together: each fetches the key sets a stranger's receipt names.
RECEIPT_CHECKS_PER_MINUTE = env.int("RECEIPT_CHECKS_PER_MINUTE", default=30)
# The proof of an agent's host name (agents.services.host_names): the name servers asked for its TXT
# record ("IP" or "IP:port", "[IPv6]:port"; empty: the system's, /etc/resolv.conf), the port its HTTP
# token is fetched on (ACME's http-01 port; another only in tests, as Pebble's httpPort) and how
# long each of the two checks may take, seconds.
HOST_NAME_DNS_SERVERS = env.list("HOST_NAME_DNS_SERVERS", default=[])
HOST_NAME_HTTP_PORT = env.int("HOST_NAME_HTTP_PORT", default=80)
HOST_NAME_CHECK_TIMEOUT = env.float("HOST_NAME_CHECK_TIMEOUT", default=10.0)

# LOG_FORMAT=plain (the default, for people) or json (one object per line, for log shippers). In
# both, records logged inside parley.telemetry.log_context carry its ids (run_id, tenant_id…) and
# the current span's trace_id/span_id: JSON fields, or " key=value" pairs after the message.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"log_context": {"()": "parley.telemetry.LogContextFilter"}},
    "formatters": {
        "plain": {
            "()": "logging.Formatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s%(_log_ids)s",
            # For a record that reaches this formatter without passing the filter.
            "defaults": {"_log_ids": ""},
        },
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(levelname)s %(name)s %(message)s",
            "timestamp": True,
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": env.str("LOG_FORMAT", default="plain"),
            "filters": ["log_context"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="WARNING")},
}
# Celery's worker would otherwise replace the root handlers above, and with them the filter.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# The host REST API (/api/v1/): tenant API keys, one error body, cursor pages, an OpenAPI schema.
# Reverse proxies in front of the web processes whose X-Forwarded-For entries are trusted for the
# client's address (login and receipt-check rate limits); 0: the connection's own address, since a
# client can write any X-Forwarded-For it likes.
TRUSTED_PROXY_COUNT = env.int("TRUSTED_PROXY_COUNT", default=0)
ALLAUTH_TRUSTED_PROXY_COUNT = TRUSTED_PROXY_COUNT
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["api.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["api.permissions.HasScope"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.parsers.StrictJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "api.pagination.NewestFirst",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "api.schema.ParleySchema",
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Parley host API",
    "DESCRIPTION": (
        "Everything the dashboard does, for a host's backend: configure agents, start runs, answer "
        "their questions, follow negotiations and settlements, and receive events as webhooks. "
        "Authenticate with a tenant API key: `Authorization: Bearer <prefix>.<secret>`. Every POST "
        'takes an `Idempotency-Key` header; errors answer `{"error": {"code", "message", '
        '"fields"}}`.'
    ),
    "VERSION": "1.0.0",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Choice sets that share a field name (status, kind) or a set under several names get one name each.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "agents.models.Run.Status",
        "QuestionKindEnum": "agents.models.Question.Kind",
        "QuestionStatusEnum": "api.runs.QuestionStatus",
        "AttemptKindEnum": "api.runs.ATTEMPT_KINDS",
        "LimitKindEnum": "api.runs.LIMIT_KINDS",
        "NegotiationStatusEnum": "negotiations.models.Negotiation.Status",
        "TurnSideEnum": "negotiations.models.Turn.Side",
        "WebhookDeliveryStatusEnum": "parley.models.WebhookDelivery.Status",
        "WebhookEventTypeEnum": "parley.models.WebhookEventType",
    },
}
# Seconds a response to a request with an Idempotency-Key is kept and replayed.
IDEMPOTENCY_KEY_TTL = env.int("IDEMPOTENCY_KEY_TTL", default=24 * 3600)

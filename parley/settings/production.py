"""Production settings: everything that must be secret or explicit comes from the environment.

Start every process with ``DJANGO_SETTINGS_MODULE=parley.settings.production``.
Settings that cannot be right by default are refused at start-up, naming the
variable: ``SECRET_KEY`` unset, the embedded default's public key, or one
Django's deployment check (``check --deploy``, security.W009) calls weak: shorter
than 50 characters, fewer than 5 distinct ones, or starting ``django-insecure-``
(the mark of a key ``startproject`` made for development); ``KEY_HASH_SECRET``
set to that public key; ``FIELD_ENCRYPTION_KEYS`` unset or holding the embedded
default's public key; ``OUTBOUND_ALLOW_PRIVATE`` with open sign-up. Every
setting is in docs/settings.md.
"""

import os

from django.core.exceptions import ImproperlyConfigured

from parley.settings.base import *  # noqa: F403
from parley.settings.base import (
    ACCOUNT_SIGNUP_ENABLED,
    EMBEDDED_FIELD_ENCRYPTION_KEY,
    EMBEDDED_SECRET_KEY,
    FIELD_ENCRYPTION_KEYS,
    KEY_HASH_SECRET,
    MIDDLEWARE,
    OUTBOUND_ALLOW_PRIVATE,
    REDIS_URL,
    env,
)

SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY or SECRET_KEY == EMBEDDED_SECRET_KEY:
    raise ImproperlyConfigured(
        "SECRET_KEY must be set to a secret of your own in production (the embedded default's key is public)."
    )
if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5:
    raise ImproperlyConfigured("SECRET_KEY is too weak: use at least 50 random characters.")
if SECRET_KEY.startswith("django-insecure-"):
    raise ImproperlyConfigured(
        "SECRET_KEY starts with 'django-insecure-', Django's mark of a development key: "
        "use a secret of your own."
    )
if "FIELD_ENCRYPTION_KEYS" not in os.environ:
    raise ImproperlyConfigured(
        "FIELD_ENCRYPTION_KEYS must be set in production: the keys that encrypt stored secrets "
        "(the embedded default's key is public)."
    )
if EMBEDDED_FIELD_ENCRYPTION_KEY in FIELD_ENCRYPTION_KEYS:
    raise ImproperlyConfigured(
        "FIELD_ENCRYPTION_KEYS must not hold the embedded default's public key: re-encrypt what it "
        "encrypted under a key of your own first (README, Running it for real)."
    )
if KEY_HASH_SECRET == EMBEDDED_SECRET_KEY:
    raise ImproperlyConfigured("KEY_HASH_SECRET must not be the embedded default's public key.")
DEBUG = False
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# HTTPS only. The reverse proxy terminates TLS and says so in X-Forwarded-Proto; a request that came
# over plain http is redirected to https, but for /health, which a container's health check asks over
# plain http from inside its network (with a Host of ALLOWED_HOSTS, as every request). Browsers are
# told to use https alone (HSTS) for SECURE_HSTS_SECONDS (0 turns it off), on this host's subdomains
# too, and the header allows the host onto the browsers' preload list (someone must still submit it):
# what Django's deployment check asks.
SECURE_SSL_REDIRECT = True
SECURE_REDIRECT_EXEMPT = [r"^health$"]
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)

# Webhooks go to public addresses over https only, whatever the environment says.
WEBHOOKS_ALLOW_PRIVATE = False
WEBHOOKS_ALLOW_HTTP = False
# A host name's HTTP token is fetched on port 80 only, as ACME's http-01: on another port, anyone who
# runs a service on the host (a shared machine's user) could prove the host's name.
HOST_NAME_HTTP_PORT = 80
# Tenants' URLs go to public addresses only unless the deployment says otherwise, even on the embedded
# default (whose "true" is for the demo's loopback peers). A single-tenant deployment may allow private
# ones (a model server on its own network); with open sign-up every stranger's organisation could then
# reach that network, so the two are refused together.
if "OUTBOUND_ALLOW_PRIVATE" not in os.environ:
    OUTBOUND_ALLOW_PRIVATE = False
if OUTBOUND_ALLOW_PRIVATE and ACCOUNT_SIGNUP_ENABLED:
    raise ImproperlyConfigured(
        "OUTBOUND_ALLOW_PRIVATE=true lets every organisation's URLs reach this deployment's own network, "
        "and SIGNUP_OPEN lets anyone make an organisation: set SIGNUP_OPEN=false to allow private "
        "addresses, or OUTBOUND_ALLOW_PRIVATE=false."
    )

# Shared by every web process, so django-allauth's login and sign-up rate limits count across them;
# while Redis is down it is an empty cache that keeps nothing, so logging in still works (parley.cache).
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "parley.cache.TolerantRedisCache", "LOCATION": REDIS_URL}}

# Static files as collected by `manage.py collectstatic` (the container image does it when it is built),
# under names that carry a hash of their content, compressed, and served by ServeStatic (WhiteNoise's
# ASGI-native successor) from every web process with a year's caching: no separate file server.
SERVE_STATIC_FROM_APPS = False
MIDDLEWARE = [MIDDLEWARE[0], "servestatic.middleware.ServeStaticMiddleware", *MIDDLEWARE[1:]]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "servestatic.storage.CompressedManifestStaticFilesStorage"},
}

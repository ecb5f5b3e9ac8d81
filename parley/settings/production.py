"""Production settings: everything that must be secret or explicit comes from the environment."""

from parley.settings.base import *  # noqa: F403
from parley.settings.base import REDIS_URL, env

SECRET_KEY = env.str("SECRET_KEY")
DEBUG = False
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Webhooks go to public addresses over https only, whatever the environment says.
WEBHOOKS_ALLOW_PRIVATE = False
WEBHOOKS_ALLOW_HTTP = False

# Shared by every web process, so django-allauth's login and sign-up rate limits count across them.
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}

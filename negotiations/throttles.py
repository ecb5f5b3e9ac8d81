"""How often one client address may check receipts, at the API and on the page alike.

A receipt check (:func:`negotiations.services.signatures.receipt_check`) is open to anyone and
fetches up to two key sets from the URLs the receipt names, so an address that checks without
pause would have us fetch without pause. DRF's throttle counts the checks in the default cache,
keyed by the client's address (the connection's, or read from ``X-Forwarded-For`` behind
``TRUSTED_PROXY_COUNT`` proxies); the rate is ``RECEIPT_CHECKS_PER_MINUTE``.
"""

from __future__ import annotations

from typing import Any, cast

from django.conf import settings
from django.http import HttpRequest
from rest_framework.throttling import SimpleRateThrottle


class ReceiptCheckThrottle(SimpleRateThrottle):
    """``RECEIPT_CHECKS_PER_MINUTE`` checks a minute per client address, the API's and the page's
    together: the API view names it in ``throttle_classes``, the page asks :meth:`allow_page`.
    After a refusal, ``wait()`` is the seconds until the next check is allowed."""

    scope = "receipt_check"

    def get_rate(self) -> str:
        return f"{settings.RECEIPT_CHECKS_PER_MINUTE}/min"

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def allow_page(self, request: HttpRequest) -> bool:
        """Whether the page may check one more receipt for ``request``'s address (counting it).

        The page is a plain Django view: the throttle reads nothing of a request but its ``META``,
        which a Django request has too, and no view.
        """
        return self.allow_request(cast(Any, request), cast(Any, None))

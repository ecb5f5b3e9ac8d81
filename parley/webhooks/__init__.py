"""The host's webhooks: one module per concern, each importing only those listed above it.

- :mod:`~parley.webhooks.signing` — what is sent (Standard Webhooks): an endpoint's secret, the
  ``webhook-signature``, the bytes of a delivery's body and its timestamps.
- :mod:`~parley.webhooks.endpoints` — the host's endpoints: create, change, rotate the secret,
  delete, and the address policy their URLs must pass.
- :mod:`~parley.webhooks.attempts` — one attempt of a delivery: claim it, POST it, record what
  came of it, and schedule the retry or end the delivery.
- :mod:`~parley.webhooks.fan_out` — which live events are webhook events, and a delivery of each
  to every subscribed endpoint, written with the change.
- :mod:`~parley.webhooks.resend` — the host's resend of a delivery.
- :mod:`~parley.webhooks.sweeps` — the periodic sweep that sends again the deliveries whose
  message was lost.

The host's pages and API over them are :mod:`parley.webhook_views` and :mod:`api.webhooks`; the
Celery tasks are in :mod:`parley.tasks`.
"""

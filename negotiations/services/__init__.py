"""Writes of the negotiation engine: one module per concern, each importing only those listed above it.

- :mod:`~negotiations.services.recording` — what every turn writes: the turn and its event, the
  settlement (the verdict on the record), what deciding a move cost, and the agent's evaluation hook.
- :mod:`~negotiations.services.signatures` — settlements both sides sign: which move carries which
  signature, signing ours, checking theirs, and what the settlement records of it; receipts.
- :mod:`~negotiations.services.parking` — a negotiation parked on its party with a question, the
  party's answer (standing guidance), and the hooks told of an answered inbound negotiation.
- :mod:`~negotiations.services.batches` — the agent loop's ``negotiate`` and ``answer`` tools: open
  and answer a batch of negotiations, stop them with their run, and the event each reports to its
  batch, whose last report hands the digest to the waiting run.
- :mod:`~negotiations.services.outbound` — the outbound pump: one Celery task per negotiation takes
  turns (decide, store the move, send it or find it on their Task, record) until an event.
- :mod:`~negotiations.services.inbound` — inbound turns, as the A2A gateway hands over each
  counterparty move: admission, resends, our reply, their cancel, and the reply decided once the party
  answered.
- :mod:`~negotiations.services.sweeps` — the periodic sweep that pumps again the negotiations whose
  pump's message was lost.
"""

"""Writes of the agent loop: start, step, cancel and end runs; complete, answer and approve tool calls.

One module for each part of the loop; each imports only those above it:

* :mod:`~agents.services.threads` — the thread: appending messages, reading them back for the model;
* :mod:`~agents.services.runs` — a run from start to end: intents, ``run_start`` and its limits,
  who may act, ``run_cancel``, ``run_expire``, what follows an end; the errors (``RunError`` …);
* :mod:`~agents.services.tool_calls` — preparing and running a step's tool calls, and the results
  that arrive later (``tool_call_complete``);
* :mod:`~agents.services.steps` — ``run_step``: the model call, applying its reply, the run's
  budget and usage;
* :mod:`~agents.services.questions` — answering questions, deciding approvals, running approved
  tools;
* :mod:`~agents.services.delegation` — agents calling agents as tools;
* :mod:`~agents.services.sweeps` — the periodic sweeps: deadlines, work whose message was lost.

Every step is written in one transaction before the next is enqueued (:mod:`~agents.services.steps`).
Work is handed to workers after the commit (:func:`parley.celery.enqueue_on_commit`); a message the
broker lost is sent again by :func:`~agents.services.sweeps.stalled_work_resend`, the periodic sweep
that reads from Postgres what should be moving and has not.

Lock order, everywhere: the run's row, then its intent's row.
"""

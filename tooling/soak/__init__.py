"""The soak: the whole product under load and faults, then proof that nothing
was lost, nothing overspent and every micro-unit reconciles.

``python manage.py soak [--minutes 5]`` (``tooling/soak/command.py``)
runs it; the parts live here:

* ``cluster`` — the processes, all on loopback: a private Redis as the Celery
  broker (append-only file, so it can be stopped and started without losing
  queued batches) — or, with ``--broker-url amqp://...``, a relay
  (``relay``) to a RabbitMQ the soak shares, stopped in place of the server —
  three simulator nodes (realistic profile), two gateway
  processes, two Celery workers and beat; and the faults done to them.
* ``scenario`` — three organizations (postpaid, prepaid, postpaid with caps),
  sub-accounts and keys with caps, allowlists and rate limits, shared system
  prompts.
* ``traffic`` — the clients: closed-loop virtual clients in steps of
  concurrency, the three protocols, plain and streamed, some disconnecting
  mid-stream; every answer a client saw is kept (request id, status, timing).
* ``checks`` — after the pipeline drained: call records against the answers,
  costs against rollups, invoice preview and ledger, caps and balances, 5xx,
  revocation, per-step figures.
"""

"""The gateway's hot path as a pipeline of stages, one module each.

In call order (``gateway_bridge.gateway.Gateway.handle`` composes them):

    route.py     method + path → protocol, endpoint, action, model in the path
    auth.py      the key, the client's address (trusted proxies), allowlist, expiry
    body.py      read with the size limit, JSON, the protocol adapter's parse_call
    attribution.py  the call's tags and end user (limits, required tag keys)
    fair.py      large bodies: per-organization slots before the read, validated
                 in a parse worker process before the loop parses them
    admit.py     model rules, fallback chain, budget, worst case (one discount
                 rule), reservation and rate limits; settle afterwards
    cached.py    answer from the response cache
    forward.py   route to a node, retry while nothing reached the client
                 (each try's path and body: channel_request.py)
    relay.py     plain and streamed answers, disconnects, partial billing, errors
    local.py     answers without a node: model lists, token counts

``call.py`` holds the per-call state (``Call``) and the signals between
stages; ``adapters.py`` the protocol adapters by name. Stages are plain
functions: those that need the gateway's shared parts (state, router,
limits, caches, metrics) take the ``Gateway`` as their first argument.
"""

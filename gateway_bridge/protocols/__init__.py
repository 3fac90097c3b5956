"""The protocol adapters: each client protocol (``openai``, ``anthropic``,
``gemini``) is a package of ``request`` (validation of the client's body, with
the vendor's field-path error messages), ``translate`` (the client's request →
the node's OpenAI-protocol body and the ``CallRequest``), ``answer`` (plain
answers and stream framing back in the client's protocol) and ``errors`` (the
protocol's error body and status). What they share: ``base`` (``CallRequest``,
``GatewayError``, error kinds, ``ResponseAdapter``), ``checks`` (request checks
that do not depend on a vendor's wording) and ``estimate`` (one prompt estimate
and one affinity prefix, read from the node's body, for every protocol).
"""

"""The HTTP front door (``cardstream gateway``): a stateless aiohttp service that stores an
image as a claim check, produces its UploadEvent and answers with the committed
VerificationResult, plus a web page over the same API.

Modules: :mod:`~streams.gateway.settings` (``CARDSTREAM_GATEWAY__*``), :mod:`~streams.gateway.keys`
(API keys per client), :mod:`~streams.gateway.limits` (rate limits, the workers' backlog),
:mod:`~streams.gateway.uploads` (a POST without HTTP: checks, claim check, event),
:mod:`~streams.gateway.results` (the results tail, cache and waits), :mod:`~streams.gateway.app`
(routes, middleware, the servers), :mod:`~streams.gateway.metrics`, :mod:`~streams.gateway.errors`;
the page is ``static/index.html``.
"""

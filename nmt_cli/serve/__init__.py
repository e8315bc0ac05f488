"""``nmt serve``: a translation service over HTTP, with a web page, for any engine with the Translator interface.

Modules, each with one job: :mod:`.settings` (limits and options), :mod:`.model` (the
engine interface and loading), :mod:`.batcher` (micro-batching in a worker thread),
:mod:`.service` (request rules and answers), :mod:`.alignment` (word links and soft
matrix of a translation), :mod:`.schemas` (request/response bodies), :mod:`.middleware`
and :mod:`.metrics` (body limit, request log, Prometheus), :mod:`.app` (routes) and
:mod:`.server` (uvicorn and signals). FastAPI, uvicorn and prometheus_client come with
the ``serve`` extra: ``pip install 'nmt-cli[serve]'``.
"""

"""`llama serve --ray`: the same engine and the same HTTP API as a Ray Serve application on a
Ray cluster (docs/scaleout.md). A driver beside `http/` and the CLI: nothing in core/ knows it.

- `request`: what the ingress sends a replica (one HTTP request, its routing text, a pin)
- `routing_key`, `affinity`: the routing text of a request body; which replica holds its
  longest prefix, and the ranking that falls back to the least-loaded replica (pure)
- `router`: that ranking on Ray Serve's public `RequestRouter` API; `local_routers`: the
  routers of a process (the ingress's list of replicas)
- `replica`: one engine per replica, the whole Quart app run in-process per request
  (`asgi_call`: one request through an ASGI app, its messages as they come)
- `ingress`: the ASGI app at the Serve proxy: forwards, retries, aggregates
- `aggregate`: /health, /props, /slots, /metrics, /models merged over the replicas (pure)
- `models`, `models_ingress`: router mode (`--models-dir`/`--models-preset`): one engine
  deployment per model, and an ingress that answers as llama-server's router, forwarding a
  request to the Forwarder of the model it names
- `deploy`: connect to the cluster, build the application, run it until a signal

Ray is imported only here: by `router` and `ingress` (when they are imported), `replica`
and `deploy` (inside their functions). The CLI imports `deploy` only when `--ray` is given; Ray
comes with the `ray` extra: `pip install 'llamacli[ray]'`.
"""

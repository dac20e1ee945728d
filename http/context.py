"""What a request handler reaches: the ServerState of the app handling it, and the request's
JSON body. (The state is http/state.py, the settings http/config.py, the model's facts
core/model/loaded.py's ModelInfo.)"""

from __future__ import annotations

from typing import Any

from llamacli.http.state import ServerState


def current_state() -> ServerState:
    """The ServerState of the app handling the current request."""
    from quart import current_app

    state: ServerState = current_app.extensions["llama"]
    return state


async def request_json() -> dict[str, Any]:
    """The request body as a JSON object (400 on anything else)."""
    from quart import request

    from llamacli.http.params import parse_json_body

    raw = await request.get_data(as_text=False)
    return parse_json_body(raw if isinstance(raw, bytes) else raw.encode("utf-8"))

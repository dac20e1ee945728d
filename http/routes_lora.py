"""LoRA adapters: GET /lora-adapters (the loaded adapters and their global scales) and
POST /lora-adapters (set the global scales), as llama-server; and the per-request `lora`
field [{"id", "scale"}] that every generation and embedding request may carry.

Adapters not listed in a POST or in a request's `lora` get scale 0 (llama-server's
construct_lora_list). Unlike llama-server, an unknown id or a malformed entry is a 400
instead of being ignored.
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, request

from llamacli.http import request_models as rm
from llamacli.http.context import current_state
from llamacli.http.params import lora_scales, parse_json
from llamacli.http.sse import json_response

bp = Blueprint("lora", __name__)


def adapters_json(engine: Any) -> list[dict[str, Any]]:
    return [
        {"id": i, "path": a.path, "scale": s, "task_name": a.task_name, "prompt_prefix": a.prompt_prefix}
        for i, (a, s) in enumerate(zip(engine.loras, engine.lora_scales))
    ]


@bp.get("/lora-adapters")
async def get_lora_adapters() -> Response:
    engine, _ = current_state().require()
    return json_response(adapters_json(engine))


@bp.post("/lora-adapters")
async def post_lora_adapters() -> Response:
    st = current_state()
    engine, _ = st.require()
    body = parse_json(await request.get_data(cache=True, as_text=False, parse_form_data=False))
    rm.LORA_ADAPTERS.parse(body)
    scales = lora_scales(body, len(engine.loras))
    await st.blocking(lambda: engine.call(lambda: engine.set_lora_scales(scales)))
    return json_response({"success": True})

"""Built-in chat formats, ported line by line from llama.cpp's ``llm_chat_apply_template``.

Each formatter takes ``(role, content)`` pairs (content already flattened to text) and the
``add_ass`` flag (append the assistant prefix), and returns the prompt text. The names are the
ones ``--chat-template`` accepts (``LLM_CHAT_TEMPLATES`` in src/llama-chat.cpp).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

Turn = tuple[str, str]
Formatter = Callable[[Sequence[Turn], bool], str]

_CXX_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale, as llama-chat.cpp's trim() uses


def trim(text: str) -> str:
    """llama.cpp's ``trim``: strip ASCII whitespace only."""
    return text.strip(_CXX_SPACE)


def _chatml(chat: Sequence[Turn], add_ass: bool) -> str:
    out = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in chat)
    return out + ("<|im_start|>assistant\n" if add_ass else "")


def _mistral_v7(chat: Sequence[Turn], add_ass: bool, space: str) -> str:
    out = []
    for role, content in chat:
        if role == "system":
            out.append(f"[SYSTEM_PROMPT]{space}{content}[/SYSTEM_PROMPT]")
        elif role == "user":
            out.append(f"[INST]{space}{content}[/INST]")
        else:
            out.append(f"{space}{content}</s>")
    return "".join(out)


def _mistral_v1_v3(chat: Sequence[Turn], add_ass: bool, lead: str, trail: str, trim_ass: bool) -> str:
    out, inside = [], False
    for role, content in chat:
        if not inside:
            out.append(f"{lead}[INST]{trail}")
            inside = True
        if role == "system":
            out.append(content + "\n\n")
        elif role == "user":
            out.append(f"{content}{lead}[/INST]")
        else:
            out.append(f"{trail}{trim(content) if trim_ass else content}</s>")
            inside = False
    return "".join(out)


def _llama2(chat: Sequence[Turn], add_ass: bool, system: bool, bos_inside: bool, strip: bool) -> str:
    out, inside = ["[INST] "], True
    for role, raw in chat:
        content = trim(raw) if strip else raw
        if not inside:
            inside = True
            out.append("<s>[INST] " if bos_inside else "[INST] ")
        if role == "system":
            out.append(f"<<SYS>>\n{content}\n<</SYS>>\n\n" if system else content + "\n")
        elif role == "user":
            out.append(content + " [/INST]")
        else:
            out.append(content + "</s>")
            inside = False
    return "".join(out)


def _role_lines(chat: Sequence[Turn], add_ass: bool, fmt: str, ass: str) -> str:
    out = "".join(fmt.format(role=role, content=content) for role, content in chat)
    return out + (ass if add_ass else "")


def _monarch(chat: Sequence[Turn], add_ass: bool) -> str:
    out = "".join(("" if i == 0 else "<s>") + f"{role}\n{content}</s>\n" for i, (role, content) in enumerate(chat))
    return out + ("<s>assistant\n" if add_ass else "")


def _gemma(chat: Sequence[Turn], add_ass: bool) -> str:
    out, system = [], ""
    for role, content in chat:
        if role == "system":
            system += trim(content)  # gemma has no system turn: merged into the next user turn
            continue
        role = "model" if role == "assistant" else role
        out.append(f"<start_of_turn>{role}\n")
        if system and role != "model":
            out.append(system + "\n\n")
            system = ""
        out.append(trim(content) + "<end_of_turn>\n")
    return "".join(out) + ("<start_of_turn>model\n" if add_ass else "")


def _orion(chat: Sequence[Turn], add_ass: bool) -> str:
    out, system = [], ""
    for role, content in chat:
        if role == "system":
            system += content
        elif role == "user":
            out.append("Human: ")
            if system:
                out.append(system + "\n\n")
                system = ""
            out.append(content + "\n\nAssistant: </s>")
        else:
            out.append(content + "</s>")
    return "".join(out)


def _openchat(chat: Sequence[Turn], add_ass: bool) -> str:
    out = []
    for role, content in chat:
        if role == "system":
            out.append(content + "<|end_of_turn|>")
        else:
            out.append(f"GPT4 Correct {role[:1].upper()}{role[1:]}: {content}<|end_of_turn|>")
    return "".join(out) + ("GPT4 Correct Assistant:" if add_ass else "")


def _vicuna(chat: Sequence[Turn], add_ass: bool, orca: bool) -> str:
    out = []
    for role, content in chat:
        if role == "system":
            out.append(f"SYSTEM: {content}\n" if orca else content + "\n\n")
        elif role == "user":
            out.append(f"USER: {content}\n")
        elif role == "assistant":
            out.append(f"ASSISTANT: {content}</s>\n")
    return "".join(out) + ("ASSISTANT:" if add_ass else "")


def _by_role(chat: Sequence[Turn], add_ass: bool, fmts: dict[str, str], ass: str, strip: bool = False) -> str:
    """Formats with one pattern per known role; other roles are dropped, as in llama.cpp."""
    out = []
    for role, content in chat:
        if role in fmts:
            out.append(fmts[role].format(trim(content) if strip else content))
    return "".join(out) + (ass if add_ass else "")


def _prefixed(chat: Sequence[Turn], add_ass: bool, prefix: str, fmt: str, ass: str) -> str:
    out = "".join(fmt.format(role=role, content=content) for role, content in chat)
    return prefix + out + (ass if add_ass else "")


def _minicpm(chat: Sequence[Turn], add_ass: bool) -> str:
    return "".join(f"<用户>{trim(c)}<AI>" if r == "user" else trim(c) for r, c in chat)


def _rwkv_world(chat: Sequence[Turn], add_ass: bool) -> str:
    out = []
    for i, (role, content) in enumerate(chat):
        if role == "system":
            out.append(f"System: {trim(content)}\n\n")
        elif role == "user":
            out.append(f"User: {trim(content)}\n\n")
            if i == len(chat) - 1:
                out.append("Assistant:")
        elif role == "assistant":
            out.append(f"Assistant: {trim(content)}\n\n")
    return "".join(out)


def _granite3(chat: Sequence[Turn], add_ass: bool) -> str:
    out = []
    for role, content in chat:
        out.append(f"<|start_of_role|>{role}<|end_of_role|>")
        if role == "assistant_tool_call":
            out.append("<|tool_call|>")
        out.append(content + "<|end_of_text|>\n")
    return "".join(out) + ("<|start_of_role|>assistant<|end_of_role|>" if add_ass else "")


def _granite4(chat: Sequence[Turn], add_ass: bool) -> str:
    out = []
    for role, content in chat:
        if role == "assistant_tool_call":
            out.append("<|start_of_role|>assistant<|end_of_role|><|tool_call|>")
        else:
            out.append(f"<|start_of_role|>{role}<|end_of_role|>")
        out.append(content + "<|end_of_text|>\n")
    return "".join(out) + ("<|start_of_role|>assistant<|end_of_role|>" if add_ass else "")


def _gigachat(chat: Sequence[Turn], add_ass: bool) -> str:
    has_system = bool(chat) and chat[0][0] == "system"
    out = [f"<s>{chat[0][1]}<|message_sep|>" if has_system else "<s>"]
    for role, content in chat[1 if has_system else 0 :]:
        if role == "user":
            out.append(f"user<|role_sep|>{content}<|message_sep|>available functions<|role_sep|>[]<|message_sep|>")
        elif role == "assistant":
            out.append(f"assistant<|role_sep|>{content}<|message_sep|>")
    return "".join(out) + ("assistant<|role_sep|>" if add_ass else "")


def _yandex(chat: Sequence[Turn], add_ass: bool) -> str:
    fmts = {"user": " Пользователь: {}\n\n", "assistant": " Ассистент: {}\n\n"}
    return _by_role(chat, add_ass, fmts, " Ассистент:[SEP]")


def _bailing_role(role: str) -> str:
    return "HUMAN" if role == "user" else role.upper()


def _bailing(chat: Sequence[Turn], add_ass: bool, think: bool) -> str:
    out = "".join(f"<role>{_bailing_role(r)}</role>{c}" for r, c in chat)
    return out + (("<role>ASSISTANT</role>" + ("<think>" if think else "")) if add_ass else "")


def _bailing2(chat: Sequence[Turn], add_ass: bool) -> str:
    has_system = bool(chat) and chat[0][0] == "system"
    out = "" if has_system else "<role>SYSTEM</role>detailed thinking off<|role_end|>"
    out += "".join(f"<role>{_bailing_role(r)}</role>{c}<|role_end|>" for r, c in chat)
    return out + ("<role>ASSISTANT</role>" if add_ass else "")


def _smolvlm(chat: Sequence[Turn], add_ass: bool) -> str:
    out = ["<|im_start|>"]
    for role, content in chat:
        if role == "system":
            out.append(content + "\n\n")
        elif role == "user":
            out.append(f"User: {content}<end_of_utterance>\n")
        else:
            out.append(f"Assistant: {content}<end_of_utterance>\n")
    return "".join(out) + ("Assistant:" if add_ass else "")


def _dots1(chat: Sequence[Turn], add_ass: bool) -> str:
    out = []
    for role, content in chat:
        if role == "system":
            out.append(f"<|system|>{content}<|endofsystem|>")
        elif role == "user":
            out.append(f"<|userprompt|>{content}<|endofuserprompt|>")
        else:
            out.append(f"<|response|>{content}<|endofresponse|>")
    return "".join(out) + ("<|response|>" if add_ass else "")


def _hunyuan_moe(chat: Sequence[Turn], add_ass: bool) -> str:
    out = []
    for role, content in chat:
        if role == "system":
            out.append(f"<|startoftext|>{content}<|extra_4|>")
        elif role == "assistant":
            out.append(f"{content}<|eos|>")
        else:
            out.append(f"<|startoftext|>{content}<|extra_0|>")
    return "".join(out)


def _gpt_oss(chat: Sequence[Turn], add_ass: bool) -> str:
    out = "".join(
        f"<|start|>{r}<|message|>{c}" + ("<|return|>" if r == "assistant" else "<|end|>") for r, c in chat
    )
    return out + ("<|start|>assistant" if add_ass else "")


def _hunyuan_dense(chat: Sequence[Turn], add_ass: bool) -> str:
    out = []
    for i, (role, content) in enumerate(chat):
        if i == 0 and role == "system":
            out.append(content + "<｜hy_place▁holder▁no▁3｜>")
        if role == "assistant":
            out.append(f"<｜hy_Assistant｜>{content}<｜hy_place▁holder▁no▁2｜>")
        elif role == "user":
            out.append(f"<｜hy_User｜>{content}<｜hy_Assistant｜>")
    return "".join(out)


def _hunyuan_vl(chat: Sequence[Turn], add_ass: bool) -> str:
    out = ["<｜hy_begin▁of▁sentence｜>"]
    for i, (role, content) in enumerate(chat):
        if i == 0 and role == "system":
            out.append(content + "<｜hy_place▁holder▁no▁3｜>")
        elif role == "user":
            out.append(content + "<｜hy_User｜>")
        elif role == "assistant":
            out.append(content + "<｜hy_Assistant｜>")
    return "".join(out)


def _kimi_k2(chat: Sequence[Turn], add_ass: bool) -> str:
    heads = {
        "system": "<|im_system|>system<|im_middle|>",
        "user": "<|im_user|>user<|im_middle|>",
        "assistant": "<|im_assistant|>assistant<|im_middle|>",
        "tool": "<|im_system|>tool<|im_middle|>",
    }
    out = "".join(heads.get(r, "") + c + "<|im_end|>" for r, c in chat)
    return out + ("<|im_assistant|>assistant<|im_middle|>" if add_ass else "")


def _seed_oss(chat: Sequence[Turn], add_ass: bool) -> str:
    out = "".join(f"<seed:bos>{r}\n{trim(c) if r == 'assistant' else c}<seed:eos>" for r, c in chat)
    return out + ("<seed:bos>assistant\n" if add_ass else "")


def _grok2(chat: Sequence[Turn], add_ass: bool) -> str:
    out = []
    for role, content in chat:
        if role == "system":
            out.append(f"System: {trim(content)}<|separator|>\n\n")
        elif role == "user":
            out.append(f"Human: {trim(content)}<|separator|>\n\n")
        elif role == "assistant":
            out.append(f"Assistant: {content}<|separator|>\n\n")
    return "".join(out) + ("Assistant:" if add_ass else "")


def _pangu_embedded(chat: Sequence[Turn], add_ass: bool) -> str:
    names = {"system": "系统", "user": "用户", "assistant": "助手", "tool": "工具", "function": "方法"}
    out = []
    for i, (role, content) in enumerate(chat):
        if i == 0 and role != "system":
            out.append("[unused9]系统：[unused10]")
        if role in names:
            out.append(f"[unused9]{names[role]}：{content}[unused10]")
    return "".join(out) + ("[unused9]助手：" if add_ass else "")


_EXAONE3 = {"system": "[|system|]{}[|endofturn|]\n", "user": "[|user|]{}\n", "assistant": "[|assistant|]{}[|endofturn|]\n"}
_EXAONE_MOE = {r: f"<|{r}|>\n{{}}<|endofturn|>\n" for r in ("system", "user", "assistant", "tool")}

BUILTIN_FORMATTERS: dict[str, Formatter] = {
    "chatml": _chatml,
    "llama2": partial(_llama2, system=False, bos_inside=False, strip=False),
    "llama2-sys": partial(_llama2, system=True, bos_inside=False, strip=False),
    "llama2-sys-bos": partial(_llama2, system=True, bos_inside=True, strip=False),
    "llama2-sys-strip": partial(_llama2, system=True, bos_inside=False, strip=True),
    "mistral-v1": partial(_mistral_v1_v3, lead=" ", trail=" ", trim_ass=False),
    "mistral-v3": partial(_mistral_v1_v3, lead="", trail=" ", trim_ass=True),
    "mistral-v3-tekken": partial(_mistral_v1_v3, lead="", trail="", trim_ass=False),
    "mistral-v7": partial(_mistral_v7, space=" "),
    "mistral-v7-tekken": partial(_mistral_v7, space=""),
    "phi3": partial(_role_lines, fmt="<|{role}|>\n{content}<|end|>\n", ass="<|assistant|>\n"),
    "phi4": partial(_role_lines, fmt="<|im_start|>{role}<|im_sep|>{content}<|im_end|>", ass="<|im_start|>assistant<|im_sep|>"),
    "falcon3": partial(_role_lines, fmt="<|{role}|>\n{content}\n", ass="<|assistant|>\n"),
    "zephyr": partial(_role_lines, fmt="<|{role}|>\n{content}<|endoftext|>\n", ass="<|assistant|>\n"),
    "monarch": _monarch,
    "gemma": _gemma,
    "orion": _orion,
    "openchat": _openchat,
    "vicuna": partial(_vicuna, orca=False),
    "vicuna-orca": partial(_vicuna, orca=True),
    "deepseek": partial(
        _by_role,
        fmts={"system": "{}", "user": "### Instruction:\n{}\n", "assistant": "### Response:\n{}\n<|EOT|>\n"},
        ass="### Response:\n",
    ),
    "deepseek2": partial(
        _by_role,
        fmts={"system": "{}\n\n", "user": "User: {}\n\n", "assistant": "Assistant: {}<｜end▁of▁sentence｜>"},
        ass="Assistant:",
    ),
    "deepseek3": partial(
        _by_role,
        fmts={"system": "{}\n\n", "user": "<｜User｜>{}", "assistant": "<｜Assistant｜>{}<｜end▁of▁sentence｜>"},
        ass="<｜Assistant｜>",
    ),
    "deepseek-ocr": lambda chat, add_ass: "".join(content for _, content in chat),
    "command-r": partial(
        _by_role,
        fmts={
            r: f"<|START_OF_TURN_TOKEN|><|{tok}_TOKEN|>{{}}<|END_OF_TURN_TOKEN|>"
            for r, tok in (("system", "SYSTEM"), ("user", "USER"), ("assistant", "CHATBOT"))
        },
        ass="<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
        strip=True,
    ),
    "llama3": lambda chat, add_ass: "".join(
        f"<|start_header_id|>{r}<|end_header_id|>\n\n{trim(c)}<|eot_id|>" for r, c in chat
    ) + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if add_ass else ""),
    "chatglm3": partial(_prefixed, prefix="[gMASK]sop", fmt="<|{role}|>\n {content}", ass="<|assistant|>"),
    "chatglm4": partial(_prefixed, prefix="[gMASK]<sop>", fmt="<|{role}|>\n{content}", ass="<|assistant|>\n"),
    "glmedge": partial(_prefixed, prefix="", fmt="<|{role}|>\n{content}", ass="<|assistant|>"),
    "minicpm": _minicpm,
    "exaone3": partial(_by_role, fmts=_EXAONE3, ass="[|assistant|]", strip=True),
    "exaone4": partial(_by_role, fmts={**_EXAONE3, "tool": "[|tool|]{}[|endofturn|]\n"}, ass="[|assistant|]", strip=True),
    "exaone-moe": partial(_by_role, fmts=_EXAONE_MOE, ass="<|assistant|>\n", strip=True),
    "rwkv-world": _rwkv_world,
    "granite": _granite3,
    "granite-4.0": _granite4,
    "granite-4.1": _granite4,
    "gigachat": _gigachat,
    "megrez": partial(
        _role_lines, fmt="<|role_start|>{role}<|role_end|>{content}<|turn_end|>", ass="<|role_start|>assistant<|role_end|>"
    ),
    "yandex": _yandex,
    "bailing": partial(_bailing, think=False),
    "bailing-think": partial(_bailing, think=True),
    "bailing2": _bailing2,
    "llama4": lambda chat, add_ass: "".join(
        f"<|header_start|>{r}<|header_end|>\n\n{trim(c)}<|eot|>" for r, c in chat
    ) + ("<|header_start|>assistant<|header_end|>\n\n" if add_ass else ""),
    "smolvlm": _smolvlm,
    "dots1": _dots1,
    "hunyuan-moe": _hunyuan_moe,
    "gpt-oss": _gpt_oss,
    "hunyuan-dense": _hunyuan_dense,
    "hunyuan-vl": _hunyuan_vl,
    "kimi-k2": _kimi_k2,
    "seed_oss": _seed_oss,
    "grok-2": _grok2,
    "pangu-embedded": _pangu_embedded,
    "solar-open": partial(_role_lines, fmt="<|begin|>{role}<|content|>{content}<|end|>", ass="<|begin|>assistant"),
}

# The names `--chat-template` accepts (llama.cpp lists "dots1" only as a detected format).
BUILTIN_NAMES: tuple[str, ...] = tuple(sorted(name for name in BUILTIN_FORMATTERS if name != "dots1"))


def format_builtin(name: str, chat: Sequence[Turn], add_ass: bool) -> str:
    """Render ``chat`` with the built-in format ``name`` (a key of ``BUILTIN_FORMATTERS``)."""
    return BUILTIN_FORMATTERS[name](chat, add_ass)

"""Take docs/web-ui.png: the web UI in headless Chromium (Debian's chromium driven by
Playwright) with a conversation in which the model calls a tool.

    python scripts/ui_screenshot.py                 # canned reply from the test stub (tests/ui_stub.py)
    python scripts/ui_screenshot.py --real          # a real `llama serve` with the demo model

The default shows what the page renders (a folded tool call and its result, Markdown, code,
math, folded reasoning, stats) with canned answers from a stub that also lists tools, so the
picture does not depend on what the small demo model happens to say.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.http_server import LlamaServer  # noqa: E402
from tests.ui_browser import LAUNCH_ARGS, chromium_path  # noqa: E402
from tests.ui_stub import STUB_TOOLS, Reply, StubServer  # noqa: E402

EARLIER = [("What is a palindrome?", "A word that reads the same both ways, like *level*."),
           ("Name three llama facts", "They hum, they spit, and they live about 20 years.")]
QUESTION = "Read palindrome.py, then write a faster palindrome check and say how fast it is."
FILE = "def is_palindrome(word):\n    return list(word) == list(reversed(word))\n"
CALL = Reply(reasoning=["The user wants me to read palindrome.py first."],
             tool_calls=[{"name": "read_file", "arguments": '{"path": "palindrome.py"}'}])
CANNED = Reply(
    reasoning=["It builds two lists. Compare the word with its reverse instead; mention O(n)."],
    pieces=[
        "The file builds two lists. Here is a shorter version that ignores case:\n\n",
        "```python\ndef is_palindrome(word: str) -> bool:\n    w = word.casefold()\n    return w == w[::-1]\n```\n\n",
        "It reverses the string once, so for a word of length $n$ it takes $O(n)$ time and memory.\n",
        "A version that stops early compares pairs from both ends:\n\n",
        "$$\\text{pairs checked} = \\left\\lfloor \\frac{n}{2} \\right\\rfloor$$\n\n",
        "| word | result |\n|---|---|\n| `level` | **True** |\n| `llama` | False |\n",
    ],
    delay=0.01,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real", action="store_true", help="ask a real llama serve (demo model) instead of the stub")
    ap.add_argument("--out", default=str(ROOT / "docs" / "web-ui.png"))
    args = ap.parse_args()
    exe = chromium_path()
    if exe is None:
        print("no chromium: apt-get install chromium", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    with contextlib.ExitStack() as stack:
        server: Any
        if args.real:
            server = stack.enter_context(LlamaServer("-c", "2048", "-np", "1", "--temp", "0"))
            url = server.url + "/"
        else:
            server = stack.enter_context(StubServer("gemma-3-270m-it-Q4_K_M.gguf"))
            server.tools = STUB_TOOLS
            server.tool_results["read_file"] = {"plain_text_response": FILE}
            server.replies.extend([Reply([a], delay=0.0) for _, a in EARLIER] + [CALL, CANNED])
            url = server.url
        p = stack.enter_context(sync_playwright())
        browser = p.chromium.launch(executable_path=exe, args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800}, color_scheme="light")
        page.goto(url)
        page.wait_for_selector("#model-meta:has-text('context')")
        for question in ([q for q, _ in EARLIER] if not args.real else []) + [QUESTION]:
            page.keyboard.press("Control+Shift+O")  # a new chat
            page.fill("#input", question)
            page.press("#input", "Enter")
            page.wait_for_selector("#send:not([hidden])", state="visible", timeout=300_000)
        if not args.real:
            page.click(".tool-call summary >> nth=0")  # the call and its result, unfolded
        page.wait_for_timeout(500)
        page.screenshot(path=args.out)
        browser.close()
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

// Markdown -> sanitised HTML: marked (GFM), highlight.js for code, KaTeX for $..$, $$..$$,
// \(..\) and \[..\]. Model output is untrusted: raw HTML in it is shown as text, never parsed,
// and the whole result then goes through DOMPurify (no script, no event handler, no
// javascript: URL survives); the page's Content-Security-Policy is the last line of defence.

const { marked, DOMPurify, hljs, katex } = window;

export function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function tex(text, displayMode) {
  try {
    return katex.renderToString(text, { displayMode, throwOnError: false, trust: false, strict: "ignore", output: "htmlAndMathml" });
  } catch {
    return `<code>${escapeHtml(text)}</code>`;
  }
}

const mathBlock = {
  name: "mathBlock",
  level: "block",
  start(src) {
    const m = src.match(/\$\$|\\\[/);
    return m ? m.index : undefined;
  },
  tokenizer(src) {
    const m = /^\$\$([\s\S]+?)\$\$/.exec(src) || /^\\\[([\s\S]+?)\\\]/.exec(src);
    if (m) return { type: "mathBlock", raw: m[0], text: m[1].trim() };
    return undefined;
  },
  renderer(token) {
    return `<div class="math-block">${tex(token.text, true)}</div>\n`;
  },
};

const mathInline = {
  name: "mathInline",
  level: "inline",
  start(src) {
    const m = src.match(/\$|\\\(/);
    return m ? m.index : undefined;
  },
  tokenizer(src) {
    // $x$ needs no space just inside the dollars and no digit after ("$5 and $10" stays text)
    const m = /^\$(?!\s)((?:\\.|[^\\$\n])+?)(?<!\s)\$(?!\d)/.exec(src) || /^\\\(([\s\S]+?)\\\)/.exec(src);
    if (m) return { type: "mathInline", raw: m[0], text: m[1] };
    return undefined;
  },
  renderer(token) {
    return tex(token.text, false);
  },
};

const renderer = {
  code(token) {
    const lang = (token.lang || "").trim().split(/\s+/)[0].toLowerCase();
    const body = lang && hljs.getLanguage(lang)
      ? hljs.highlight(token.text, { language: lang, ignoreIllegals: true }).value
      : escapeHtml(token.text);
    return `<div class="code-block"><div class="code-head"><span>${escapeHtml(lang || "text")}</span>` +
      `<button type="button" class="copy-code">Copy</button></div>` +
      `<pre><code class="hljs${lang ? " language-" + escapeHtml(lang) : ""}">${body}</code></pre></div>\n`;
  },
  html(token) {
    return escapeHtml(token.text);
  },
};

const md = new marked.Marked({ gfm: true, breaks: false, renderer, extensions: [mathBlock, mathInline] });

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

const PURIFY = { USE_PROFILES: { html: true, mathMl: true, svg: true }, FORBID_TAGS: ["style", "form", "input", "textarea"], ADD_TAGS: ["semantics", "annotation"], ADD_ATTR: ["target", "encoding"] };

export function renderMarkdown(text) {
  let html;
  try {
    html = md.parse(String(text));
  } catch {
    html = `<p>${escapeHtml(text)}</p>`;
  }
  return DOMPurify.sanitize(html, PURIFY);
}

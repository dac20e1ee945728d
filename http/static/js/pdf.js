// The text of a PDF, extracted in the browser with PDF.js (vendored, pinned: see
// scripts/vendor_js.py), loaded on the first PDF only. The parsing runs in PDF.js's worker
// (same origin, allowed by the page's CSP); eval stays off (the CSP forbids it anyway). Pages
// are separated by a blank line; a PDF without a text layer (a scan) is refused, since the
// model would get nothing from it.

const VENDOR = new URL("../vendor/pdfjs/", import.meta.url);
let pdfjs = null;

async function library() {
  if (!pdfjs) {
    pdfjs = await import(new URL("pdf.min.mjs", VENDOR).href);
    pdfjs.GlobalWorkerOptions.workerSrc = new URL("pdf.worker.min.mjs", VENDOR).href;
  }
  return pdfjs;
}

// Items of a page's text content as lines: PDF.js marks the end of a line with hasEOL.
function pageText(content) {
  let out = "";
  for (const item of content.items) {
    if (typeof item.str !== "string") continue;
    out += item.str;
    if (item.hasEOL) out += "\n";
  }
  return out.replace(/[ \t]+\n/g, "\n").trim();
}

export async function pdfText(bytes, name) {
  const lib = await library();
  const task = lib.getDocument({ data: bytes, isEvalSupported: false, useSystemFonts: false, disableFontFace: true });
  let doc;
  try {
    doc = await task.promise;
  } catch (e) {
    task.destroy();
    throw new Error(`${name}: not a readable PDF (${e.message || e})`);
  }
  try {
    const pages = [];
    for (let i = 1; i <= doc.numPages; i++) {
      const page = await doc.getPage(i);
      pages.push(pageText(await page.getTextContent()));
    }
    const text = pages.join("\n\n").trim();
    if (!text) throw new Error(`${name}: this PDF has no text layer (a scan?); nothing to send`);
    return text;
  } finally {
    task.destroy();
  }
}

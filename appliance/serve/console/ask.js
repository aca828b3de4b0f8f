// Ask: a conversation over POST /v1/chat/completions, streamed; numbered citations open their passage (file,
// page, section, and the original file); the route, the cache layer and the stage timings of each answer.
import { api, ApiError, describe, downloadFile, el, errorBox, getJson, inWords, ms, session } from "./api.js";

export function askView(root) {
  const messages = [];  // the conversation sent with each question (multi-turn)
  let busy = null;  // the AbortController of the answer under way: one question at a time
  const thread = el("div", { class: "thread", "aria-live": "polite" });
  const passage = el("aside", { class: "passage", hidden: true, "aria-label": "Cited passage", tabindex: "-1" });
  const model = el("select", { id: "ask-model" }, el("option", { value: "auto" }, "auto (the router picks)"));
  const input = el("textarea", { id: "ask-input", rows: 2, required: true,
                                 placeholder: "Ask a question about this tenant's documents" });
  const send = el("button", { type: "submit" }, "Ask");
  const form = el("form", { class: "ask", onsubmit: (e) => { e.preventDefault(); ask(); } },
    el("label", { for: "ask-input" }, "Question"), input,
    el("div", { class: "row" }, el("label", { for: "ask-model" }, "Model"), model, send,
       el("button", { type: "button", onclick: reset }, "New conversation")));
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
  });
  root.replaceChildren(el("h2", {}, "Ask"), el("div", { class: "ask-layout" },
    el("div", {}, thread, form), passage));

  function reset() {
    busy?.abort();  // a new conversation: the answer under way belongs to the old one
    busy = null;
    send.disabled = false;
    messages.length = 0;
    thread.replaceChildren();
    passage.hidden = true;
  }

  async function loadModels() {
    try {
      const { data } = await getJson("/v1/models");
      const chosen = model.value;
      model.replaceChildren(...data.map((m) => el("option", { value: m.id },
        m.id === "auto" ? "auto (the router picks)" : `${m.id}${m.root ? ` (${m.root.split("/").pop()})` : ""}` +
          `${m.state !== "up" ? `, ${m.state}` : ""}`)));
      if (data.some((m) => m.id === chosen)) model.value = chosen;
    } catch { /* keep auto: the answer's error will say what is wrong */ }
  }

  async function ask() {
    const question = input.value.trim();
    if (!question || busy) return;  // Enter while an answer streams waits for it
    input.value = "";
    send.disabled = true;
    const mine = busy = new AbortController();
    messages.push({ role: "user", content: question });
    thread.append(el("div", { class: "msg user" }, question));
    const answer = new AnswerView(showPassage);
    thread.append(answer.node);
    try {
      const text = await stream({ model: model.value, messages, stream: true, tenant: session.tenant }, answer,
                                 mine.signal);
      messages.push({ role: "assistant", content: text });
    } catch (err) {
      if (err.name === "AbortError") return;  // stopped on purpose: its conversation is gone already
      messages.pop();  // the question stays on screen but is not history: it had no answer
      answer.fail(err);
    } finally {
      if (busy === mine) {
        busy = null;
        send.disabled = false;
        input.focus();
      }
    }
  }

  function showPassage(source) {
    const where = [source.file, source.page ? `page ${source.page}${source.page_end && source.page_end !==
      source.page ? `–${source.page_end}` : ""}` : null, source.section ? source.section.join(" › ") : null]
      .filter(Boolean).join(", ");
    passage.replaceChildren(
      el("button", { type: "button", class: "close", onclick: () => { passage.hidden = true; } }, "Close"),
      el("h3", {}, `[${source.n}] ${source.title || source.document_id}`),
      el("p", { class: "muted", "data-citation": source.citation || "" },
         where || `document ${source.document_id} (given as text)`, ` — partition ${source.partition}`),
      el("blockquote", { class: "passage-text" }, source.text),
      source.file ? el("button", { type: "button", onclick: (e) => openFile(e.target, source) },
                       `Open ${source.file}`) : null);
    passage.hidden = false;
    passage.focus();
  }

  async function openFile(button, source) {
    try {
      await downloadFile(source.document_id, source.partition, source.file);
    } catch (err) {
      button.after(errorBox(err));
    }
  }

  return {
    show() { loadModels(); input.focus(); },
    hide() {},  // an answer under way goes on while another view is shown
    close() { busy?.abort(); },  // another tenant: its answer is no longer wanted
  };
}

// Reads the OpenAI stream: the first chunk carries the sources, the last the route, cache and timings.
async function stream(body, view, signal) {
  const reply = await api("/v1/chat/completions", { method: "POST", json: body, signal });
  const reader = reply.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "", text = "", finished = false;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      if (!data || data === "[DONE]") continue;
      const chunk = JSON.parse(data);
      if (chunk.error) {
        throw new ApiError(503, "engine_failed", inWords(503, "engine_failed", chunk.error.message, null));
      }
      if (chunk.sources) view.sources(chunk.sources, chunk.standalone_question);
      const delta = chunk.choices?.[0]?.delta?.content;
      if (delta) { text += delta; view.text(text); }
      if (chunk.choices?.[0]?.finish_reason) { finished = true; view.done(chunk, text); }
    }
  }
  if (!finished) throw new ApiError(0, "cut_off", "The answer was cut off: the connection ended before it was complete.");
  return text;
}

const GROUNDING_WORDS = {
  supported: "Checked against the sources: supported",
  partly: "Checked against the sources: only partly supported",
  unsupported: "Checked against the sources: not supported by them; do not rely on it",
};

// What the check of the answer against its passages said, with the passages that support it
function groundingLine(g) {
  if (!g || !GROUNDING_WORDS[g.label]) return null;
  const by = g.passages?.length ? ` (by ${g.passages.map((n) => `[${n}]`).join("")})` : "";
  const open = g.sentences?.filter((s) => s.label !== "supported").length || 0;
  const rest = g.label === "partly" && open ? `; ${open} sentence${open > 1 ? "s" : ""} not found in them` : "";
  return el("p", { class: `grounding ${g.label}`, "data-grounding": g.label }, `${GROUNDING_WORDS[g.label]}${by}${rest}.`);
}

class AnswerView {
  constructor(onCite) {
    this.onCite = onCite;
    this.list = [];
    this.body = el("div", { class: "answer-text" }, el("span", { class: "muted" }, "Searching…"));
    this.meta = el("div", { class: "meta" });
    this.sourceList = el("ol", { class: "sources" });
    this.node = el("div", { class: "msg assistant" }, this.body, this.sourceList, this.meta);
  }

  sources(list, standalone) {
    this.list = list;
    this.body.replaceChildren(el("span", { class: "muted" }, list.length ? "Writing…" : "No passage found."));
    this.sourceList.replaceChildren(...list.map((s) => el("li", { value: s.n },
      el("button", { type: "button", class: "link", onclick: () => this.onCite(s) },
         `${s.title || s.document_id}${s.citation ? ` — ${s.citation}` : ""}`))));
    if (standalone) this.meta.append(el("p", { class: "muted" }, `Searched as: ${standalone}`));
  }

  // [n] in the text becomes a button that opens passage n; the rest stays text
  text(value) {
    const parts = [];
    let at = 0;
    for (const m of value.matchAll(/\[(\d{1,3})\]/g)) {
      const source = this.list.find((s) => s.n === Number(m[1]));
      if (!source) continue;
      parts.push(value.slice(at, m.index), el("button", { type: "button", class: "cite", "data-cite": m[1],
        title: source.title || source.document_id, onclick: () => this.onCite(source) }, `[${m[1]}]`));
      at = m.index + m[0].length;
    }
    parts.push(value.slice(at));
    this.body.replaceChildren(...parts);
  }

  done(last, text) {
    if (!text) this.text(last.degraded ? "No generated answer, and no passage matched." : "(empty answer)");
    const route = last.route || {};
    const timings = Object.entries(last.timings_ms || {}).map(([k, v]) => `${k} ${ms(v)}`).join(" · ");
    this.meta.append(
      el("p", { class: "route", "data-engine": route.engine || "none", "data-cache": last.cache },
         route.engine ? `Answered by the ${route.engine} engine (${route.reason})` :
           `No generated answer${route.reason ? ` (${route.reason})` : ""}`,
         `; cache: ${last.cache === "none" ? "miss" : last.cache}${last.degraded ? "; degraded (retrieval only)" : ""}`),
      el("p", { class: "timings muted" }, timings));
    const check = groundingLine(last.grounding);
    if (check) this.meta.prepend(check);
  }

  fail(err) {
    this.body.replaceChildren(el("p", { class: "error", role: "alert" }, describe(err)));
  }
}

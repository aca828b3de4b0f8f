// Cache: the tenant's semantic-cache entries, newest first; delete a wrong one (it is then never served again,
// nor any exact copy of it).
import { api, el, errorBox, getJson, query, session, table } from "./api.js";

export function cacheView(root) {
  const list = el("div", {});
  root.replaceChildren(el("h2", {}, "Semantic cache"),
    el("p", { class: "muted" }, "Answers kept for questions like these; a similar question is answered from them."),
    list);

  async function refresh() {
    try {
      const { entries } = await getJson("/v1/cache/entries" + query({ tenant: session.tenant, limit: 200 }));
      list.replaceChildren(entries.length ? table(["Id", "Question", "Answer", "Stored", ""], entries.map((e) => [
        String(e.id), e.question, e.answer.length > 160 ? `${e.answer.slice(0, 160)}…` : e.answer,
        new Date(e.created * 1000).toLocaleString(),
        el("button", { type: "button", class: "danger", "data-entry": String(e.id),
                       onclick: (ev) => remove(ev.target, e.id) }, "Delete"),
      ])) : el("p", { class: "muted" }, `No semantic-cache entries for tenant ${session.tenant}.`));
    } catch (err) {
      list.replaceChildren(errorBox(err));
    }
  }

  async function remove(button, id) {
    if (!confirm(`Delete cache entry ${id}? A similar question is then answered afresh.`)) return;
    button.disabled = true;
    try {
      await api(`/v1/cache/entries/${id}` + query({ tenant: session.tenant }), { method: "DELETE" });
      await refresh();
    } catch (err) {
      button.disabled = false;
      button.after(errorBox(err));
    }
  }

  return { show: refresh, hide() {} };
}

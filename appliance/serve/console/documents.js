// Documents: the tenant's partitions, a partition's documents (delete one, open its original file), and an
// upload of files with a progress bar and one result per file (POST /v1/files).
import { api, ApiError, authHeaders, bytes, downloadFile, el, errorBox, getJson, inWords, query,
  session, table, unauthorized } from "./api.js";

export function documentsView(root) {
  const partitions = el("div", {});
  const docs = el("div", { class: "documents" });
  const upload = uploadForm(() => refresh());
  root.replaceChildren(el("h2", {}, "Documents"), upload.node, el("h3", {}, "Partitions"), partitions, docs);
  let open = null;  // the partition whose documents are listed
  let listing = 0;  // the latest listing asked for: an older one that answers late is dropped

  async function refresh() {
    try {
      const { partitions: list } = await getJson("/v1/partitions" + query({ tenant: session.tenant }));
      upload.suggest(list.map((p) => p.name));
      partitions.replaceChildren(list.length ? partitionTable(list) :
        el("p", { class: "muted" }, `Tenant ${session.tenant} has no partitions yet: upload files above.`));
      if (open && list.some((p) => p.name === open)) await listDocuments(open);
      else docs.replaceChildren();
    } catch (err) {
      partitions.replaceChildren(errorBox(err));
    }
  }

  function partitionTable(list) {
    return table(["Partition", "Documents", "Chunks", "Index version", "Kind", "Language", "Index on disk", ""],
      list.map((p) => [
        p.name, p.documents ?? "–", p.chunks,
        p.indexed_version < p.version ? `${p.indexed_version} (indexing ${p.version})` : String(p.version),
        p.kind, p.language, bytes(p.index_bytes),
        el("button", { type: "button", onclick: () => listDocuments(p.name), "data-partition": p.name },
           "Show documents"),
      ]));
  }

  async function listDocuments(name, after = "") {
    open = name;
    const mine = ++listing;
    try {
      const page = await getJson("/v1/documents" + query({ tenant: session.tenant, partition: name, after,
                                                            limit: 100 }));
      if (mine !== listing) return;  // another listing was asked for meanwhile
      const rows = page.documents.map((d) => [
        d.id, d.title || "", d.file ? `${d.file.name} (${d.file.format}, ${bytes(d.file.size)}` +
          `${d.file.pages ? `, ${d.file.pages} pages` : ""}` +
          `${d.file.ocr_pages?.length ? `, text of ${ocrPages(d.file.ocr_pages)} read by OCR` : ""})` : "text",
        el("span", { class: "actions" },
          d.file ? el("button", { type: "button", onclick: (e) => openFile(e.target, d, name) }, "Open file") : null,
          el("button", { type: "button", class: "danger", onclick: (e) => remove(e.target, d.id, name) },
             "Delete")),
      ]);
      docs.replaceChildren(el("h3", {}, `Documents in ${name}`),
        rows.length ? table(["Id", "Title", "From", ""], rows) : el("p", { class: "muted" }, "No documents."),
        page.next ? el("button", { type: "button", onclick: () => listDocuments(name, page.next) }, "Next page")
          : null);
    } catch (err) {
      if (mine === listing) docs.replaceChildren(errorBox(err));
    }
  }

  async function openFile(button, d, partition) {
    try {
      await downloadFile(d.id, partition, d.file.name);
    } catch (err) {
      button.after(errorBox(err));
    }
  }

  async function remove(button, id, partition) {
    if (!confirm(`Delete document ${id} from ${partition}?`)) return;
    button.disabled = true;
    try {
      await api(`/v1/documents/${encodeURIComponent(id)}` + query({ tenant: session.tenant, partition }),
                { method: "DELETE" });
      await refresh();
    } catch (err) {
      button.disabled = false;
      button.after(errorBox(err));
    }
  }

  return { show: refresh, hide() {} };
}

function ocrPages(pages) {  // [1, 2, 3, 7] -> "pages 1-3, 7"; [4] -> "page 4"
  if (pages.length === 1) return `page ${pages[0]}`;
  const runs = [];
  for (const p of pages) {
    const last = runs[runs.length - 1];
    if (last && p === last[1] + 1) last[1] = p; else runs.push([p, p]);
  }
  return "pages " + runs.map(([a, b]) => (a === b ? `${a}` : `${a}-${b}`)).join(", ");
}

function uploadForm(done) {
  const partition = el("input", { id: "upload-partition", name: "partition", required: true, value: "docs",
                                  list: "partition-names", pattern: "[A-Za-z0-9][A-Za-z0-9_.\\-]{0,127}",
                                  autocomplete: "off" });
  const names = el("datalist", { id: "partition-names" });
  const files = el("input", { id: "upload-files", name: "file", type: "file", multiple: true, required: true });
  const progress = el("progress", { max: 100, value: 0, hidden: true, "aria-label": "Upload progress" });
  const results = el("div", { class: "results", "aria-live": "polite" });
  const submit = el("button", { type: "submit" }, "Upload");
  const form = el("form", { class: "upload", onsubmit: (e) => { e.preventDefault(); send(); } },
    el("label", { for: "upload-partition" }, "Partition"), partition, names,
    el("label", { for: "upload-files" }, "Files (PDF, Word, PowerPoint, HTML, Markdown, text)"), files,
    submit, progress);

  function send() {
    const data = new FormData();
    data.append("tenant", session.tenant);
    data.append("partition", partition.value);
    for (const f of files.files) data.append("file", f, f.name);
    const xhr = new XMLHttpRequest();  // fetch() cannot report upload progress
    xhr.open("POST", "/v1/files");
    const headers = authHeaders();
    for (const [k, v] of Object.entries(headers)) xhr.setRequestHeader(k, v);
    xhr.sentWith = headers.Authorization;
    progress.hidden = false;
    progress.value = 0;
    submit.disabled = true;
    results.replaceChildren(el("p", { class: "muted" }, "Uploading…"));
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) progress.value = (100 * e.loaded) / e.total; };
    xhr.upload.onload = () => results.replaceChildren(el("p", { class: "muted" }, "Parsing and indexing…"));
    xhr.onload = () => finish(xhr);
    xhr.onerror = () => finish(null);
    xhr.send(data);
  }

  async function finish(xhr) {
    submit.disabled = false;
    progress.value = 100;
    if (!xhr) {
      results.replaceChildren(errorBox(new Error("the upload could not reach the appliance")));
      return;
    }
    let body = null;
    try { body = JSON.parse(xhr.responseText); } catch { /* shown below by status */ }
    const items = body?.files || [];
    const lines = items.map((f) => el("li", { class: f.error ? "error" : "ok", "data-file": f.file },
      f.error ? `${f.file}: not stored — ${f.error.message}` :
        `${f.file}: ${f.status}${f.chunks != null ? `, ${f.chunks} chunks` : ""}` +
        `${f.pages ? `, ${f.pages} pages` : ""}` +
        `${f.ocr_pages?.length ? `, text read by OCR (${ocrPages(f.ocr_pages)})` : ""} (id ${f.id})`));
    const head = xhr.status === 200 ? "Stored and searchable." :
      xhr.status === 202 ? `Stored; indexing continues${body?.index_error ? `: ${body.index_error}` : ""}.` :
        inWords(xhr.status, body?.error?.code || "", body?.error?.message || "", xhr.getResponseHeader("Retry-After"));
    results.replaceChildren(el("p", { class: xhr.status < 300 ? "ok" : "error", role: "status" }, head),
                            el("ul", {}, lines));
    if (xhr.status === 401) unauthorized(new ApiError(401, "unauthorized", head), xhr.sentWith);
    if (xhr.status < 300) { files.value = ""; done(); }
  }

  return {
    node: el("div", { class: "panel" }, el("h3", {}, "Upload files"), form, results),
    suggest(list) { names.replaceChildren(...list.map((n) => el("option", { value: n }))); },
  };
}

// The console's only way to the appliance: same-origin requests with the tab's key, errors turned into words.
const KEY = "appliance.key";

export const session = {
  key: sessionStorage.getItem(KEY) || "",  // this tab only: gone when the tab closes
  who: null,      // GET /v1/whoami
  tenant: null,   // the tenant the views show
};

export function setKey(key) {
  session.key = key;
  if (key) sessionStorage.setItem(KEY, key); else sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, code, message, retryAfter = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

export function authHeaders(extra = {}) {
  return session.key ? { ...extra, Authorization: `Bearer ${session.key}` } : { ...extra };
}

// fetch() with the key; a JSON body as `json`; anything but 2xx throws an ApiError that says what happened.
export async function api(path, { method = "GET", json, body, headers = {}, signal } = {}) {
  const h = authHeaders(headers);
  if (json !== undefined) {
    h["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  }
  let reply;
  try {
    reply = await fetch(path, { method, headers: h, body, signal, cache: "no-store" });
  } catch (err) {
    if (err.name === "AbortError") throw err;
    throw new ApiError(0, "unreachable", "The appliance cannot be reached: is it running, and is this its address?");
  }
  if (!reply.ok) {
    const err = await errorOf(reply);
    // a key revoked (or never given) while the page is open: the page asks for one again
    if (reply.status === 401) unauthorized(err, h.Authorization);
    throw err;
  }
  return reply;
}

export function unauthorized(error, authorization) {
  const key = (authorization || "").replace(/^Bearer /, "");
  window.dispatchEvent(new CustomEvent("appliance:unauthorized", { detail: { error, key } }));
}

export async function getJson(path, options) {
  return (await api(path, options)).json();
}

export async function errorOf(reply) {
  let code = "", message = "";
  try {
    const body = await reply.json();
    code = body?.error?.code || "";
    message = body?.error?.message || "";
  } catch { /* not JSON: the status says enough */ }
  const wait = reply.headers.get("Retry-After");
  return new ApiError(reply.status, code, inWords(reply.status, code, message, wait), wait);
}

// What a person should read for a refusal: the server's own message, put in context.
export function inWords(status, code, message, wait) {
  const retry = wait ? ` Try again in ${wait} s.` : "";
  if (status === 401) return "This needs an API key (or the key was revoked): enter a key.";
  if (status === 403) return `Not allowed: ${message || "this key may not do that."}`;
  if (status === 429) return `Rate limited: other tenants are busy and this tenant is over its rate.${retry}`;
  if (code === "not_ready") return `The appliance is not ready: ${message}.${retry}`;
  if (code === "overloaded") return `The appliance is overloaded: ${message}.${retry}`;
  if (code === "engine_failed") return `The engine is down: ${message}`;
  if (status === 503) return `Unavailable: ${message || "the appliance cannot answer now"}.${retry}`;
  if (status === 413) return `Too large: ${message}`;
  return message ? `${message} (HTTP ${status})` : `The appliance answered HTTP ${status}.`;
}

export function describe(err) {
  return err instanceof ApiError ? err.message : `Something went wrong in the page: ${err?.message || err}`;
}

// Elements from data: text always goes in as text (a document's text never becomes markup).
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function errorBox(err) {
  return el("p", { class: "error", role: "alert" }, describe(err));
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function ms(value) {
  if (value === null || value === undefined) return "–";
  return value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${value.toFixed(value < 10 ? 2 : 0)} ms`;
}

export function percent(value) {
  return value === null || value === undefined ? "–" : `${(value * 100).toFixed(1)} %`;
}

// A download of a document's original file: fetched with the key (a plain link could not send it).
export async function downloadFile(documentId, partition, fileName) {
  const path = `/v1/documents/${encodeURIComponent(documentId)}/file` + query({ tenant: session.tenant, partition });
  const blob = await (await api(path)).blob();
  const url = URL.createObjectURL(blob);
  const link = el("a", { href: url, download: fileName || documentId });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

export function table(head, rows) {
  return el("div", { class: "scroll" }, el("table", {},
    el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c)))))));
}

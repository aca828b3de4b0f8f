// The console's start: who the key lets in (GET /v1/whoami), the tenant picker, and the tabs (#overview,
// #documents, #ask, #cache). A tenant key sees its tenant; an admin key, or a box without keys, every tenant and
// the Overview.
import { ApiError, describe, el, getJson, session, setKey } from "./api.js";
import { askView } from "./ask.js";
import { cacheView } from "./cache.js";
import { documentsView } from "./documents.js";
import { overviewView } from "./overview.js";

const FACTORIES = { overview: overviewView, documents: documentsView, ask: askView, cache: cacheView };
const views = {};
let current = null;

const $ = (id) => document.getElementById(id);

function init() {
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    setKey($("key").value.trim());
    $("key").value = "";
    start();
  });
  $("forget-key").onclick = () => { setKey(""); location.reload(); };
  window.addEventListener("appliance:unauthorized", (e) => {
    // a late answer to a request sent with an older key says nothing about the key in use now
    if (session.who && e.detail.key === session.key) { session.who = null; askForKey(e.detail.error.message); }
  });
  start();
}

async function start() {
  try {
    session.who = await getJson("/v1/whoami");
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return askForKey(session.key ? err.message : "");
    return retryLater(err);  // unreachable, or refused for now (overloaded, rate limited): the page retries
  }
  $("key-view").hidden = true;
  $("forget-key").hidden = !session.key;
  banner("");
  setUpTenants(session.who);
  setUpTabs(session.who);
}

function askForKey(message) {
  dropViews();  // e.g. the Overview's polling stops; another key may see another tenant
  current = null;
  $("tenant").disabled = true;
  $("role").textContent = "";
  for (const id of Object.keys(FACTORIES)) $(`view-${id}`).hidden = true;
  $("tabs").hidden = true;
  $("key-view").hidden = false;
  $("key-error").hidden = !message;
  $("key-error").textContent = message;
  $("key").focus();
}

function retryLater(err) {
  banner(`${describe(err)} Trying again in 3 s…`);
  setTimeout(start, 3000);
}

function banner(text) {
  $("banner").hidden = !text;
  $("banner").textContent = text;
}

function setUpTenants(who) {
  const picker = $("tenant");
  const tenants = who.tenants.length ? who.tenants : ["default"];
  const remembered = sessionStorage.getItem("appliance.tenant");
  session.tenant = who.role === "tenant" ? who.tenant : (tenants.includes(remembered) ? remembered : tenants[0]);
  picker.replaceChildren(...tenants.map((t) => el("option", { value: t }, t)));
  if (who.role !== "tenant") picker.append(el("option", { value: "" }, "another tenant…"));
  picker.value = session.tenant;
  picker.disabled = who.role === "tenant";
  picker.onchange = () => {
    let name = picker.value;
    if (!name) {
      name = (prompt("Tenant name (letters, digits, _ . -)") || "").trim();
      if (!/^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$/.test(name)) { picker.value = session.tenant; return; }
      if (![...picker.options].some((o) => o.value === name)) picker.prepend(el("option", { value: name }, name));
      picker.value = name;
    }
    session.tenant = name;
    sessionStorage.setItem("appliance.tenant", name);
    const shown = current;
    dropViews();
    current = null;
    if (shown) show(shown);
  };
  $("role").textContent = who.role === "open" ? "no API keys on this box" : who.role === "admin" ? "admin" :
    `tenant key`;
}

function dropViews() {
  for (const key of Object.keys(views)) { views[key].hide(); views[key].close?.(); delete views[key]; }
}

function setUpTabs(who) {
  const allowed = Object.keys(FACTORIES).filter((id) => id !== "overview" || who.admin);
  $("tabs").hidden = false;
  for (const button of $("tabs").querySelectorAll("[role=tab]")) {
    button.hidden = !allowed.includes(button.dataset.view);
    // shown at once, not on the hashchange that comes a moment later (a quick second click would race it)
    button.onclick = () => { location.hash = button.dataset.view; show(button.dataset.view); };
    button.onkeydown = (e) => moveFocus(e, button.dataset.view, allowed);
  }
  window.onhashchange = () => show(viewFromHash(allowed));
  show(viewFromHash(allowed));
}

function viewFromHash(allowed) {
  const wanted = location.hash.slice(1);
  return allowed.includes(wanted) ? wanted : allowed[0];
}

// Arrow keys move between tabs, as the ARIA tabs pattern expects
function moveFocus(e, from, allowed) {
  const step = { ArrowRight: 1, ArrowLeft: -1 }[e.key];
  if (!step) return;
  const at = allowed.indexOf(from);
  const next = allowed[(at + step + allowed.length) % allowed.length];
  location.hash = next;
  $(`tab-${next}`).focus();
  show(next);  // at once: the hashchange event would come a moment later
}

function show(id) {
  if (id === current && views[id]) return;  // already shown (the hashchange after a key press)
  if (current && views[current]) views[current].hide();
  for (const name of Object.keys(FACTORIES)) {
    const active = name === id;
    $(`view-${name}`).hidden = !active;
    $(`tab-${name}`).setAttribute("aria-selected", String(active));
    $(`tab-${name}`).tabIndex = active ? 0 : -1;
  }
  current = id;
  if (!views[id]) views[id] = FACTORIES[id]($(`view-${id}`));
  views[id].show();
}

init();

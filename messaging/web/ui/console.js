// Courier console: a small client of Courier's public HTTP API.
// Every text from the API enters the page as a text node (never as markup),
// except message bodies, which the API renders and sanitizes (body_html).
"use strict";

const POLL_MS = 2000;
const PAGE = 50;
const STAGES = ["admitted", "target_selected", "dispatch_started",
  "provider_result_recorded", "delivery_observed"];
const STAGE_LABELS = {
  admitted: "admitted", target_selected: "target selected", dispatch_started: "dispatch started",
  provider_result_recorded: "result recorded", delivery_observed: "observed",
};

const session = {
  get project() { return sessionStorage.getItem("courier.project"); },
  get token() { return sessionStorage.getItem("courier.token"); },
  save(project, token) {
    sessionStorage.setItem("courier.project", project);
    sessionStorage.setItem("courier.token", token);
  },
  clear() {
    sessionStorage.removeItem("courier.project");
    sessionStorage.removeItem("courier.token");
  },
};

// UI state kept across polls (never in the URL but the view and the thread id).
const ui = {search: {q: "", from: "", topic: ""}, human: {cursor: "", messages: []},
  drawn: "", timer: null, busy: false, shownThread: null, threadPages: null};

class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(`${err.code || status}: ${err.message || "request failed"}`);
    this.status = status;
  }
}

async function api(method, path, body, extraHeaders) {
  const headers = {Authorization: `Bearer ${session.token}`, ...extraHeaders};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, credentials: "omit", cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 304) return {notModified: true};
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new ApiError(response.status, data);
  if (response.headers.has("ETag")) data.etag = response.headers.get("ETag");
  return data;
}

const projectPath = (rest) => `/v1/projects/${encodeURIComponent(session.project)}${rest}`;

// el("a", {href: "#x", class: "c"}, "text", child): children become text nodes or nodes.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function ago(ts) {
  if (!ts) return "never";
  const s = Math.max(0, Math.round((Date.now() - Date.parse(ts)) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

const clock = (ts) => (ts ? ts.replace("T", " ").replace(/\.\d+Z$/, "Z") : "-");

function say(text, isError) {
  const status = document.getElementById("status");
  status.textContent = text || "";
  status.className = isError ? "status error" : "status";
}

function badge(text, kind) {
  return el("span", {class: `badge ${kind || ""}`}, text);
}

function addressLine(m) {
  const parts = [el("b", {class: "from"}, m.from), " → ", (m.to || []).join(", ")];
  if (m.cc && m.cc.length) parts.push(`, cc ${m.cc.join(", ")}`);
  if (m.bcc && m.bcc.length) parts.push(`, bcc ${m.bcc.join(", ")}`);
  return el("span", {class: "addresses"}, parts);
}

// agents

function agentTree(agents) {
  const byId = new Map(agents.map((a) => [a.agent_id, a]));
  const parentOf = (a) => {
    const p = a.parent;
    if (!p) return null;
    const id = typeof p === "string" ? p : p.agent_id;
    return byId.has(id) ? id : null;
  };
  const children = new Map();
  const roots = [];
  for (const a of agents) {
    const parent = parentOf(a);
    if (parent) {
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(a);
    } else roots.push(a);
  }
  const order = (list) => list.sort((x, y) => x.name.localeCompare(y.name));
  const node = (a) => {
    const t = a.transport || {};
    const health = t.kind === "webhook"
      ? badge(`webhook ${t.health}${t.failures_in_a_row ? `, ${t.failures_in_a_row} failures` : ""}`,
        t.health === "healthy" ? "ok" : "bad")
      : badge(t.kind || "inbox", "muted");
    const kids = order(children.get(a.agent_id) || []);
    return el("li", {class: "agent", "data-agent": a.agent_id},
      el("div", {class: "agent-row"},
        el("span", {class: "agent-name"}, a.label),
        badge(a.presence, `presence presence-${a.presence}`),
        a.status !== "active" ? badge(a.status, "bad") : null,
        health,
        el("span", {class: "muted"}, `active ${ago(a.last_active_ts)}`),
        a.program ? el("span", {class: "muted"}, a.program) : null),
      kids.length ? el("ul", {class: "tree"}, kids.map(node)) : null);
  };
  return el("ul", {class: "tree root"}, order(roots).map(node));
}

const views = {};

views.agents = {
  load: () => api("GET", projectPath("/agents")),
  draw(data) {
    const agents = data.agents || [];
    return [el("h2", {}, `Agents (${agents.length})`),
      agents.length ? agentTree(agents) : el("p", {class: "muted"}, "No agent has registered yet.")];
  },
};

// messages and search

function messageItem(m) {
  return el("li", {class: "message-item"},
    el("a", {href: `#thread/${encodeURIComponent(m.thread_id)}`, class: "subject"}, m.subject),
    el("div", {class: "meta"}, addressLine(m), " · ", el("time", {}, clock(m.created_ts)),
      m.topic ? badge(m.topic, "muted") : null,
      m.notification_policy === "quiet" ? badge("quiet", "muted") : null,
      m.importance && m.importance !== "normal" ? badge(m.importance, "warn") : null),
    m.snippet ? el("p", {class: "snippet"}, m.snippet) : null);
}

function searchParams(extra) {
  const p = new URLSearchParams({limit: String(PAGE), ...extra});
  for (const [k, v] of Object.entries(ui.search)) if (v) p.set(k, v);
  return p.toString();
}

views.messages = {
  load: () => api("GET", projectPath(`/search?${searchParams({})}`)),
  head() {
    const input = (name, label) => el("input", {name, placeholder: label, "aria-label": label,
      value: ui.search[name]});
    return el("form", {id: "search", class: "search", onsubmit: (e) => {
      e.preventDefault();
      const f = new FormData(e.target);
      ui.search = {q: f.get("q").trim(), from: f.get("from").trim(), topic: f.get("topic").trim()};
      show();
    }}, input("q", "words, auth* for a prefix"), input("from", "from (name)"),
    input("topic", "topic"), el("button", {type: "submit"}, "Search"));
  },
  draw(data) {
    const list = el("ul", {class: "messages"}, data.messages.map(messageItem));
    const more = data.next_cursor ? el("button", {type: "button", onclick: async (e) => {
      const page = await api("GET", projectPath(`/search?${searchParams({cursor: data.next_cursor})}`));
      page.messages.forEach((m) => list.append(messageItem(m)));
      e.target.remove();
    }}, "Older") : null;
    const searching = Object.values(ui.search).some(Boolean);
    return [el("h2", {}, searching ? "Search results" : "Newest messages"),
      data.messages.length ? list : el("p", {class: "muted"}, "Nothing found."), more];
  },
};

// a thread, its messages and each delivery's timeline

function timeline(d) {
  const reached = STAGES.indexOf(d.stage);
  const steps = STAGES.map((s, i) => el("li", {class: `stage ${i <= reached ? "done" : "todo"}`,
    "data-stage": s},
  el("span", {class: "stage-name"}, STAGE_LABELS[s]),
  el("time", {}, clock(d.stages[s]))));
  const outcome = d.outcome ? badge(d.outcome, d.outcome === "accepted" ? "ok" : "bad") : null;
  const attempts = (d.attempts || []).map((a) => el("li", {class: "attempt"},
    `attempt ${a.n}: ${clock(a.started_ts)} → ${clock(a.ended_ts)}`,
    a.error ? el("span", {class: "error"}, ` ${a.error}`) : null));
  return el("div", {class: "delivery", "data-delivery": d.delivery_id},
    el("div", {class: "delivery-head"}, el("b", {}, d.recipient), badge(d.transport, "muted"),
      outcome, d.held ? badge("held", "warn") : null,
      d.target === "pending" ? badge("pending name", "warn") : null),
    el("ol", {class: "timeline"}, steps),
    d.error ? el("p", {class: "error delivery-error"}, d.error) : null,
    attempts.length ? el("ul", {class: "attempts"}, attempts) : null);
}

// The pages of the thread last shown (ui.shownThread), by cursor: a refresh of an
// unchanged page is answered 304, with no body. ui.threadPages: how many pages of
// which thread the reader has opened ("Later messages").
const threadPath = (threadId, cursor) => `/v1/threads/${encodeURIComponent(threadId)}/rendered`
  + (cursor ? `?cursor=${encodeURIComponent(cursor)}` : "");

async function renderedPage(threadId, cursor) {
  const last = ui.shownThread;
  const pages = last && last.token === session.token && last.id === threadId
    ? last.pages : new Map();
  ui.shownThread = {token: session.token, id: threadId, pages};
  const known = pages.get(cursor);
  const answer = await api("GET", threadPath(threadId, cursor), undefined,
    known && known.etag ? {"If-None-Match": known.etag} : {});
  if (answer.notModified && known) return known;
  pages.set(cursor, answer);
  return answer;
}

const deliveriesOf = (messages) => Promise.all(messages.map((m) =>
  api("GET", `/v1/messages/${encodeURIComponent(m.id)}/deliveries`)
    .then((r) => r.deliveries).catch(() => [])));

async function loadThread(threadId) {
  const opened = ui.threadPages && ui.threadPages.id === threadId ? ui.threadPages.count : 1;
  ui.threadPages = {id: threadId, count: opened};
  let page = await renderedPage(threadId, "");
  const thread = {...page, messages: [...page.messages]};
  for (let n = 1; n < opened && page.more; n++) {
    page = await renderedPage(threadId, page.next_cursor);
    thread.messages.push(...page.messages);
  }
  thread.more = page.more;
  return {thread, deliveries: await deliveriesOf(thread.messages)};
}

function threadMessage(m, first, deliveries) {
  const body = el("div", {class: "body"});
  body.innerHTML = m.body_html; // rendered and sanitized by the API (nh3)
  return el("article", {class: "message", "data-message": m.id},
    el("header", {}, addressLine(m), " · ", el("time", {}, clock(m.created_ts)),
      m.notification_policy === "quiet" ? badge("quiet", "muted") : null),
    m.subject !== first.subject ? el("h3", {}, m.subject) : null,
    body,
    el("details", {class: "deliveries", open: true},
      el("summary", {}, `Deliveries (${deliveries.length})`),
      deliveries.map(timeline)));
}

function drawThread({thread, deliveries}) {
  const first = thread.messages[0];
  const last = thread.messages[thread.messages.length - 1];
  const later = () => {
    ui.threadPages.count += 1;
    if (ui.busy) ui.again = true; else show(true);
  };
  return [el("h2", {}, first.subject),
    thread.messages.map((m, i) => threadMessage(m, first, deliveries[i])),
    thread.more ? el("button", {type: "button", class: "later", onclick: later},
      "Later messages") : null,
    el("p", {}, el("a", {href: "#compose", class: "button", onclick: () => {
      ui.reply = {to: last.from === "human" ? (last.to || [])[0] : last.from,
        thread_id: thread.thread_id, subject: `Re: ${first.subject.replace(/^Re: /, "")}`};
    }}, "Reply as human"))];
}

// held mail

views.held = {
  load: () => api("GET", projectPath("/held")),
  draw(data) {
    const rows = data.deliveries || [];
    const act = (d, what) => async () => {
      try {
        await api("POST", `/v1/deliveries/${encodeURIComponent(d.delivery_id)}/${what}`);
        say(`${what === "release" ? "Released" : "Declined"} the delivery to ${d.recipient}.`);
      } catch (err) { say(err.message, true); }
      show(true); // redraw in place, keeping what the status line says
    };
    return [el("h2", {}, `Held mail (${rows.length})`),
      rows.length ? el("ul", {class: "held"}, rows.map((d) => {
        const m = d.message || {};
        return el("li", {class: "held-item", "data-delivery": d.delivery_id},
          el("a", {href: `#thread/${encodeURIComponent(m.thread_id || "")}`, class: "subject"},
            m.subject || "(no subject)"),
          el("div", {class: "meta"}, `${m.from || "?"} → ${d.recipient}`, " · ",
            el("time", {}, clock((d.stages || {}).admitted))),
          el("div", {class: "actions"},
            el("button", {type: "button", class: "release", onclick: act(d, "release")}, "Release"),
            el("button", {type: "button", class: "decline", onclick: act(d, "decline")}, "Decline")));
      })) : el("p", {class: "muted"}, "No mail is waiting for you.")];
  },
};

// authorized names

views.names = {
  load: () => api("GET", projectPath("/names")),
  head() {
    return el("form", {id: "authorize", class: "inline", onsubmit: async (e) => {
      e.preventDefault();
      const f = new FormData(e.target);
      const name = f.get("name").trim();
      try {
        await api("PUT", projectPath(`/names/${encodeURIComponent(name)}`),
          {ttl_s: Number(f.get("ttl_s")) || 3600});
        say(`Authorized ${name}.`);
        e.target.reset();
      } catch (err) { say(err.message, true); }
      show(true); // redraw in place, keeping what the status line says
    }}, el("input", {name: "name", placeholder: "name", "aria-label": "name", required: true}),
    el("input", {name: "ttl_s", type: "number", min: 1, value: 3600, "aria-label": "seconds"}),
    el("button", {type: "submit"}, "Authorize"));
  },
  draw(data) {
    const rows = data.names || [];
    return [el("h2", {}, `Authorized names (${rows.length})`),
      rows.length ? el("ul", {class: "names"}, rows.map((n) => el("li", {},
        el("b", {}, n.name), ` until ${clock(n.expires_ts)} `,
        n.waiting ? badge(`${n.waiting} waiting`, "warn") : null, " ",
        el("button", {type: "button", onclick: async () => {
          try { await api("DELETE", projectPath(`/names/${encodeURIComponent(n.name)}`)); }
          catch (err) { say(err.message, true); }
          show(true);
        }}, "Remove")))) : el("p", {class: "muted"}, "No name is authorized ahead of its agent.")];
  },
};

// the human's inbox: pages after the cursor, kept across polls, newest shown first

views.human = {
  async load() {
    for (;;) {
      const page = await api("GET", projectPath(
        `/human/inbox?shown=true&limit=${PAGE}&cursor=${encodeURIComponent(ui.human.cursor)}`));
      ui.human.messages.push(...page.messages);
      ui.human.cursor = page.next_cursor;
      if (page.messages.length < PAGE) break;
    }
    return {messages: ui.human.messages.slice().reverse()};
  },
  draw(data) {
    return [el("h2", {}, `Human inbox (${data.messages.length})`),
      data.messages.length ? el("ul", {class: "messages"}, data.messages.map(messageItem))
        : el("p", {class: "muted"}, "No agent has written to you yet.")];
  },
};

// compose as human

views.compose = {
  static: true,
  draw() {
    const reply = ui.reply || {};
    ui.reply = null;
    const field = (label, input) => el("label", {}, label, input);
    return [el("h2", {}, reply.thread_id ? "Reply as human" : "Write as human"),
      el("form", {id: "compose", class: "compose", onsubmit: async (e) => {
        e.preventDefault();
        const f = new FormData(e.target);
        const list = (v) => v.split(",").map((s) => s.trim()).filter(Boolean);
        const body = {to: list(f.get("to")), subject: f.get("subject"), body_md: f.get("body_md")};
        if (f.get("topic").trim()) body.topic = f.get("topic").trim();
        if (f.get("importance") !== "normal") body.importance = f.get("importance");
        if (reply.thread_id) body.thread_id = reply.thread_id;
        try {
          const sent = await api("POST", projectPath("/messages"), body);
          say(`Sent to ${sent.delivery.observations.map((o) => o.recipient).join(", ")}.`);
          location.hash = `#thread/${encodeURIComponent(sent.thread_id)}`;
        } catch (err) { say(err.message, true); }
      }},
      field("To", el("input", {name: "to", required: true, value: reply.to,
        placeholder: "names, comma separated"})),
      field("Subject", el("input", {name: "subject", required: true, maxlength: 200,
        value: reply.subject})),
      field("Message (Markdown)", el("textarea", {name: "body_md", rows: 8})),
      field("Topic", el("input", {name: "topic", placeholder: "optional"})),
      field("Importance", el("select", {name: "importance"},
        ["low", "normal", "high", "urgent"].map((v) =>
          el("option", {value: v, selected: v === "normal"}, v)))),
      el("button", {type: "submit"}, "Send"))];
  },
};

// routing and polling

function current() {
  const hash = decodeURIComponent(location.hash.slice(1));
  if (hash.startsWith("thread/")) {
    const id = hash.slice("thread/".length);
    return {name: "thread", view: {load: () => loadThread(id), draw: drawThread}};
  }
  const name = views[hash] ? hash : "agents";
  return {name, view: views[name]};
}

async function show(poll) {
  if (ui.busy) {
    if (!poll) ui.again = true; // a navigation during a poll: draw it right after
    return;
  }
  const {name, view} = current();
  const main = document.getElementById("view");
  for (const a of document.querySelectorAll("#tabs a")) {
    a.classList.toggle("active", a.dataset.view === name);
  }
  ui.busy = true;
  try {
    if (!poll || main.dataset.view !== name) {
      main.replaceChildren();
      main.dataset.view = name;
      ui.drawn = "";
      if (view.head) main.append(view.head());
      main.append(el("div", {id: "content"}));
    }
    if (view.static) {
      if (!poll) document.getElementById("content").replaceChildren(...view.draw());
      return;
    }
    const data = await view.load();
    const seen = JSON.stringify(data);
    if (seen !== ui.drawn) {
      ui.drawn = seen;
      document.getElementById("content").replaceChildren(...[view.draw(data)].flat(2)
        .filter(Boolean));
    }
    if (!poll) say("");
  } catch (err) {
    if (err.status === 401) { signOut("Your token was not accepted."); return; }
    say(err.message, true);
  } finally {
    ui.busy = false;
  }
  if (ui.again) {
    ui.again = false;
    show();
    return;
  }
  counts();
}

async function counts() {
  try {
    const held = await api("GET", projectPath("/held"));
    document.getElementById("held-count").textContent =
      held.deliveries.length ? String(held.deliveries.length) : "";
  } catch (err) { /* the held list is optional in the badge */ }
}

function signedIn() {
  document.getElementById("signin-view").hidden = true;
  document.getElementById("app").hidden = false;
  document.getElementById("signout").hidden = false;
  document.getElementById("who").textContent = session.project;
  show();
  ui.timer = setInterval(() => show(true), POLL_MS);
}

function signOut(message) {
  session.clear();
  clearInterval(ui.timer);
  ui.human = {cursor: "", messages: []};
  ui.shownThread = null;
  ui.threadPages = null;
  document.getElementById("app").hidden = true;
  document.getElementById("signout").hidden = true;
  document.getElementById("signin-view").hidden = false;
  document.getElementById("who").textContent = "";
  document.getElementById("signin-error").textContent = message || "";
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("signin").addEventListener("submit", async (e) => {
    e.preventDefault();
    const project = document.getElementById("project-id").value.trim();
    const token = document.getElementById("project-token").value.trim();
    session.save(project, token);
    try {
      await api("GET", projectPath("/agents"));
    } catch (err) {
      signOut(err.status === 401 || err.status === 403
        ? "That token does not open this project." : err.message);
      return;
    }
    document.getElementById("project-token").value = "";
    signedIn();
  });
  document.getElementById("signout").addEventListener("click", () => signOut(""));
  window.addEventListener("hashchange", () => show());
  if (session.token && session.project) signedIn();
});

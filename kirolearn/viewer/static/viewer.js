// kirolearn viewer: the live tail, filters that apply on change, confirm before forgetting.
// Served from 'self' only (the CSP forbids inline script); text goes in as textContent.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  for (const select of document.querySelectorAll("select.autosubmit")) {
    select.addEventListener("change", () => select.form.submit());
  }
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  }
  const tail = document.getElementById("tail");
  if (tail) follow(tail);
});

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// Text whose `code` spans (markdown, as a brief or a fact writes them) show as code.
function withCode(tag, className, text) {
  const node = element(tag, className);
  text.split("`").forEach((part, i, parts) => {
    const closed = i % 2 === 1 && i < parts.length - 1;
    if (closed) node.append(element("code", "", part));
    else node.append((i % 2 === 1 ? "`" : "") + part);
  });
  return node;
}

function eventItem(item) {
  const li = element("li", "event " + item.kind);
  li.dataset.seq = item.seq;
  const meta = element("div", "meta");
  meta.append(element("span", "kind", item.kind), " ",
              element("time", "", item.valid_time.slice(0, 19).replace("T", " ")), " ");
  const session = element("a", "", "session " + item.session_id.slice(0, 12));
  session.href = "/sessions/" + encodeURIComponent(item.session_id);
  const detailLink = element("a", "", "event");
  detailLink.href = "/events/" + encodeURIComponent(item.event_id);
  meta.append(session, " ", detailLink);
  li.append(meta);
  const headline = element("div", "headline", item.headline);
  if (item.outcome) headline.append(" ", element("span", "outcome-text", item.outcome));
  li.append(headline);
  if (item.detail) li.append(withCode("div", "detail", item.detail));
  if (item.output) li.append(element("pre", "output", item.output));
  return li;
}

function follow(tail) {
  const state = document.getElementById("live-state");
  const params = new URLSearchParams({after: tail.dataset.after});
  if (tail.dataset.project) params.set("project", tail.dataset.project);
  const source = new EventSource("/api/stream?" + params);
  source.addEventListener("open", () => { state.textContent = "live"; });
  source.addEventListener("error", () => { state.textContent = "reconnecting…"; });
  source.addEventListener("event", (message) => {
    const item = JSON.parse(message.data);
    if (tail.querySelector(`li[data-seq="${item.seq}"]`)) return;
    document.getElementById("tail-empty")?.remove();
    const li = eventItem(item);
    li.classList.add("new");
    tail.prepend(li);
    while (tail.children.length > 500) tail.lastElementChild.remove();
  });
}

// Entry point: sign-in and the hash router. Each page is a function (main, params) that fills
// <main> and may return a cleanup function (closing streams, timers) run on navigation.
import { ApiError, apiKey, request, signIn, signOut } from "./api.js";
import { agentPage, agentsPage } from "./agents.js";
import { errorBox, fill, h } from "./dom.js";
import {
  environmentsPage,
  filesPage,
  memoryPage,
  skillsPage,
  usagePage,
  vaultsPage,
} from "./resources.js";
import { sessionsPage } from "./sessions.js";
import { timelinePage } from "./timeline.js";

const ROUTES = [
  [/^\/sessions\/([^/]+)$/, timelinePage],
  [/^\/sessions$/, sessionsPage],
  [/^\/agents\/([^/]+)$/, agentPage],
  [/^\/agents$/, agentsPage],
  [/^\/environments$/, environmentsPage],
  [/^\/files$/, filesPage],
  [/^\/skills$/, skillsPage],
  [/^\/memory$/, memoryPage],
  [/^\/vaults$/, vaultsPage],
  [/^\/usage$/, usagePage],
];

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const signOutButton = document.getElementById("sign-out");
let cleanup = null;
let generation = 0; // a page still loading when the user moves on is cleaned up at once

function signInPage(message) {
  nav.hidden = true;
  signOutButton.hidden = true;
  document.title = "Sign in · Corral console";
  const input = h("input", {
    id: "api-key",
    name: "api-key",
    type: "password",
    required: true,
    "aria-describedby": "api-key-help",
  });
  const status = h("div", { class: "form-status" });
  const form = h(
    "form",
    { class: "card narrow", "aria-labelledby": "sign-in-title" },
    h("h1", { id: "sign-in-title" }, "Sign in"),
    message ? h("p", { class: "error", role: "alert" }, message) : null,
    h("label", { for: "api-key" }, "API key"),
    input,
    h(
      "p",
      { id: "api-key-help", class: "hint" },
      "The key printed by corral serve (or one of CORRAL_API_KEYS). It is kept in this tab only.",
    ),
    h("button", { type: "submit" }, "Sign in"),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    signIn(input.value.trim());
    try {
      await request("/v1/agents", { query: { limit: 1 } });
    } catch (err) {
      signOut();
      fill(
        status,
        errorBox(err instanceof ApiError && err.status === 401 ? "That key was refused." : err),
      );
      input.focus();
      return;
    }
    if (!window.location.hash || window.location.hash === "#/") window.location.hash = "#/sessions";
    else route();
  });
  fill(main, form);
  input.focus();
}

function markCurrent(path) {
  for (const link of nav.querySelectorAll("a")) {
    const target = link.getAttribute("href").slice(1);
    if (path === target || path.startsWith(`${target}/`)) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

async function route() {
  const hash = window.location.hash;
  if (hash && !hash.startsWith("#/")) return; // an in-page anchor, not a page
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  if (!apiKey()) {
    signInPage();
    return;
  }
  nav.hidden = false;
  signOutButton.hidden = false;
  const path = decodeURIComponent(window.location.hash.slice(1) || "/sessions");
  markCurrent(path);
  for (const [pattern, page] of ROUTES) {
    const match = path.match(pattern);
    if (!match) continue;
    fill(main, h("p", { class: "loading" }, "Loading…"));
    const mine = ++generation;
    // Each visit draws into its own view, shown only if it is still the current visit: a
    // page that finishes loading after the user moved on must not draw over the newer one.
    const view = h("div", { class: "view" });
    try {
      const done = await page(view, ...match.slice(1));
      if (mine !== generation) {
        if (done) done();
        return;
      }
      fill(main, view);
      cleanup = done || null;
    } catch (err) {
      if (mine !== generation) return;
      if (err instanceof ApiError && err.status === 401) {
        signOut();
        signInPage("The server refused the key; sign in again.");
        return;
      }
      fill(main, h("h1", {}, "Something went wrong"), errorBox(err));
    }
    const heading = main.querySelector("h1");
    if (heading) document.title = `${heading.textContent} · Corral console`;
    main.focus({ preventScroll: true });
    return;
  }
  fill(
    main,
    h("h1", {}, "Not found"),
    h("p", {}, "No such page. ", h("a", { href: "#/sessions" }, "Sessions")),
  );
}

signOutButton.addEventListener("click", () => {
  signOut();
  route();
});
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault(); // the hash belongs to the router
  main.focus();
});
window.addEventListener("hashchange", route);
route();

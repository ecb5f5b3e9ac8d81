// The dashboard's live socket (docs/design.md#live-events-and-webhooks). Every event, and every (re)connect,
// re-renders the page's live regions from the server, so a dropped push loses
// nothing: the page always ends up showing what the database holds.
//
// An element with data-live-src="<url>" holds regions marked data-live="<name>";
// the URL answers the same regions, freshly rendered. Items marked data-key are
// kept as they are (with what is typed in them) while the fresh copy has them.
// Forms inside post with htmx (hx-post) and swap their region themselves; the
// regions this script inserts are handed to htmx so their forms do too.
//
// A run's model text streams in as run.delta events, which are never stored:
// they are written into the run's box marked data-stream="<run id>" and cause
// no refresh. The box keeps its text across a refresh only while its step is
// newer than the steps the fresh copy holds (data-stored-steps); once the step
// is stored, the page shows it as a message instead, as it would to anyone.
// run.withdrawn takes back a step's streamed text that will not be stored (its
// try failed and is retried or falls back, or the step failed or was refused):
// the box is emptied, so the page never shows an answer that was not kept.
//
// While the socket is down the page says it is reconnecting (#live-connection), after a
// moment's grace so a routine reconnect (a changed role closes the socket) does not flash it.
(function () {
  "use strict";
  const announcer = document.getElementById("live-status");
  const reconnecting = document.getElementById("live-connection");
  const GRACE_MS = 1000;
  let shownAfter = null;
  let leaving = false; // the page is being left: its socket closing is no drop
  window.addEventListener("pagehide", function () {
    leaving = true;
  });
  let delay = 500;
  let busy = false;
  let again = false;
  // htmx requests under way. A form swapped out from under its own request
  // would lose the answer (htmx drops it), so refreshes wait for them to end.
  let posting = 0;
  let deferred = false;

  // A pointer held down on the page: a click is under way. Swapping the node under it between
  // its press and release would lose the click (the two land on different nodes), so refreshes
  // wait for the release, as they wait for a form's answer.
  let pressing = false;
  document.addEventListener("pointerdown", function () {
    pressing = true;
  });
  function released() {
    pressing = false;
    if (!posting && deferred) {
      deferred = false;
      refresh();
    }
  }
  document.addEventListener("pointerup", released);
  document.addEventListener("pointercancel", released);

  document.addEventListener("htmx:beforeRequest", function () {
    posting += 1;
  });
  document.addEventListener("htmx:afterRequest", function () {
    posting = Math.max(0, posting - 1);
    if (!posting && !pressing && deferred) {
      deferred = false;
      refresh();
    }
  });

  // htmx swaps nothing on an error answer: say what happened where the page's messages go,
  // and resync the regions, which may have moved on (answered elsewhere, a role changed).
  const refusals = {
    403: "Not done: your role does not allow it (it may have just changed).",
    404: "Not done: this is gone, or not yours to act on.",
  };
  function refused(text) {
    const status = document.getElementById("messages");
    if (status) {
      const list = document.createElement("ul");
      list.className = "messages";
      const item = document.createElement("li");
      item.className = "error";
      item.textContent = text;
      list.appendChild(item);
      status.replaceChildren(list);
    }
    refresh();
  }
  document.addEventListener("htmx:responseError", function (event) {
    const xhr = event.detail.xhr;
    const code = xhr.status;
    // A form too large to read is answered with what to do, as text (parley/middleware.py).
    const said = code === 413 ? xhr.responseText : "";
    refused(said || refusals[code] || "Not done: the server answered " + code + ". Reload the page and try again.");
  });
  document.addEventListener("htmx:sendError", function () {
    refused("Not sent: the connection was lost. Try again when you are back online.");
  });

  // One refresh at a time. Events during a refresh ask for one more pass, so
  // responses never land out of order and a burst of events costs two passes.
  async function refresh() {
    if (posting || pressing) {
      deferred = true;
      return;
    }
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      do {
        again = false;
        await refreshOnce();
      } while (again);
    } finally {
      busy = false;
    }
  }

  async function refreshOnce() {
    for (const holder of document.querySelectorAll("[data-live-src]")) {
      let html;
      try {
        const response = await fetch(holder.dataset.liveSrc, { headers: { "X-Requested-With": "live" } });
        if (response.redirected) {
          // Only the login page redirects a fragment: the session ended, so show the login form.
          location.reload();
          return;
        }
        if (!response.ok) continue;
        html = await response.text();
      } catch (error) {
        return; // offline: the socket drops too, and its reconnect re-syncs
      }
      if (posting || pressing) {
        deferred = true; // a form was sent or a click began meanwhile: merge after it, from a fresh fetch
        return;
      }
      const fresh = document.createElement("template");
      fresh.innerHTML = html;
      for (const region of fresh.content.querySelectorAll("[data-live]")) {
        const current = holder.querySelector('[data-live="' + region.dataset.live + '"]');
        if (current) merge(current, region);
      }
    }
  }

  function merge(current, region) {
    // Unchanged: leave the nodes be, so nothing under the pointer or the focus is swapped for nothing.
    if (current.isEqualNode(region)) return;
    // Moving a node out of the document drops its focus; note it to give it back.
    const focused = current.contains(document.activeElement) ? document.activeElement : null;
    const selection =
      focused && typeof focused.selectionStart === "number"
        ? [focused.selectionStart, focused.selectionEnd, focused.selectionDirection]
        : null;
    const kept = new Map();
    for (const item of current.querySelectorAll("[data-key]")) kept.set(item.dataset.key, item);
    for (const item of region.querySelectorAll("[data-key]")) {
      const old = kept.get(item.dataset.key);
      if (old) item.replaceWith(old);
    }
    for (const box of region.querySelectorAll("[data-stream]")) {
      const old = current.querySelector('[data-stream="' + CSS.escape(box.dataset.stream) + '"]');
      if (old && Number(old.dataset.step) > Number(box.dataset.storedSteps)) box.replaceWith(old);
    }
    // A focused element that is not kept moves to its fresh copy, so a keyboard user keeps their place.
    const target = focused && !region.contains(focused) ? counterpart(focused, current, region) : focused;
    current.replaceWith(region);
    // htmx wires hx-* attributes only in what it swapped itself: hand it what arrived this way.
    if (window.htmx) window.htmx.process(region);
    if (target && region.contains(target)) {
      target.focus({ preventScroll: true });
      if (selection && target === focused) target.setSelectionRange(selection[0], selection[1], selection[2]);
    }
    const summary = region.dataset.announce;
    if (announcer && summary && summary !== current.dataset.announce) announcer.textContent = summary;
  }

  // The element of ``region`` (the fresh copy of ``current``) that stands where ``element`` stands:
  // the one with its id, else the one of its tag at the same position; null when there is none.
  function counterpart(element, current, region) {
    if (element.id) return region.querySelector("#" + CSS.escape(element.id));
    const tag = element.tagName.toLowerCase();
    const position = Array.prototype.indexOf.call(current.querySelectorAll(tag), element);
    return region.querySelectorAll(tag)[position] || null;
  }

  function streamBoxes(run) {
    return document.querySelectorAll('[data-stream="' + CSS.escape(String(run)) + '"]');
  }

  function stream(payload) {
    for (const box of streamBoxes(payload.run)) {
      const text = box.querySelector("pre");
      if (box.dataset.step !== String(payload.step)) {
        box.dataset.step = String(payload.step);
        text.textContent = "";
      }
      text.textContent += payload.delta;
      box.hidden = false;
    }
  }

  function withdraw(payload) {
    for (const box of streamBoxes(payload.run)) {
      if (box.dataset.step !== String(payload.step)) continue;
      box.querySelector("pre").textContent = "";
      box.hidden = true;
      delete box.dataset.step; // nothing unstored left to keep across a refresh
    }
  }

  function parse(data) {
    try {
      return JSON.parse(data);
    } catch (error) {
      return null;
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/live/");
    socket.onopen = function () {
      delay = 500;
      document.body.dataset.live = "connected";
      clearTimeout(shownAfter);
      shownAfter = null;
      if (reconnecting) reconnecting.hidden = true;
      refresh(); // whatever happened while the page loaded or the socket was down
    };
    socket.onmessage = function (message) {
      const frame = parse(message.data);
      if (frame && frame.event === "run.delta") {
        stream(frame.payload);
        return;
      }
      if (frame && frame.event === "run.withdrawn") {
        withdraw(frame.payload);
        return;
      }
      refresh();
    };
    socket.onclose = function () {
      document.body.dataset.live = "disconnected";
      if (reconnecting && !leaving && shownAfter === null) {
        shownAfter = setTimeout(function () {
          reconnecting.hidden = false;
        }, GRACE_MS);
      }
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }

  connect();
})();

// The dashboard's live socket. On every event it re-renders the page's live
// regions from the server; on reconnect it re-syncs, so a dropped push loses nothing.
(function () {
  "use strict";
  const status = document.getElementById("live-status");
  let delay = 500;

  async function refresh() {
    const holders = document.querySelectorAll("[data-live-src]");
    for (const holder of holders) {
      const response = await fetch(holder.dataset.liveSrc, { headers: { "X-Requested-With": "live" } });
      if (!response.ok) continue;
      const fresh = document.createElement("div");
      fresh.innerHTML = await response.text();
      for (const region of fresh.querySelectorAll("[data-live]")) {
        const current = holder.querySelector('[data-live="' + region.dataset.live + '"]');
        if (current) merge(current, region);
      }
    }
  }

  // Replace a region but keep list items (and what is typed in them) that are still there.
  function merge(current, region) {
    const kept = new Map();
    for (const item of current.querySelectorAll("[data-key]")) kept.set(item.dataset.key, item);
    for (const item of region.querySelectorAll("[data-key]")) {
      const old = kept.get(item.dataset.key);
      if (old) item.replaceWith(old);
    }
    current.replaceWith(region);
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + "/ws/live/");
    socket.onopen = function () {
      delay = 500;
      document.body.dataset.live = "connected";
      refresh();
    };
    socket.onmessage = function (message) {
      const data = JSON.parse(message.data);
      if (status) status.textContent = "Update: " + data.event;
      refresh();
    };
    socket.onclose = function () {
      document.body.dataset.live = "disconnected";
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 10000);
    };
  }

  connect();
})();

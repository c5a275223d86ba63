// Mergebot pages: the queue page's live updates. The server sends an event when the queue's fingerprint
// changes; we then fetch the fresh fragment and swap it in. No framework, no build step.
(function () {
  "use strict";
  var live = document.getElementById("queue-live");
  if (!live) { return; }
  var label = document.getElementById("live-status");
  var busy = false, again = false, poller = null;

  function say(text, on) {
    if (label) { label.textContent = text; label.className = "live-status" + (on ? " on" : ""); }
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(live.dataset.src, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.redirected || r.status === 401) { window.location.reload(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html !== null) {
          live.innerHTML = html;
          live.dataset.updates = String(Number(live.dataset.updates || "0") + 1);
        }
      })
      .catch(function () { say("offline; retrying", false); })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  function fallBackToPolling() {
    if (poller === null) { poller = window.setInterval(refresh, 5000); }
    say("updating every 5 s", false);
  }

  if (!window.EventSource) { fallBackToPolling(); return; }
  var events = new EventSource(live.dataset.events);
  events.addEventListener("open", function () { say("live", true); });
  events.addEventListener("queue", function (ev) {
    if (ev.data !== live.dataset.fp) { live.dataset.fp = ev.data; refresh(); }
  });
  events.addEventListener("logout", function () { events.close(); window.location.reload(); });
  events.addEventListener("busy", function () { events.close(); fallBackToPolling(); });
  events.addEventListener("error", function () {
    if (events.readyState === EventSource.CLOSED) { fallBackToPolling(); } else { say("reconnecting…", false); }
  });
})();

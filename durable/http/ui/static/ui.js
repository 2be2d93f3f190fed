/* durable web UI: progressive enhancement only (every page reads fine without it).
   - keeps "in 4m 12s" / "3s late" / "2m ago" current on <time> elements;
   - follows an open run over server-sent events (/ui/run/stream, which waits on the
     history long poll) and refreshes the page's live regions when events arrive;
   - polls an open run's live parts (/ui/run/live: heartbeat progress, what it waits
     for) every second, since a heartbeat records no history event to stream;
   - refreshes the runs list every few seconds when asked to. */
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  function duration(seconds) {
    var s = Math.abs(seconds);
    if (s < 1) return Math.round(s * 1000) + "ms";
    if (s < 10) { var t = s.toFixed(1); return (t.slice(-2) === ".0" ? t.slice(0, -2) : t) + "s"; }
    var total = Math.round(s), days = Math.floor(total / 86400), rest = total % 86400;
    var hours = Math.floor(rest / 3600); rest %= 3600;
    var minutes = Math.floor(rest / 60), secs = rest % 60;
    function two(n) { return (n < 10 ? "0" : "") + n; }
    if (days) return hours ? days + "d " + hours + "h" : days + "d";
    if (hours) return hours + "h " + two(minutes) + "m";
    if (minutes) return secs ? minutes + "m " + two(secs) + "s" : minutes + "m";
    return secs + "s";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-deadline]").forEach(function (el) {
      var delta = (Date.parse(el.getAttribute("datetime")) - now) / 1000;
      var open = el.getAttribute("data-open") === "1", text, state;
      if (delta >= 0) { text = open ? "in " + duration(delta) : "not reached"; state = open ? "ahead" : "passed"; }
      else if (open) { text = duration(delta) + " late"; state = "late"; }
      else { text = "passed " + duration(delta) + " ago"; state = "passed"; }
      el.classList.remove("ahead", "late", "passed"); el.classList.add(state);
      var rel = el.querySelector(".rel");
      if (rel) rel.textContent = (state === "late" ? "⚠ " : "") + "(" + text + ")";
    });
    document.querySelectorAll("time[data-since]").forEach(function (el) {
      el.textContent = duration(Math.max(0, (now - Date.parse(el.getAttribute("datetime"))) / 1000)) + " so far";
    });
    document.querySelectorAll("time[data-when]").forEach(function (el) {
      var delta = (Date.parse(el.getAttribute("datetime")) - now) / 1000;
      var rel = el.querySelector(".rel");
      if (!rel) return;
      rel.textContent = "(" + (Math.abs(delta) < 0.5 ? "now" : delta > 0 ? "in " + duration(delta) : duration(delta) + " ago") + ")";
    });
  }

  var refreshing = null, again = false;
  function refresh(announce) {
    if (refreshing) { again = true; return refreshing; }
    refreshing = fetch(location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var active = document.activeElement, focusId = active && active.id, focusHref = active && active.getAttribute && active.getAttribute("href");
        document.querySelectorAll("[data-live][id]").forEach(function (el) {
          var fresh = doc.getElementById(el.id);
          if (!fresh || fresh.innerHTML === el.innerHTML) return;
          // keep what the reader opened (a traceback, an event's data) open
          var opened = [];
          el.querySelectorAll("details").forEach(function (d, i) { if (d.open) opened.push(i); });
          var node = document.importNode(fresh, true);
          var details = node.querySelectorAll("details");
          opened.forEach(function (i) { if (details[i]) details[i].open = true; });
          el.replaceWith(node);
        });
        if (focusId && document.getElementById(focusId)) document.getElementById(focusId).focus();
        else if (focusHref && active && !document.body.contains(active)) {
          var same = document.querySelector('a[href="' + CSS.escape(focusHref) + '"]');
          if (same) same.focus();
        }
        tick();
        var status = document.getElementById("live-status");
        if (status && announce) status.textContent = announce;
      })
      .catch(function () { /* the next event or tick tries again */ })
      .then(function () {
        refreshing = null;
        if (again) { again = false; refresh(announce); }
      });
    return refreshing;
  }

  function follow(url) {
    if (!window.EventSource) return;
    var source = new EventSource(url, { withCredentials: true }), timer = null;
    source.addEventListener("history", function (e) {
      var types = [];
      try { types = JSON.parse(e.data).types || []; } catch (err) { /* keep going */ }
      clearTimeout(timer);
      timer = setTimeout(function () { refresh("Updated: " + types.join(", ")); }, 250);
    });
    source.addEventListener("closed", function (e) {
      source.close();
      var status = "";
      try { status = JSON.parse(e.data).status; } catch (err) { /* keep going */ }
      refresh("The run is now " + status + ".");
    });
    source.addEventListener("failed", function () { source.close(); });
  }

  function settled(el) {
    var copy = el.cloneNode(true);
    copy.querySelectorAll(".rel").forEach(function (rel) { rel.textContent = ""; });
    copy.querySelectorAll("time").forEach(function (t) { t.classList.remove("ahead", "late", "passed"); });
    return copy.outerHTML;
  }

  function poll(url) {
    var busy = false, timer = null;
    function once() {
      if (busy || document.hidden) return;
      busy = true;
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) {
          if (!html) return;
          var doc = new DOMParser().parseFromString(html, "text/html");
          var active = document.activeElement, focusHref = active && active.getAttribute && active.getAttribute("href");
          doc.querySelectorAll("[data-poll-part][id]").forEach(function (fresh) {
            var el = document.getElementById(fresh.id);
            // unchanged but for the "(2s ago)" texts tick() rewrites: keep it (and its focus)
            if (!el || settled(fresh) === settled(el)) return;
            var node = document.importNode(fresh, true);
            el.replaceWith(node);
            if (focusHref && !document.body.contains(active)) {
              var same = node.querySelector('a[href="' + CSS.escape(focusHref) + '"]');
              if (same) same.focus();
            }
          });
          tick();
          var state = doc.getElementById("poll-state");
          if (state && state.getAttribute("data-open") !== "1") clearInterval(timer);
        })
        .catch(function () { /* the next tick tries again */ })
        .then(function () { busy = false; });
    }
    timer = setInterval(once, 1000);
  }

  function listRefresh(box) {
    var seconds = parseInt(box.getAttribute("data-refresh"), 10) || 5, timer = null;
    function set() {
      clearInterval(timer);
      if (box.checked) timer = setInterval(function () { refresh(""); }, seconds * 1000);
      try { sessionStorage.setItem("durable-live-list", box.checked ? "1" : ""); } catch (err) { /* private mode */ }
    }
    try { box.checked = sessionStorage.getItem("durable-live-list") === "1"; } catch (err) { /* private mode */ }
    box.addEventListener("change", set);
    set();
  }

  document.addEventListener("DOMContentLoaded", function () {
    tick();
    setInterval(tick, 1000);
    var stream = document.body.getAttribute("data-stream");
    if (stream) follow(stream);
    var live = document.body.getAttribute("data-poll");
    if (live) poll(live);
    var box = document.getElementById("live-list");
    if (box) listRefresh(box);
  });
})();

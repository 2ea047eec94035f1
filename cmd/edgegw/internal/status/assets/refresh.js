// Live refresh: poll status.json, update the numbers in place, reload the
// charts. When what is listed changed (a client came or went) the rows of
// the listeners are no longer updated (their positions moved) and the
// whole page is reloaded, at most every 30 s (sensors that connect for
// each reading would otherwise reload it on every poll). Fields are named
// by data-k paths into status.json.
(function () {
  "use strict";
  var every = 5000, charts = 0;
  function get(o, path) {
    var ks = path.split(".");
    for (var i = 0; i < ks.length; i++) { if (o == null) return undefined; o = o[ks[i]]; }
    return o;
  }
  function bytes(n) {
    if (n < 1024) return n + " B";
    var u = "KMGTP", i = -1;
    do { n /= 1024; i++; } while (n >= 1024 && i < 4);
    return n.toFixed(1) + " " + u[i] + "iB";
  }
  function dur(s) {
    s = Math.max(0, Math.floor(s));
    if (s < 60) return s + "s";
    var p = function (n) { return (n < 10 ? "0" : "") + n; };
    if (s < 3600) return Math.floor(s / 60) + "m" + p(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + p(Math.floor(s % 3600 / 60)) + "m";
    return Math.floor(s / 86400) + "d" + Math.floor(s % 86400 / 3600) + "h";
  }
  function clock(t) { return t.replace("T", " ").replace(/\.\d+/, "").replace("Z", " UTC"); }
  function since(t, now) { return dur((Date.parse(now) - Date.parse(t)) / 1000); }
  var fmt = {
    secs: function (v) { return dur(v); },
    bytes: bytes,
    clock: function (v) { return v ? clock(v) : "never"; },
    ago: function (v, d) { return since(v, d.generated_at); },
    rate: function (v) { return v == null ? "\u2013" : (v < 10 ? v.toFixed(1) : v.toFixed(0)) + "/s"; },
    // As the server's etaOf: the bridge's backlog_state decides the alarm.
    eta: function (v, d, el) {
      var st = get(d, el.getAttribute("data-k").replace(/time_to_empty_seconds$/, "backlog_state"));
      el.className = st === "not_draining" ? "eta alarm" : "eta";
      if (st === "not_draining") return "not draining";
      if (st === "keeping_up") return "keeping up";
      return v == null ? "\u2013" : v === 0 ? "empty" : dur(v);
    },
    noun: function (v, d, el) { return el.getAttribute("data-n") + (v === 1 ? "" : "s"); },
    yesno: function (v) { return v ? "yes" : "no"; }
  };
  function shape(d) {
    var s = [d.bridges.length, d.serial_links.length];
    d.listeners.forEach(function (l) { l.clients.forEach(function (c) { s.push(l.name + "/" + c.client_id); }); });
    return s.join("|");
  }
  var first = null, loaded = Date.now();
  function apply(d) {
    var sh = shape(d), moved = false;
    if (first === null) first = sh;
    else if (sh !== first) {
      if (Date.now() - loaded > 30000) { location.reload(); return; }
      moved = true;
    }
    document.querySelectorAll("[data-k]").forEach(function (el) {
      var key = el.getAttribute("data-k");
      if (moved && key.indexOf("listeners.") === 0) return;
      var v = get(d, key), f = el.getAttribute("data-f");
      if (f === "banner") {
        var b = d.bridges[+key.split(".")[1]];
        el.className = "banner " + b.state;
        el.textContent = "Uplink " + b.name + ": " + (b.state === "connected" ? "connected" : "DISCONNECTED for " + since(b.since, d.generated_at));
        return;
      }
      if (f && fmt[f]) v = fmt[f](v, d, el);
      else if (v == null) v = "";
      if (el.classList.contains("state")) el.className = el.className.replace(/\b(connected|disconnected|open|opening|waiting|stopped)\b/g, "") + " " + v;
      if (el.textContent !== String(v)) el.textContent = v;
    });
    var fr = document.getElementById("fresh");
    fr.textContent = clock(d.generated_at);
    fr.className = "";
    if (++charts % 2 === 0) {
      document.querySelectorAll("img.chart").forEach(function (img) {
        img.src = img.src.replace(/&t=\d+$/, "") + "&t=" + Date.now();
      });
    }
  }
  function poll() {
    fetch("status.json", { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(apply)
      .catch(function () {
        var fr = document.getElementById("fresh");
        fr.textContent = "gateway not answering (" + new Date().toISOString().substr(11, 8) + ")";
        fr.className = "stale";
      })
      .then(function () { setTimeout(poll, every); });
  }
  setTimeout(poll, every);
})();

/* Live chat: streams each run's steps over a WebSocket instead of htmx polling.
 *
 * Every unfinished run (article[data-stream]) gets a socket to /ws/runs/<id>/?after=<n>,
 * where n is the last step already on the page; the server replays what came after n and
 * then streams, so a reconnect loses nothing and repeats nothing. While a socket is up,
 * the run's htmx poll is switched off; if sockets keep failing (or are refused), the poll
 * is handed back and the page keeps working as before. Without JS, the page refreshes.
 */
(function () {
  "use strict";

  var RETRY_MS = [300, 1000, 2000, 4000, 8000];
  var MAX_FAILURES = 6;
  var POLL_ATTRS = ["hx-get", "hx-trigger", "hx-swap"];
  // Not "data-hx-…": htmx reads those as its own attributes.
  var SAVED = "data-polling-";
  var streams = {};

  // Counters and controls read by the browser tests (and handy in a console).
  var api = {
    connects: 0,
    received: 0,
    skipped: 0,
    paused: false,
    streams: streams,
    drop: function (id, hold) {
      api.paused = Boolean(hold);
      var s = streams[id];
      if (s && s.ws) s.ws.close();
    },
    resume: function () {
      api.paused = false;
      Object.keys(streams).forEach(function (id) {
        if (streams[id].waiting) {
          streams[id].waiting = false;
          connect(id);
        }
      });
    },
  };
  window.AgentOpsLive = api;

  function article(id) {
    return document.getElementById("run-" + id);
  }

  function lastStep(el) {
    var steps = el.querySelectorAll("ol.steps > li[data-step]");
    return steps.length ? parseInt(steps[steps.length - 1].getAttribute("data-step"), 10) : 0;
  }

  // The copy button needs JS, so the server renders it hidden.
  function reveal(root) {
    root.querySelectorAll("[data-copy][hidden]").forEach(function (button) {
      button.hidden = false;
    });
  }

  function activate(root) {
    reveal(root);
    if (window.htmx) window.htmx.process(root);
  }

  function fromHtml(html) {
    var holder = document.createElement("div");
    holder.innerHTML = html.trim();
    return holder.firstElementChild;
  }

  // A clone carries no htmx state: the original's poll stops once it leaves the page.
  function takeOver(el) {
    var clone = el.cloneNode(true);
    POLL_ATTRS.forEach(function (name) {
      if (clone.hasAttribute(name)) {
        clone.setAttribute(SAVED + name, clone.getAttribute(name));
        clone.removeAttribute(name);
      }
    });
    el.replaceWith(clone);
    activate(clone);
    return clone;
  }

  function giveBack(id) {
    var el = article(id);
    var s = streams[id];
    if (s) s.done = true;
    if (!el) return;
    POLL_ATTRS.forEach(function (name) {
      var saved = el.getAttribute(SAVED + name);
      if (saved) el.setAttribute(name, saved);
    });
    el.setAttribute("data-live", "polling");
    if (window.htmx) window.htmx.process(el);
  }

  function connect(id) {
    var s = streams[id];
    var el = article(id);
    if (!el || s.done) return;
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var url = scheme + location.host + el.getAttribute("data-stream") + "?after=" + lastStep(el);
    var ws = new WebSocket(url);
    s.ws = ws;
    ws.onopen = function () {
      s.failures = 0;
      api.connects += 1;
      var current = article(id);
      if (current) current.setAttribute("data-live", "open");
    };
    ws.onmessage = function (event) {
      onMessage(id, JSON.parse(event.data));
    };
    ws.onclose = function (event) {
      if (s.ws === ws) s.ws = null;
      var current = article(id);
      if (current && !s.done) current.setAttribute("data-live", "closed");
      if (s.done) return;
      if (event.code >= 4000) {
        giveBack(id); // refused (logged out, not allowed): the server pages decide
        return;
      }
      s.failures += 1;
      if (s.failures > MAX_FAILURES) {
        giveBack(id);
        return;
      }
      if (api.paused) {
        s.waiting = true;
        return;
      }
      setTimeout(function () {
        connect(id);
      }, RETRY_MS[Math.min(s.failures - 1, RETRY_MS.length - 1)]);
    };
  }

  function onMessage(id, message) {
    var el = article(id);
    var s = streams[id];
    if (!el) return;
    api.received += 1;
    if (message.type === "step") {
      if (message.step <= lastStep(el)) {
        api.skipped += 1;
        return;
      }
      var step = fromHtml(message.html);
      el.querySelector("ol.steps").appendChild(step);
    } else if (message.type === "status") {
      var answer = fromHtml(message.html);
      var old = el.querySelector(".answer");
      if (old) old.replaceWith(answer);
      activate(answer);
      el.className = el.className.replace(/\bstatus-\S+/, "status-" + message.status);
      if (message.terminal) {
        s.done = true;
        el.removeAttribute("data-stream");
        el.setAttribute("data-live", "done");
        if (s.ws) s.ws.close(1000);
      }
    }
  }

  function start() {
    if (!("WebSocket" in window)) return;
    document.querySelectorAll("article.run[data-stream]").forEach(function (el) {
      var id = el.getAttribute("data-run");
      if (streams[id]) return;
      streams[id] = { ws: null, failures: 0, done: false, waiting: false };
      takeOver(el);
      connect(id);
    });
  }

  function copy(button) {
    var target = document.querySelector(button.getAttribute("data-copy"));
    if (!target) return;
    var text = target.innerText;
    var done = function () {
      var label = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () {
        button.textContent = label;
      }, 1500);
    };
    var fallback = function () {
      // Clipboard API needs a secure context (and permission inside an iframe).
      var area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.style.position = "fixed";
      area.style.opacity = "0";
      document.body.appendChild(area);
      area.select();
      try {
        document.execCommand("copy");
        done();
      } finally {
        area.remove();
      }
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, fallback);
    } else {
      fallback();
    }
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (button) {
      event.preventDefault();
      copy(button);
      return;
    }
    // In the widget, pages of the app open in a new tab (they refuse to be framed).
    var link = event.target.closest("a[href]");
    if (link && document.body.hasAttribute("data-embed") && !link.closest(".history")) {
      link.setAttribute("target", "_blank");
      link.setAttribute("rel", "noopener");
    }
  });

  // Answer blocks that arrive over the socket are rendered without a request, so without
  // a CSRF field: their htmx posts carry the page's token in the header Django reads.
  document.addEventListener("htmx:configRequest", function (event) {
    var field = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (field) event.detail.headers["X-CSRFToken"] = field.value;
  });

  document.addEventListener("htmx:load", function (event) {
    reveal(event.target);
  });

  document.addEventListener("DOMContentLoaded", function () {
    reveal(document.body);
    var history = document.querySelector("details.history");
    if (history && window.matchMedia("(max-width: 700px)").matches) history.open = false;
    if (history && document.body.hasAttribute("data-embed")) history.open = false;
    start();
  });
})();

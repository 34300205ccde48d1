/* <cw-context-window run="RUN" stage="STAGE" src="SERVER">: the context window of one stage,
   for a host page's own UI (GET /embed.js). A ring with the share of the model's window in use; on click or
   Enter a popover with the categories (tokens, share, cost), the top sources, the forecast and the top
   suggestions. Live: the run's event stream (fetch streaming, so the token can ride in a header), polling
   when streaming fails. No dependency, nothing built, no markup parsed from data: every id and label is text.

   Attributes: run, stage (required); src, the cw server's address (default: where this script came from).
   Property: token (the server's bearer token; never an attribute, so it stays out of the markup).
   Theming: CSS custom properties on the element, e.g. --cw-size, --cw-font, --cw-fg, --cw-bg, --cw-muted,
   --cw-border, --cw-track, --cw-ok, --cw-warn, --cw-full, --cw-focus, --cw-popover-width and
   --cw-system_prompt ... --cw-other for the categories' colours. Events: "cw-snapshot" (detail: the
   stage's answer, as GET .../context-window gives it) each time the element shows a new one. */
(function () {
  "use strict";
  if (!window.customElements || window.customElements.get("cw-context-window")) return;

  var SCRIPT = document.currentScript && document.currentScript.src ? document.currentScript.src : "";
  var DEFAULT_SRC = SCRIPT ? SCRIPT.replace(/\/embed\.js(?:[?#].*)?$/, "") : "";
  var CATEGORIES = ["system_prompt", "tools", "mcp_tools", "skills", "memory", "conversation", "other"];
  var LABEL = {
    system_prompt: "System prompt", tools: "Tools", mcp_tools: "MCP tools", skills: "Skills",
    memory: "Memory", conversation: "Conversation", other: "Other"
  };
  // The page's palette (cw_middleware/_kernel/formats.py COLOUR; a test holds this copy to it).
  var COLOUR = {
    system_prompt: "#E69F00", tools: "#56B4E9", mcp_tools: "#009E73", skills: "#F0E442",
    memory: "#0072B2", conversation: "#D55E00", other: "#CC79A7"
  };
  var TOP_SOURCES = 5;
  var TOP_SUGGESTIONS = 3;
  var POLL_MS = 2000;
  var SVG = "http://www.w3.org/2000/svg";
  var RADIUS = 15.9155; // a circumference of 100: the dash is the percent
  var CSS = [
    ":host{display:inline-block;position:relative;font:var(--cw-font,13px/1.35 system-ui,sans-serif);color:var(--cw-fg,#1d1d1d);",
    "--cw-size:40px}",
    "button.ring{all:unset;box-sizing:border-box;display:inline-flex;align-items:center;gap:.4em;cursor:pointer;",
    "border-radius:999px;padding:2px .5em 2px 2px;border:1px solid var(--cw-border,#d0d0d0);background:var(--cw-bg,#fff)}",
    "button.ring:focus-visible{outline:2px solid var(--cw-focus,#0b57d0);outline-offset:2px}",
    "svg{width:var(--cw-size);height:var(--cw-size);flex:none}",
    ".track{stroke:var(--cw-track,#e6e6e6)}",
    ".used{stroke:var(--cw-ok,#1b7f3b)} .warn .used{stroke:var(--cw-warn,#b26b00)} .full .used{stroke:var(--cw-full,#b3261e)}",
    ".pct{font-weight:600;font-variant-numeric:tabular-nums}",
    ".win{color:var(--cw-muted,#5a5a5a);font-variant-numeric:tabular-nums}",
    ".pop{position:absolute;z-index:2147483000;top:calc(100% + 6px);left:0;box-sizing:border-box;",
    "width:var(--cw-popover-width,20rem);max-width:calc(100vw - 16px);padding:.6em;border-radius:8px;",
    "background:var(--cw-bg,#fff);border:1px solid var(--cw-border,#d0d0d0);box-shadow:0 4px 18px rgba(0,0,0,.16)}",
    ".pop[hidden]{display:none}",
    "h2{font-size:1em;margin:0 0 .25em} p{margin:.35em 0} .muted{color:var(--cw-muted,#5a5a5a)}",
    "h2,p,li{overflow-wrap:anywhere}",
    ".bar{display:flex;height:10px;border-radius:3px;overflow:hidden;background:var(--cw-track,#e6e6e6);margin:.5em 0}",
    "table{border-collapse:collapse;width:100%;font-size:.92em;font-variant-numeric:tabular-nums}",
    "th,td{padding:.15em .2em;text-align:left} th{font-weight:600} .num{text-align:right;white-space:nowrap}",
    "tbody th{font-weight:400;white-space:nowrap}",
    ".key{display:inline-block;width:.7em;height:.7em;border-radius:2px;margin-right:.35em;vertical-align:-.05em}",
    "ul{margin:.25em 0;padding-left:1.1em} li{margin:.15em 0}",
    "h3{font-size:.95em;margin:.6em 0 .2em}"
  ].join("");
  CATEGORIES.forEach(function (c) { CSS += ".c-" + c + "{background:var(--cw-" + c + "," + COLOUR[c] + ")}"; });

  // Numbers as the terminal and the page write them (static/format.js, cw_middleware/_kernel/formats.py).
  function fixed1(x) {
    var a = Math.abs(x);
    if (isFinite(a) && a < 1e15 && (a * 4) % 2 === 1) {
      var k = Math.floor(a * 10);
      return (x < 0 ? "-" : "") + ((k % 2 === 0 ? k : k + 1) / 10).toFixed(1);
    }
    return x.toFixed(1);
  }
  function tokens(n) {
    if (n >= 1000000) return fixed1(n / 1000000) + "M";
    if (n >= 10000) return fixed1(n / 1000) + "k";
    return Math.round(n).toLocaleString("en-US");
  }
  function usd(v) {
    if (v === null || v === undefined) return "-";
    if (v === 0) return "$0";
    if (v >= 1) return "$" + v.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
    if (v >= 0.0001) return "$" + v.toFixed(4);
    return "$" + v.toFixed(1 - Math.floor(Math.log10(v)));
  }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function svg(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    return node;
  }

  var seq = 0;

  function CwContextWindow() {
    return Reflect.construct(HTMLElement, [], CwContextWindow);
  }
  CwContextWindow.prototype = Object.create(HTMLElement.prototype);
  CwContextWindow.prototype.constructor = CwContextWindow;
  Object.setPrototypeOf(CwContextWindow, HTMLElement);
  CwContextWindow.observedAttributes = ["run", "stage", "src"];

  var proto = CwContextWindow.prototype;

  proto.connectedCallback = function () {
    if (!this._root) this._build();
    this._start();
  };
  proto.disconnectedCallback = function () { this._stop(); };
  proto.attributeChangedCallback = function (name, old, value) {
    if (old !== value && this._root && this.isConnected) { this._stop(); this._win = null; this._render(); this._start(); }
  };
  Object.defineProperty(proto, "token", {
    get: function () { return this._token || null; },
    set: function (v) { this._token = v ? String(v) : null; if (this._root && this.isConnected) { this._stop(); this._start(); } }
  });
  Object.defineProperty(proto, "snapshot", { get: function () { return this._win || null; } });

  proto._build = function () {
    var self = this;
    var id = "cw-pop-" + (++seq);
    var root = this.attachShadow({ mode: "open" });
    if (root.adoptedStyleSheets !== undefined && window.CSSStyleSheet && "replaceSync" in CSSStyleSheet.prototype) {
      var sheet = new CSSStyleSheet();
      sheet.replaceSync(CSS);
      root.adoptedStyleSheets = [sheet];
    } else {
      root.appendChild(el("style", {}, CSS));
    }
    this._root = root;
    this._button = el("button", { "class": "ring", type: "button", "aria-expanded": "false", "aria-controls": id, "aria-haspopup": "dialog" });
    var ring = svg("svg", { viewBox: "0 0 36 36", "aria-hidden": "true", focusable: "false" });
    ring.appendChild(svg("circle", { "class": "track", cx: "18", cy: "18", r: String(RADIUS), fill: "none", "stroke-width": "4" }));
    this._arc = svg("circle", {
      "class": "used", cx: "18", cy: "18", r: String(RADIUS), fill: "none", "stroke-width": "4",
      "stroke-dasharray": "0 100", transform: "rotate(-90 18 18)"
    });
    ring.appendChild(this._arc);
    this._ring = ring;
    this._pct = el("span", { "class": "pct" }, "…");
    this._winText = el("span", { "class": "win" }, "");
    this._button.appendChild(ring);
    this._button.appendChild(this._pct);
    this._button.appendChild(this._winText);
    this._pop = el("div", { "class": "pop", id: id, role: "dialog", "aria-label": "Context window", hidden: "" });
    root.appendChild(this._button);
    root.appendChild(this._pop);
    this._button.addEventListener("click", function () { self._toggle(); });
    this._onKey = function (event) {
      if (event.key === "Escape" && !self._pop.hidden) { event.stopPropagation(); self._close(true); }
    };
    this._onOutside = function (event) {
      if (!self._pop.hidden && event.composedPath().indexOf(self) < 0) self._close(false);
    };
    root.addEventListener("keydown", this._onKey);
    this._render();
  };

  proto._toggle = function () { if (this._pop.hidden) this._open(); else this._close(true); };
  proto._open = function () {
    this._pop.hidden = false;
    this._button.setAttribute("aria-expanded", "true");
    document.addEventListener("click", this._onOutside, true);
    this._place();
  };
  proto._close = function (focus) {
    this._pop.hidden = true;
    this._button.setAttribute("aria-expanded", "false");
    document.removeEventListener("click", this._onOutside, true);
    if (focus) this._button.focus();
  };
  // Keep the popover inside the viewport: shift it left when it would run past the right edge.
  proto._place = function () {
    this._pop.style.left = "0px";
    var box = this._pop.getBoundingClientRect();
    var room = document.documentElement.clientWidth - 8;
    if (box.right > room) this._pop.style.left = Math.max(8 - this.getBoundingClientRect().left, room - box.right) + "px";
  };

  // ---------------------------------------------------------------- data

  proto._base = function () { return (this.getAttribute("src") || DEFAULT_SRC).replace(/\/+$/, ""); };
  proto._headers = function (accept) {
    var h = { Accept: accept };
    var token = this._token || this._pageToken();
    if (token) h.Authorization = "Bearer " + token;
    return h;
  };
  // On the server's own origin (its /embed preview), the token the live page keeps in this tab, if any.
  proto._pageToken = function () {
    try {
      if (new URL(this._base() || ".", location.href).origin !== location.origin) return null;
      return window.sessionStorage.getItem("cw-middleware-token");
    } catch (e) { return null; }
  };
  proto._windowUrl = function () {
    return this._base() + "/api/v1/runs/" + encodeURIComponent(this.getAttribute("run") || "") + "/stages/" +
      encodeURIComponent(this.getAttribute("stage") || "") + "/context-window";
  };

  proto._start = function () {
    var run = this.getAttribute("run"), stage = this.getAttribute("stage");
    if (!run || !stage) { this._status("needs run and stage attributes"); return; }
    this._alive = { stopped: false, lastEventId: null, failures: 0, timer: null, ctrl: null };
    this._fetchWindow(this._alive);
    this._stream(this._alive);
  };
  proto._stop = function () {
    var alive = this._alive;
    if (!alive) return;
    alive.stopped = true;
    if (alive.ctrl) alive.ctrl.abort();
    if (alive.timer) window.clearTimeout(alive.timer);
    if (alive.poll) window.clearInterval(alive.poll);
    this._alive = null;
  };

  proto._fetchWindow = function (alive) {
    var self = this;
    return fetch(this._windowUrl(), { headers: this._headers("application/json"), cache: "no-store" }).then(function (r) {
      if (alive.stopped) return;
      if (r.status === 401) { self._status("needs the server's token"); return; }
      return r.json().then(function (body) {
        if (alive.stopped) return;
        if (!r.ok) { self._status(body && body.error ? body.error.message : "HTTP " + r.status); return; }
        self._show(body);
      });
    }).catch(function () { if (!alive.stopped) self._status("cannot reach the cw server"); });
  };

  proto._stream = function (alive) {
    var self = this;
    var ctrl = new AbortController();
    alive.ctrl = ctrl;
    var h = this._headers("text/event-stream");
    if (alive.lastEventId) h["Last-Event-ID"] = alive.lastEventId;
    var url = this._base() + "/api/v1/runs/" + encodeURIComponent(this.getAttribute("run")) + "/events";
    fetch(url, { headers: h, signal: ctrl.signal, cache: "no-store" }).then(function (r) {
      if (!r.ok || !r.body) throw new Error("HTTP " + r.status);
      alive.failures = 0;
      if (alive.poll) { window.clearInterval(alive.poll); alive.poll = null; }
      var reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      var buffer = "";
      function pump() {
        return reader.read().then(function (chunk) {
          if (chunk.done) throw new Error("the stream ended");
          buffer += chunk.value.replace(/\r\n?/g, "\n");
          var i;
          while ((i = buffer.indexOf("\n\n")) >= 0) {
            self._block(alive, buffer.slice(0, i));
            buffer = buffer.slice(i + 2);
          }
          return pump();
        });
      }
      return pump();
    }).catch(function () {
      if (alive.stopped || ctrl.signal.aborted) return;
      alive.failures += 1;
      if (alive.failures >= 3 && !alive.poll) {
        alive.poll = window.setInterval(function () { self._fetchWindow(alive); }, POLL_MS);
      }
      alive.timer = window.setTimeout(function () { if (!alive.stopped) self._stream(alive); }, alive.failures >= 3 ? 15000 : 2000);
    });
  };

  proto._block = function (alive, block) {
    var kind = "message", data = [], id = null;
    block.split("\n").forEach(function (line) {
      if (!line || line.charAt(0) === ":") return;
      var i = line.indexOf(":");
      var field = i < 0 ? line : line.slice(0, i);
      var value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
      if (field === "event") kind = value;
      else if (field === "data") data.push(value);
      else if (field === "id") id = value;
    });
    if (id) alive.lastEventId = id;
    if (!data.length) return;
    var body;
    try { body = JSON.parse(data.join("\n")); } catch (e) { return; }
    if (!body || body.stage_id !== this.getAttribute("stage")) return;
    if (kind === "snapshot") this._show(body);
    else if (kind === "stage" && !this._win) this._fetchWindow(alive);
  };

  // ---------------------------------------------------------------- drawing

  proto._status = function (text) {
    this._pct.textContent = "–";
    this._winText.textContent = "";
    this._button.setAttribute("aria-label", "Context window: " + text);
    this._button.title = text;
    this._pop.textContent = "";
    this._pop.appendChild(el("p", {}, text));
  };

  proto._show = function (win) {
    this._win = win;
    this._render();
    this.dispatchEvent(new CustomEvent("cw-snapshot", { detail: win }));
  };

  proto._render = function () {
    var w = this._win;
    if (!w) { this._status("loading"); return; }
    if (!w.available) {
      this._status("no data for this stage yet" + (w.unavailable_reason ? " (" + w.unavailable_reason.replace(/_/g, " ") + ")" : ""));
      return;
    }
    var pct = typeof w.usage_percent === "number" ? w.usage_percent : null;
    var size = w.context_window_tokens;
    var shown = pct === null ? "–" : fixed1(pct) + "%";
    this._arc.setAttribute("stroke-dasharray", (pct === null ? 0 : Math.min(100, Math.max(0, pct))) + " 100");
    this._ring.setAttribute("class", pct !== null && pct >= 95 ? "full" : pct !== null && pct >= 80 ? "warn" : "");
    this._pct.textContent = shown;
    this._winText.textContent = size ? tokens(w.input_tokens || 0) + " / " + tokens(size) : tokens(w.input_tokens || 0);
    var label = "Context window of " + w.stage_id + ": " + (pct === null ? "" : shown + " used, ") +
      tokens(w.input_tokens || 0) + " tokens" + (size ? " of " + tokens(size) : "") + ". Show the breakdown";
    this._button.setAttribute("aria-label", label);
    this._button.removeAttribute("title");
    this._popover(w);
    if (!this._pop.hidden) this._place();
  };

  proto._popover = function (w) {
    var pop = this._pop;
    pop.textContent = "";
    var input = w.input_tokens || 0;
    var size = w.context_window_tokens;
    var whole = size || input || 1;
    pop.appendChild(el("h2", {}, w.stage_id));
    pop.appendChild(el("p", { "class": "muted" }, (w.model || "unknown model") + " · " + tokens(input) + " tokens" +
      (size ? " of " + tokens(size) + " (" + fixed1(100 * input / size) + "%)" : "")));
    var byCat = {};
    (w.breakdown || []).forEach(function (b) { byCat[b.category] = b.tokens; });
    var costs = w.cost && w.cost.by_category ? w.cost.by_category : {};
    var bar = el("div", { "class": "bar", role: "img", "aria-label": "Input by category, to scale of the " +
      (size ? "window" : "input") });
    CATEGORIES.forEach(function (c) {
      if (!byCat[c]) return;
      var part = el("span", { "class": "c-" + c, title: LABEL[c] });
      part.style.width = (100 * byCat[c] / whole) + "%";
      bar.appendChild(part);
    });
    pop.appendChild(bar);
    var table = el("table", {});
    var head = el("tr", {});
    ["Category", "Tokens", "Share", "Cost"].forEach(function (t, i) {
      head.appendChild(el("th", { scope: "col", "class": i ? "num" : "" }, t));
    });
    var thead = el("thead", {});
    thead.appendChild(head);
    table.appendChild(thead);
    var body = el("tbody", {});
    CATEGORIES.forEach(function (c) {
      var n = byCat[c] || 0;
      var tr = el("tr", { "data-category": c });
      var name = el("th", { scope: "row" });
      name.appendChild(el("span", { "class": "key c-" + c, "aria-hidden": "true" }));
      name.appendChild(document.createTextNode(LABEL[c]));
      tr.appendChild(name);
      tr.appendChild(el("td", { "class": "num" }, tokens(n)));
      tr.appendChild(el("td", { "class": "num" }, fixed1(100 * n / whole) + "%"));
      tr.appendChild(el("td", { "class": "num" }, usd(costs[c] === undefined ? (w.cost ? 0 : null) : costs[c])));
      body.appendChild(tr);
    });
    table.appendChild(body);
    pop.appendChild(table);
    var details = (w.details || []).slice(0, TOP_SOURCES);
    if (details.length) {
      pop.appendChild(el("h3", {}, "Top sources"));
      var ul = el("ul", { "class": "sources" });
      details.forEach(function (d) {
        ul.appendChild(el("li", {}, d.source + " (" + LABEL[d.category] + "): " + tokens(d.tokens)));
      });
      pop.appendChild(ul);
    }
    var f = w.forecast;
    if (f && (f.calls_until_threshold !== null || f.calls_until_full !== null)) {
      var parts = [];
      if (f.calls_until_threshold !== null) parts.push("≈ " + f.calls_until_threshold + " calls to " + (f.threshold_percent % 1 ? fixed1(f.threshold_percent) : f.threshold_percent) + "%");
      if (f.calls_until_full !== null) parts.push("≈ " + f.calls_until_full + " to full");
      pop.appendChild(el("p", { "class": "forecast" }, "Forecast: " + parts.join(", ") + " (+" + tokens(f.growth_per_call_tokens) + " a call)"));
    }
    var advice = (w.suggestions || []).slice(0, TOP_SUGGESTIONS);
    if (advice.length) {
      pop.appendChild(el("h3", {}, "Suggestions"));
      var list = el("ul", { "class": "suggestions" });
      advice.forEach(function (s) { list.appendChild(el("li", {}, s.message)); });
      pop.appendChild(list);
    }
  };

  window.customElements.define("cw-context-window", CwContextWindow);
})();

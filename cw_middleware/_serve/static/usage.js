/* The live page's parts beyond the categories (issue 21): which tool, what is unused, the stage so far, and
   the stage over time. app.js calls these with a StageContextWindow (or the stage's history) and the box to
   fill; every text is set with textContent, as in app.js. Numbers as `cw-middleware show` prints them. */
(function (global) {
  "use strict";

  var fmt = global.cwFormat;

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function table(field, columns, caption) {
    var t = el("table", { "data-field": field });
    t.appendChild(el("caption", { "class": "sr-only" }, caption));
    var head = el("tr");
    columns.forEach(function (c, i) { head.appendChild(el("th", { scope: "col", "class": i ? "num" : "" }, c)); });
    var thead = el("thead");
    thead.appendChild(head);
    t.appendChild(thead);
    var tbody = el("tbody");
    t.appendChild(tbody);
    return { table: t, body: tbody };
  }

  // The per-tool table: definition and result tokens of the latest request, calls over the stage.
  function tools(box, w) {
    if (!w.tools || !w.tools.length) return;
    box.appendChild(el("h4", {}, "Tools"));
    var t = table("tools", ["Tool", "Source", "Definition", "Results", "Invoked"], "Tokens per tool and how often the model called it");
    w.tools.forEach(function (row) {
      var unused = !row.folded && !row.invocations && row.definition_tokens > 0;
      var tr = el("tr", { "data-tool": row.name, "class": unused ? "unused" : "" });
      var name = el("th", { scope: "row" }, row.folded ? "+" + row.folded + " more tools" : row.name);
      if (unused) name.appendChild(el("span", { "class": "badge unused-badge", "data-field": "unused-mark" }, "unused"));
      tr.appendChild(name);
      tr.appendChild(el("td", { "class": "num source" }, row.folded ? "" : (row.category || "") + " · " + (row.source || "")));
      tr.appendChild(el("td", { "class": "num", "data-tokens": row.definition_tokens }, fmt.tokens(row.definition_tokens)));
      tr.appendChild(el("td", { "class": "num", "data-tokens": row.result_tokens }, fmt.tokens(row.result_tokens)));
      tr.appendChild(el("td", { "class": "num", "data-invocations": row.invocations }, row.invocations + "×"));
      t.body.appendChild(tr);
    });
    var scroll = el("div", { "class": "scroll", tabindex: "0", role: "region", "aria-label": "Tokens per tool" });
    scroll.appendChild(t.table);
    box.appendChild(scroll);
    var unused = w.unused_tools || [];
    if (unused.length) {
      var each = 0, over = 0, requests = 0;
      unused.forEach(function (u) { each += u.definition_tokens; over += u.stage_definition_tokens; requests = Math.max(requests, u.requests); });
      box.appendChild(el("p", { "class": "meta", "data-field": "unused" },
        unused.length + " tool definition(s) never called in this stage: " + fmt.tokens(each) + " tokens a request, " +
        fmt.tokens(over) + " over its " + requests + " request(s). The first thing to cut."));
    }
  }

  // The latest request's cost and cache, and the stage so far.
  function totals(box, w) {
    var parts = [];
    if (w.cost) parts.push("This request: " + fmt.usd(w.cost.input_cost) + " of input.");
    if (w.cached_tokens !== null && w.cached_tokens !== undefined && w.input_tokens) {
      parts.push(fmt.tokens(w.cached_tokens) + " of its tokens (" + fmt.percent(w.cached_tokens, w.input_tokens) + ") came from the prompt cache.");
    }
    var t = w.stage_totals;
    if (t) {
      var s = "The stage so far: ";
      if (t.calls !== null && t.calls !== undefined) s += t.calls + " call(s), ";
      if (t.input_tokens !== null && t.input_tokens !== undefined) s += fmt.tokens(t.input_tokens) + " input tokens, ";
      s += fmt.usd(t.input_cost) + " of input";
      if (t.peak_usage_percent !== null && t.peak_usage_percent !== undefined) s += ", peak " + fmt.fixed1(t.peak_usage_percent) + "%";
      if (t.compactions) s += ", " + t.compactions + " compaction(s)";
      parts.push(s + ".");
    }
    if (!parts.length) return;
    box.appendChild(el("p", { "class": "totals", "data-field": "stage_totals" }, parts.join(" ")));
  }

  // The cost and cached cells of one category's row (app.js's breakdown table).
  function categoryCells(w, category, n) {
    var cells = [];
    if (w.cost) {
      var usd = w.cost.by_category ? w.cost.by_category[category] : null;
      cells.push(el("td", { "class": "num", "data-field": "cost" }, fmt.usd(usd)));
    }
    if (w.cached_tokens !== null && w.cached_tokens !== undefined) {
      var item = (w.breakdown || []).filter(function (b) { return b.category === category; })[0];
      var cached = item && item.cached_tokens !== null && item.cached_tokens !== undefined ? item.cached_tokens : 0;
      cells.push(el("td", { "class": "num", "data-field": "cached", "data-tokens": cached }, n ? fmt.percent(cached, n) : "–"));
    }
    return cells;
  }

  function categoryColumns(w) {
    var out = [];
    if (w.cost) out.push("Cost (" + (w.cost.currency || "USD") + ")");
    if (w.cached_tokens !== null && w.cached_tokens !== undefined) out.push("Cached");
    return out;
  }

  // The stage over time: one bar per call (its latest snapshot), axes, the window's 80% / 95% lines, compactions.
  function timeline(box, points, windowSize) {
    if (!points || !points.length) return;
    var NS = "http://www.w3.org/2000/svg";
    var wrap = el("div", { "class": "timeline", "data-field": "history" });
    wrap.appendChild(el("h4", {}, "The stage over time: input tokens per call (" + points.length + ")"));
    var max = Math.max.apply(null, points.map(function (p) { return p.input_tokens || 0; })) || 1;
    var top = windowSize && max >= windowSize / 4 ? Math.max(windowSize, max) : max;
    // right: room for the last "call N" label, centred under its bar
    var width = 480, height = 140, left = 48, right = 24, bottom = 22, plot = height - bottom - 4;
    var slot = (width - left - right) / Math.max(points.length, 10);
    var svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "Input tokens of the last " + points.length + " calls of the stage: " +
      points.map(function (p) { return fmt.tokens(p.input_tokens || 0); }).join(", "));
    function line(x1, y1, x2, y2, cls) {
      var l = document.createElementNS(NS, "line");
      l.setAttribute("x1", String(x1)); l.setAttribute("y1", String(y1));
      l.setAttribute("x2", String(x2)); l.setAttribute("y2", String(y2));
      l.setAttribute("class", cls);
      svg.appendChild(l);
      return l;
    }
    function text(x, y, s, cls, anchor) {
      var t = document.createElementNS(NS, "text");
      t.setAttribute("x", String(x)); t.setAttribute("y", String(y));
      t.setAttribute("class", cls);
      if (anchor) t.setAttribute("text-anchor", anchor);
      t.textContent = s;
      svg.appendChild(t);
    }
    var y = function (v) { return 4 + plot - plot * v / top; };
    line(left, 4, left, 4 + plot, "axis");
    line(left, 4 + plot, width - right, 4 + plot, "axis");
    text(left - 4, y(top) + 4, fmt.tokens(top), "tick", "end");
    text(left - 4, y(0), "0", "tick", "end");
    if (windowSize && top >= windowSize) {
      [0.8, 0.95].forEach(function (f) { line(left, y(f * windowSize), width - right, y(f * windowSize), "mark mark-" + Math.round(f * 100)); });
    }
    points.forEach(function (p, i) {
      var h = Math.max(1, plot * (p.input_tokens || 0) / top);
      var r = document.createElementNS(NS, "rect");
      r.setAttribute("x", String(left + i * slot + 1));
      r.setAttribute("y", String(4 + plot - h));
      r.setAttribute("width", String(Math.max(1, slot - 2)));
      r.setAttribute("height", String(h));
      r.setAttribute("class", p.count_method || "");
      var t = document.createElementNS(NS, "title");
      t.textContent = "call " + (i + 1) + ": " + fmt.tokens(p.input_tokens || 0) + " tokens" +
        (p.input_cost !== null && p.input_cost !== undefined ? ", " + fmt.usd(p.input_cost) : "") + " (" + (p.count_method || "") + ")";
      r.appendChild(t);
      svg.appendChild(r);
      if (p.compaction) {
        var m = line(left + i * slot, 4, left + i * slot, 4 + plot, "compaction");
        var mt = document.createElementNS(NS, "title");
        mt.textContent = "compacted: conversation " + fmt.tokens(p.compaction.before_tokens) + " → " + fmt.tokens(p.compaction.after_tokens) + " tokens";
        m.appendChild(mt);
      }
    });
    // The first and the last call, each label centred under its bar.
    text(left + slot / 2, height - 6, "call 1", "tick", "middle");
    if (points.length > 1) text(left + (points.length - 1) * slot + slot / 2, height - 6, "call " + points.length, "tick", "middle");
    wrap.appendChild(svg);
    var compactions = points.filter(function (p) { return p.compaction; }).length;
    if (compactions) wrap.appendChild(el("p", { "class": "meta", "data-field": "compactions" }, compactions + " compaction(s): dashed lines, where a request carried less conversation than the one before."));
    box.appendChild(wrap);
  }

  global.cwUsage = { tools: tools, totals: totals, categoryCells: categoryCells, categoryColumns: categoryColumns, timeline: timeline };
})(window);

/* The live page of cw-middleware serve: runs, stages, and what fills each stage's context window.

   Data comes from the JSON API (/api/v1/...) and, on a run's page, from its event stream
   (/api/v1/runs/{run_id}/events), read with fetch streaming so the bearer token travels as an
   Authorization header (EventSource cannot send one); Last-Event-ID resumes after a drop.
   Without streaming it polls the JSON API every second, as the list of runs always does. The token is asked for when the API
   answers 401 and kept in this tab only (memory and sessionStorage), never in a URL.
   Everything shown is set with textContent: ids and source labels are never parsed as HTML. */
(function () {
  "use strict";

  var CATEGORIES = ["system_prompt", "tools", "mcp_tools", "skills", "memory", "conversation", "other"];
  var LABEL = {
    system_prompt: "System prompt", tools: "Tools", mcp_tools: "MCP tools", skills: "Skills",
    memory: "Memory", conversation: "Conversation", other: "Other"
  };
  var GLYPH = { system_prompt: "S", tools: "T", mcp_tools: "M", skills: "K", memory: "Y", conversation: "C", other: "O" };
  var METHOD = {
    local_estimate: "Estimated locally with the model's tokenizer, before the provider answered.",
    response_usage_scaled_breakdown: "Total from the input tokens the provider reported for the call; categories scaled from the local estimate to match it.",
    provider_api_scaled_breakdown: "Total from the provider's token-count API; categories scaled from the local estimate to match it."
  };
  var REASON = {
    not_agent_stage: "this stage does not call a model",
    not_observed: "no snapshot has been recorded for this stage yet",
    provider_unconfigured: "the provider cannot be asked for a count"
  };
  // Where the server's routes are mounted ("" for cw-middleware serve; an app's path for cw.asgi_app()).
  var ROOT = document.documentElement.getAttribute("data-root") || "";
  var TOP_SOURCES = 8;
  var POLL_MS = 1000; // the runs list, and a run's page without an event stream: "within a second" (README)
  var NEAR_FULL_PERCENT = 80; // the warning alert's share of the window, and the forecast's default threshold
  var FULL_PERCENT = 95; // the critical alert's
  var BAR_CELLS = 50; // `show`'s bar (render.py's BAR_WIDTH): a category under one cell is named beside it
  var STORAGE_KEY = "cw-middleware-token";
  var fmt = window.cwFormat;

  var token = null;
  try { token = window.sessionStorage.getItem(STORAGE_KEY); } catch (e) { token = null; }

  var state = {
    runId: null, stages: {}, order: [], windows: {}, timelines: {}, selected: null,
    lastEventId: null, abort: null, pollTimer: null, streamFailures: 0, updates: 0,
    picked: false, histories: {}, historyKeys: {}, historyLoading: {}, showAllSources: false, retryTimer: null,
    summaries: {}, runs: [], runsKey: null
  };
  var parts = window.cwUsage; // usage.js: tools, totals, cost and cache cells, the stage over time
  var SUMMARIZED_RUNS = 20; // the runs list asks for the summary (model, peak, tokens, cost) of the newest ones

  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function every() { return "every " + fmt.general(POLL_MS / 1000) + " s"; }

  // A time from the API: local time with its zone written out, the ISO time in its title and datetime.
  function timeEl(iso) {
    if (!iso) return document.createTextNode("?");
    return el("time", { datetime: iso, title: iso }, fmt.time(iso));
  }

  function setConn(kind, text) {
    var c = $("conn");
    c.dataset.state = kind;
    c.textContent = text;
  }

  function notice(text) {
    var n = $("notice");
    n.hidden = !text;
    n.textContent = text || "";
  }

  function markUpdated() {
    state.updates += 1;
    document.body.dataset.updates = String(state.updates);
    document.body.dataset.updatedAt = String(Date.now());
  }

  // ------------------------------------------------------------------ HTTP

  function headers(extra) {
    var h = extra || {};
    if (token) h.Authorization = "Bearer " + token;
    return h;
  }

  function Unauthorized() { this.name = "Unauthorized"; }

  function api(path) {
    return fetch(ROOT + path, { headers: headers({ Accept: "application/json" }), cache: "no-store" }).then(function (r) {
      if (r.status === 401) throw new Unauthorized();
      return r.json().then(function (body) {
        if (!r.ok) {
          var err = new Error((body.error && body.error.message) || ("HTTP " + r.status));
          err.status = r.status;
          throw err;
        }
        return body;
      });
    });
  }

  function failed(err) {
    if (err instanceof Unauthorized) return showSignIn(token ? "That token was not accepted." : "");
    if (err && err.status === 404) return notice(err.message);
    notice("The server could not answer: " + (err && err.message ? err.message : "connection failed"));
    setConn("offline", "offline");
  }

  // ------------------------------------------------------------------ sign in

  function showSignIn(message) {
    stopLive();
    ["runs", "run"].forEach(function (id) { $(id).hidden = true; });
    $("signin").hidden = false;
    $("signin-error").textContent = message || "";
    setConn("offline", "sign in needed");
    $("token").focus();
  }

  $("signin-form").addEventListener("submit", function (event) {
    event.preventDefault();
    token = $("token").value;
    $("token").value = "";
    try { window.sessionStorage.setItem(STORAGE_KEY, token); } catch (e) { /* memory only */ }
    $("signin").hidden = true;
    route();
  });

  // ------------------------------------------------------------------ runs

  function showRuns() {
    $("runs").hidden = false;
    document.title = "Runs · cw-middleware";
    var load = function () {
      api("/api/v1/runs").then(function (body) {
        notice("");
        setConn("polling", "updated " + every());
        renderRuns(body.runs);
        markUpdated();
      }).catch(failed);
    };
    load();
    state.pollTimer = window.setInterval(load, POLL_MS);
  }

  function renderRuns(runs) {
    state.runs = runs;
    runs.forEach(function (r, i) {
      var known = state.summaries[r.run_id];
      if (i < SUMMARIZED_RUNS && (!known || known.seen !== r.last_seen_at) && !(known && known.loading)) summarize(r);
    });
    // Asked every second: redrawn only when something changed, so a focused link keeps its focus.
    var key = JSON.stringify(runs) + JSON.stringify(runs.map(function (r) {
      var known = state.summaries[r.run_id];
      return known && known.report ? known.seen : null;
    }));
    if (key === state.runsKey) return;
    state.runsKey = key;
    var tbody = $("runs-table").querySelector("tbody");
    tbody.textContent = "";
    $("runs-empty").hidden = runs.length > 0;
    runs.forEach(function (r) {
      var tr = el("tr", { "data-run": r.run_id });
      var td = el("td");
      td.appendChild(el("a", { href: ROOT + "/runs/" + encodeURIComponent(r.run_id) }, r.run_id));
      tr.appendChild(td);
      tr.appendChild(el("td", { "class": "num" }, r.stages));
      tr.appendChild(el("td", { "class": "num" }, r.live_stages));
      var known = state.summaries[r.run_id];
      var report = known && known.report;
      var latest = report ? report.stages.filter(function (s) { return s.input_tokens !== null; }).pop() : null;
      var t = report ? report.totals : null;
      tr.appendChild(el("td", { "data-field": "model" }, report ? report.model || "?" : ""));
      tr.appendChild(el("td", { "class": "num", "data-field": "peak" },
        t && t.peak_usage_percent !== null ? fmt.fixed1(t.peak_usage_percent) + "%" : ""));
      tr.appendChild(el("td", { "class": "num", "data-field": "latest" }, latest ? fmt.tokens(latest.input_tokens) : ""));
      tr.appendChild(el("td", { "class": "num", "data-field": "cost" }, t ? fmt.usd(t.input_cost) : ""));
      var seen = el("td", { "data-field": "last_seen" });
      seen.appendChild(timeEl(r.last_seen_at));
      tr.appendChild(seen);
      tbody.appendChild(tr);
    });
  }

  // A run's summary, asked for again only when the run has new activity.
  function summarize(r) {
    var known = state.summaries[r.run_id] || (state.summaries[r.run_id] = {});
    known.loading = true;
    api("/api/v1/runs/" + encodeURIComponent(r.run_id) + "/summary").then(function (report) {
      known.report = report;
      known.seen = r.last_seen_at;
      known.loading = false;
      if (!state.runId) { renderRuns(state.runs); markUpdated(); }
    }).catch(function () { known.loading = false; known.seen = r.last_seen_at; });
  }

  // ------------------------------------------------------------------ one run

  function showRun(runId) {
    state.runId = runId;
    $("run").hidden = false;
    $("run-title").textContent = "Run " + runId;
    document.title = runId + " · cw-middleware";
    var wanted = /^#stage=(.+)$/.exec(window.location.hash);
    if (wanted) { state.selected = decodeURIComponent(wanted[1]); state.picked = true; }
    loadRun(runId);
  }

  // A run opened before it exists (the agent has not started yet) is looked for again until it appears.
  function loadRun(runId) {
    api("/api/v1/runs/" + encodeURIComponent(runId) + "/stages").then(function (body) {
      notice("");
      body.stages.forEach(function (s) { onStage(s, false); });
      renderStages();
      if (window.ReadableStream && window.TextDecoderStream) stream(); else startPolling();
    }).catch(function (err) {
      if (err && err.status === 404 && state.runId === runId) {
        notice("Run " + runId + " is not in the backend yet; this page shows it as soon as it appears.");
        setConn("polling", "waiting for the run");
        state.retryTimer = window.setTimeout(function () { if (state.runId === runId) loadRun(runId); }, POLL_MS);
        return;
      }
      failed(err);
    });
  }

  function onStage(summary, render) {
    var id = summary.stage_id;
    if (!(id in state.stages)) state.order.push(id);
    state.stages[id] = summary;
    // Follow the newest live stage, unless the user picked one.
    if (!state.picked && summary.staleness === "live" && summary.agent_stage !== false && id !== state.selected) {
      var current = state.selected ? state.stages[state.selected] : null;
      if (!current || current.staleness !== "live" || (summary.started_at || "") > (current.started_at || "")) {
        state.selected = id;
        if (render !== false && state.windows[id]) renderStage();
        else if (render !== false) api(windowPath(id)).then(function (w) { onSnapshot(w); markUpdated(); }).catch(failed);
      }
    }
    if (render !== false) renderStages();
  }

  function onSnapshot(win) {
    var id = win.stage_id;
    var previous = state.windows[id];
    state.windows[id] = win;
    if (win.available) {
      var line = state.timelines[id] || (state.timelines[id] = []);
      var key = win.generated_at + "#" + win.event_seq;
      if (!line.length || line[line.length - 1].key !== key) {
        line.push({ key: key, tokens: win.input_tokens, method: win.count_method, at: win.generated_at });
        if (line.length > 60) line.shift();
      }
    }
    if (!state.selected) state.selected = defaultStage();
    if (id === state.selected || !previous) renderStage();
  }

  function defaultStage() {
    var best = null;
    state.order.forEach(function (id) {
      var s = state.stages[id];
      if (s.agent_stage === false) return;
      if (!best || (s.last_seen_at || "") >= (state.stages[best].last_seen_at || "")) best = id;
    });
    return best || state.order[0] || null;
  }

  function select(id, focus) {
    state.selected = id;
    state.picked = true;
    history.replaceState(null, "", "#stage=" + encodeURIComponent(id));
    renderStages(focus);
    if (state.windows[id]) renderStage();
    else api(windowPath(id)).then(function (w) { onSnapshot(w); markUpdated(); }).catch(failed);
  }

  function windowPath(id) {
    return "/api/v1/runs/" + encodeURIComponent(state.runId) + "/stages/" + encodeURIComponent(id) + "/context-window";
  }

  // The run as a tree: each stage followed by its sub-agents' stages (a stage names its parent), in the listing's order.
  function treeOrder() {
    var out = [], placed = {};
    function place(id, depth) {
      if (placed[id]) return;
      placed[id] = true;
      out.push({ id: id, depth: depth });
      state.order.forEach(function (child) {
        if (state.stages[child].parent_stage_id === id) place(child, depth + 1);
      });
    }
    state.order.forEach(function (id) {
      var parent = state.stages[id].parent_stage_id;
      if (!parent || !(parent in state.stages)) place(id, 0);
    });
    state.order.forEach(function (id) { place(id, 0); }); // a cycle of parents: at the top, once
    return out;
  }

  // A sub-agent's parent and a parent's sub-agents, each a button that selects that stage.
  function renderFamily(box, w) {
    var parent = w.parent_stage_id, children = w.child_stage_ids || [];
    if (!parent && !children.length) return;
    var p = el("p", { "class": "family", "data-field": "family" });
    function link(id) {
      var b = el("button", { type: "button", "class": "linkish", "data-stage": id }, id);
      b.addEventListener("click", function () { select(id, false); });
      return b;
    }
    if (parent) {
      p.appendChild(document.createTextNode("Sub-agent of "));
      p.appendChild(link(parent));
      if (children.length) p.appendChild(document.createTextNode(". "));
    }
    if (children.length) {
      p.appendChild(document.createTextNode("Sub-agents: "));
      children.forEach(function (id, k) {
        if (k) p.appendChild(document.createTextNode(", "));
        p.appendChild(link(id));
      });
      // The stage with its sub-agents' calls rolled up, as the run's summary (and `cw-middleware summary`) has it.
      var rolled = el("span", { "data-field": "rolled_up" });
      p.appendChild(rolled);
      var stageId = w.stage_id, runId = state.runId;
      api("/api/v1/runs/" + encodeURIComponent(runId) + "/summary").then(function (report) {
        var row = (report.stages || []).filter(function (r) { return r.stage_id === stageId; })[0];
        var t = row && row.rolled_up;
        if (!t || state.runId !== runId) return;
        rolled.textContent = ". With them: " + t.calls + " call(s), " + fmt.tokens(t.input_tokens || 0) + " input tokens, " +
          fmt.usd(t.input_cost) + " input";
      }).catch(function () { /* the stage's own numbers stand */ });
    }
    box.appendChild(p);
  }

  function renderStages(focusSelected) {
    if (!state.selected) state.selected = defaultStage();
    var ul = $("stages");
    ul.textContent = "";
    var rows = treeOrder();
    rows.forEach(function (row, i) {
      var id = row.id;
      var s = state.stages[id];
      var li = el("li", { "data-depth": String(row.depth) });
      li.style.paddingLeft = Math.min(row.depth, 6) + "rem";
      var b = el("button", { type: "button", "data-stage": id, "aria-current": id === state.selected ? "true" : "false" });
      if (row.depth) b.setAttribute("aria-description", "sub-agent of " + s.parent_stage_id);
      b.appendChild(el("span", { "class": "id" }, (row.depth ? "↳ " : "") + id));
      b.appendChild(el("span", { "class": "badge " + s.staleness }, s.staleness + (s.kind && s.kind !== "agent" ? " · " + s.kind : "")));
      b.addEventListener("click", function () { select(id); });
      b.addEventListener("keydown", function (event) {
        var step = { ArrowDown: 1, ArrowUp: -1 }[event.key];
        if (event.key === "Home") step = -i;
        if (event.key === "End") step = rows.length - 1 - i;
        if (step === undefined) return;
        event.preventDefault();
        var next = rows[Math.max(0, Math.min(rows.length - 1, i + step))].id;
        select(next, true);
      });
      li.appendChild(b);
      ul.appendChild(li);
      if (focusSelected && id === state.selected) b.focus();
    });
  }

  function renderStage() {
    var box = $("stage");
    var id = state.selected;
    var w = id ? state.windows[id] : null;
    box.textContent = "";
    delete box.dataset.fill;
    if (!w) {
      box.appendChild(el("p", { "class": "empty" }, id ? "Waiting for this stage's first snapshot." : "No stages yet."));
      return;
    }
    box.appendChild(el("h3", {}, "Stage " + id));
    renderFamily(box, w);
    if (!w.available) {
      box.appendChild(el("p", { "class": "empty", "data-field": "unavailable" },
        "No context-window data: " + (REASON[w.unavailable_reason] || w.unavailable_reason || "unavailable") + "."));
      renderWarnings(box, w);
      return;
    }
    var total = w.input_tokens || 0;
    var windowSize = w.context_window_tokens;
    var model = w.model || "?";
    if (w.provider && model.toLowerCase().indexOf(w.provider.toLowerCase() + "/") !== 0) model = w.provider + "/" + model;
    var usage = el("p", { "class": "usage", "data-field": "usage" });
    usage.appendChild(el("strong", { "data-field": "model" }, model));
    usage.appendChild(document.createTextNode("  "));
    usage.appendChild(el("span", { "data-field": "input_tokens", "data-tokens": total }, fmt.tokens(total)));
    usage.appendChild(document.createTextNode(windowSize
      ? " / " + fmt.tokens(windowSize) + " tokens (" + fmt.percent(total, windowSize) + ")" : " tokens (window unknown)"));
    box.appendChild(usage);
    // At or above the forecast's threshold (the warning alert's 80% unless set otherwise): near full; at 95%: full.
    var threshold = w.forecast && w.forecast.threshold_percent ? w.forecast.threshold_percent : NEAR_FULL_PERCENT;
    var used = windowSize ? 100 * total / windowSize : null;
    var fill = used === null ? null : used >= FULL_PERCENT ? "full" : used >= threshold ? "near-full" : null;
    if (fill) {
      box.dataset.fill = fill;
      var fillNote = el("p", { "class": "fill-state " + fill });
      fillNote.appendChild(el("strong", { "class": "fill-badge", "data-field": "fill" }, fill === "full" ? "full" : "near full"));
      fillNote.appendChild(document.createTextNode(fill === "full"
        ? " at or above " + FULL_PERCENT + "% of the window: the next requests may be truncated or refused."
        : " at or above " + fmt.general(threshold) + "% of the window, the forecast's threshold."));
      box.appendChild(fillNote);
    }

    var tokens = {};
    (w.breakdown || []).forEach(function (b) { tokens[b.category] = b.tokens; });
    var scale = Math.max(windowSize || 0, total) || 1;
    var description = CATEGORIES.filter(function (c) { return tokens[c]; }).map(function (c) {
      return LABEL[c] + " " + fmt.tokens(tokens[c]) + " tokens";
    });
    if (windowSize) description.push("free space " + fmt.tokens(Math.max(windowSize - total, 0)) + " tokens");
    var bar = el("div", { "class": "bar window", role: "img", "aria-label": "Context window: " + description.join(", ") +
      (fill ? "; " + (fill === "full" ? "full" : "near full") : "") });
    CATEGORIES.forEach(function (c) {
      if (!tokens[c]) return;
      var seg = el("span", { "data-category": c, title: LABEL[c] + ": " + fmt.tokens(tokens[c]) + " tokens" });
      seg.style.width = (100 * tokens[c] / scale) + "%";
      seg.style.background = "var(--" + c + ")";
      if (100 * tokens[c] / scale >= 3) seg.textContent = GLYPH[c];
      bar.appendChild(seg);
    });
    if (windowSize && windowSize > total) {
      var free = el("span", { "class": "free", title: "Free space" });
      free.style.width = (100 * (windowSize - total) / scale) + "%";
      bar.appendChild(free);
    }
    var legend = null;
    if (windowSize) {
      // The alert rules' 80% and 95%, the forecast's threshold (on the 80% mark unless set elsewhere), and where
      // the window ends when the request does not fit in it; a legend under the bar names each.
      var marks = [
        { at: NEAR_FULL_PERCENT, key: String(NEAR_FULL_PERCENT), text: NEAR_FULL_PERCENT + "%: the warning alert" },
        { at: FULL_PERCENT, key: String(FULL_PERCENT), text: FULL_PERCENT + "%: the critical alert" }
      ];
      if (w.forecast) {
        var same = marks.filter(function (m) { return m.at === threshold; })[0];
        if (same) { same.text += " and the forecast's threshold"; same.threshold = true; }
        else marks.push({ at: threshold, key: "threshold", text: fmt.general(threshold) + "%: the forecast's threshold", threshold: true });
      }
      legend = el("p", { "class": "legend", "data-field": "legend" });
      marks.forEach(function (m) {
        var mark = el("i", { "class": "mark" + (m.threshold ? " threshold" : ""), "data-mark": m.key, title: m.text });
        mark.style.left = (m.at * windowSize / scale) + "%";
        bar.appendChild(mark);
        var item = el("span", { "class": "legend-item" });
        item.appendChild(el("i", { "class": "key", "data-mark": m.key, "aria-hidden": "true" }));
        item.appendChild(document.createTextNode(m.text));
        legend.appendChild(item);
      });
      if (total > windowSize) {
        var end = el("i", { "class": "mark window-end", "data-mark": "end", title: "The window ends here" });
        end.style.left = (100 * windowSize / scale) + "%";
        bar.appendChild(end);
        var endItem = el("span", { "class": "legend-item" });
        endItem.appendChild(el("i", { "class": "key", "data-mark": "end", "aria-hidden": "true" }));
        endItem.appendChild(document.createTextNode("where the window ends"));
        legend.appendChild(endItem);
      }
    }
    box.appendChild(el("p", { "class": "meta" }, "The window, to scale:"));
    box.appendChild(bar);
    var small = tooSmall(tokens, scale);
    if (small.length) {
      box.appendChild(el("p", { "class": "meta too-small", "data-field": "too-small", "data-categories": small.join(" ") },
        "Also in the window, too small to draw (under one cell, " + (100 / BAR_CELLS) + "% of the bar, each): " +
        small.map(function (c) { return GLYPH[c] + " " + LABEL[c] + " " + fmt.tokens(tokens[c]); }).join(", ") + " tokens."));
    }
    if (legend) box.appendChild(legend);
    if (w.forecast) box.appendChild(el("p", { "class": "forecast", "data-field": "forecast" }, forecastLine(w.forecast)));
    // The same tokens as shares of the input: readable when the request fills a sliver of a large window.
    var mix = el("div", { "class": "bar", role: "img", "aria-label": "Input by category: " + CATEGORIES.filter(function (c) {
      return tokens[c];
    }).map(function (c) { return LABEL[c] + " " + fmt.percent(tokens[c], total || 1); }).join(", ") });
    CATEGORIES.forEach(function (c) {
      if (!tokens[c]) return;
      var seg = el("span", { "data-category": c, title: LABEL[c] + ": " + fmt.percent(tokens[c], total || 1) + " of the input" });
      seg.style.width = (100 * tokens[c] / (total || 1)) + "%";
      seg.style.background = "var(--" + c + ")";
      if (100 * tokens[c] / (total || 1) >= 3) seg.textContent = GLYPH[c];
      mix.appendChild(seg);
    });
    box.appendChild(el("p", { "class": "meta" }, "The input, by category:"));
    box.appendChild(mix);
    if (windowSize && total > windowSize) {
      box.appendChild(el("p", { "class": "error" }, "Does not fit: " + fmt.tokens(total) + " input tokens exceed the " +
        fmt.tokens(windowSize) + "-token window by " + fmt.tokens(total - windowSize) + "; the provider will reject or truncate this request."));
    }

    var table = el("table", { "data-field": "breakdown" });
    table.appendChild(el("caption", { "class": "sr-only" }, "Tokens per category"));
    var head = el("tr");
    var extra = parts.categoryColumns(w);
    ["Category", "Tokens", windowSize ? "Of the window" : "Of the input"].concat(extra).forEach(function (t, i) {
      head.appendChild(el("th", { scope: "col", "class": i ? "num" : "" }, t));
    });
    var thead = el("thead");
    thead.appendChild(head);
    table.appendChild(thead);
    var tbody = el("tbody");
    CATEGORIES.forEach(function (c) {
      var n = tokens[c] || 0;
      var tr = el("tr", { "data-category": c });
      var name = el("th", { scope: "row" });
      var sw = el("span", { "class": "swatch", "aria-hidden": "true" }, GLYPH[c]);
      sw.style.background = "var(--" + c + ")";
      name.appendChild(sw);
      name.appendChild(document.createTextNode(LABEL[c]));
      tr.appendChild(name);
      tr.appendChild(el("td", { "class": "num", "data-tokens": n }, fmt.tokens(n)));
      tr.appendChild(el("td", { "class": "num" }, fmt.percent(n, windowSize || total || 1)));
      parts.categoryCells(w, c, n).forEach(function (cell) { tr.appendChild(cell); });
      tbody.appendChild(tr);
    });
    if (windowSize) {
      var freeN = Math.max(windowSize - total, 0);
      var tr = el("tr", { "data-category": "free" });
      var name = el("th", { scope: "row" });
      name.appendChild(el("span", { "class": "swatch free-swatch", "aria-hidden": "true" }, "·"));
      name.appendChild(document.createTextNode("Free space"));
      tr.appendChild(name);
      tr.appendChild(el("td", { "class": "num", "data-tokens": freeN }, fmt.tokens(freeN)));
      tr.appendChild(el("td", { "class": "num" }, fmt.percent(freeN, windowSize)));
      extra.forEach(function () { tr.appendChild(el("td", { "class": "num" }, "")); });
      tbody.appendChild(tr);
    }
    table.appendChild(tbody);
    var scroll = el("div", { "class": "scroll", tabindex: "0", role: "region", "aria-label": "Tokens per category" });
    scroll.appendChild(table);
    box.appendChild(scroll);
    renderSuggestions(box, w);

    var meta = el("p", { "class": "meta", "data-field": "count_method" });
    meta.textContent = (METHOD[w.count_method] || w.count_method || "") + " " +
      (w.staleness === "live" ? "The stage is still running." : "The stage has ended; this is its last snapshot.");
    if (w.generated_at) {
      meta.appendChild(document.createTextNode(" Taken "));
      meta.appendChild(timeEl(w.generated_at));
      meta.appendChild(document.createTextNode("."));
    }
    box.appendChild(meta);

    if (w.details && w.details.length) {
      box.appendChild(el("h4", {}, "Top sources"));
      var dt = el("table", { "data-field": "details" });
      var dh = el("tr");
      ["Source", "Category", "Tokens"].forEach(function (t, i) { dh.appendChild(el("th", { scope: "col", "class": i === 2 ? "num" : "" }, t)); });
      var dthead = el("thead");
      dthead.appendChild(dh);
      dt.appendChild(dthead);
      var dbody = el("tbody");
      w.details.slice(0, state.showAllSources ? w.details.length : TOP_SOURCES).forEach(function (d) {
        var tr = el("tr");
        tr.appendChild(el("td", {}, d.source));
        tr.appendChild(el("td", {}, LABEL[d.category] || d.category));
        tr.appendChild(el("td", { "class": "num", "data-tokens": d.tokens }, fmt.tokens(d.tokens)));
        dbody.appendChild(tr);
      });
      dt.appendChild(dbody);
      box.appendChild(dt);
      if (w.details.length > TOP_SOURCES) {
        var more = el("button", { type: "button", "class": "more", "data-field": "more-sources", "aria-expanded": String(state.showAllSources) },
          state.showAllSources ? "Show the top " + TOP_SOURCES : "Show all " + w.details.length + " sources");
        more.addEventListener("click", function () { state.showAllSources = !state.showAllSources; renderStage(); });
        box.appendChild(more);
      }
    }
    parts.totals(box, w);
    parts.tools(box, w);
    renderWarnings(box, w);
    if (state.histories[id]) parts.timeline(box, state.histories[id], windowSize);
    else renderTimeline(box, id);
    loadHistory(id, w);
  }

  // `show`'s bar (render.py's _bar): largest-remainder cells out of BAR_CELLS, no category promoted to a cell it has
  // not earned; the categories with tokens that got none, in the categories' order.
  function tooSmall(tokens, scale) {
    var raw = {}, cells = {}, sum = 0;
    CATEGORIES.forEach(function (c) {
      raw[c] = BAR_CELLS * (tokens[c] || 0) / scale;
      cells[c] = Math.floor(raw[c]);
      sum += tokens[c] || 0;
    });
    var used = Math.min(BAR_CELLS, roundHalfEven(BAR_CELLS * sum / scale));
    var given = CATEGORIES.reduce(function (n, c) { return n + cells[c]; }, 0);
    CATEGORIES.slice().sort(function (a, b) { return (raw[b] - cells[b]) - (raw[a] - cells[a]); }).some(function (c) {
      if (given >= used) return true;
      if (raw[c] > cells[c]) { cells[c] += 1; given += 1; }
      return false;
    });
    return CATEGORIES.filter(function (c) { return (tokens[c] || 0) > 0 && cells[c] === 0; });
  }

  function roundHalfEven(x) {
    var r = Math.round(x);
    return Math.abs(x % 1) === 0.5 ? 2 * Math.round(x / 2) : r;
  }

  // The forecast as `show` prints it (render_usage.py's forecast_line).
  function forecastLine(f) {
    if (f.calls_until_threshold === null || f.calls_until_threshold === undefined) {
      return "Forecast: not growing over its last " + f.basis_calls + " calls";
    }
    var when = f.calls_until_threshold === 0 ? "at the threshold now"
      : "≈" + f.calls_until_threshold + " call(s) to " + fmt.general(f.threshold_percent) + "%";
    return "Forecast: +" + fmt.tokens(f.growth_per_call_tokens) + " tokens a call (last " + f.basis_calls + " calls): " +
      when + ", ≈" + f.calls_until_full + " to a full window";
  }

  // What the stage's answer says to cut, largest saving first, under the rows they concern.
  function renderSuggestions(box, w) {
    if (!w.suggestions || !w.suggestions.length) return;
    box.appendChild(el("h4", {}, "Suggestions (largest saving first)"));
    var ul = el("ul", { "class": "suggestions", "data-field": "suggestions" });
    w.suggestions.forEach(function (x) {
      ul.appendChild(el("li", { "data-kind": x.kind, "data-target": x.target }, x.message));
    });
    box.appendChild(ul);
  }

  // The stage's whole history (GET .../history), asked for again when the stage has a newer snapshot.
  function loadHistory(id, w) {
    var key = w.generated_at + "#" + w.event_seq;
    if (state.historyKeys[id] === key || state.historyLoading[id]) return;
    state.historyLoading[id] = true;
    var path = "/api/v1/runs/" + encodeURIComponent(state.runId) + "/stages/" + encodeURIComponent(id) + "/history?limit=200";
    api(path).then(function (body) {
      state.historyLoading[id] = false;
      state.historyKeys[id] = key;
      state.histories[id] = body.snapshots;
      if (id === state.selected) { renderStage(); markUpdated(); }
    }).catch(function () { state.historyLoading[id] = false; state.historyKeys[id] = key; });
  }

  function renderWarnings(box, w) {
    if (!w.warnings || !w.warnings.length) return;
    box.appendChild(el("h4", {}, "Warnings"));
    var ul = el("ul", { "class": "warnings", "data-field": "warnings" });
    w.warnings.forEach(function (x) {
      var li = el("li");
      li.appendChild(el("code", {}, x.code));
      li.appendChild(document.createTextNode(": " + x.message));
      ul.appendChild(li);
    });
    box.appendChild(ul);
  }

  function renderTimeline(box, id) {
    var line = state.timelines[id] || [];
    if (!line.length) return;
    var wrap = el("div", { "class": "timeline" });
    wrap.appendChild(el("h4", {}, "Input tokens per snapshot (since this page opened)"));
    var max = Math.max.apply(null, line.map(function (p) { return p.tokens || 0; })) || 1;
    var NS = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(NS, "svg");
    var width = 400, height = 100, slot = width / Math.max(line.length, 10);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "Input tokens of the last " + line.length + " snapshots: " +
      line.map(function (p) { return fmt.tokens(p.tokens || 0); }).join(", "));
    line.forEach(function (p, i) {
      var h = Math.max(1, (height - 4) * (p.tokens || 0) / max);
      var r = document.createElementNS(NS, "rect");
      r.setAttribute("x", String(i * slot + 1));
      r.setAttribute("y", String(height - h));
      r.setAttribute("width", String(Math.max(1, slot - 2)));
      r.setAttribute("height", String(h));
      r.setAttribute("class", p.method || "");
      var t = document.createElementNS(NS, "title");
      t.textContent = fmt.tokens(p.tokens || 0) + " tokens (" + (p.method || "") + ")";
      r.appendChild(t);
      svg.appendChild(r);
    });
    wrap.appendChild(svg);
    box.appendChild(wrap);
  }

  // ------------------------------------------------------------------ live updates

  function dispatch(kind, data, id) {
    if (id) state.lastEventId = id;
    if (kind === "stage") onStage(data);
    else if (kind === "snapshot") onSnapshot(data);
    else if (kind === "backend_error") { notice("The backend failed to answer: " + data.error.message); return; }
    else if (kind === "reset") return;
    else return;
    notice("");
    markUpdated();
  }

  function parseBlock(block) {
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
    if (data.length) dispatch(kind, JSON.parse(data.join("\n")), id);
  }

  function stream() {
    var ctrl = new AbortController();
    state.abort = ctrl;
    var h = headers({ Accept: "text/event-stream" });
    if (state.lastEventId) h["Last-Event-ID"] = state.lastEventId;
    fetch(ROOT + "/api/v1/runs/" + encodeURIComponent(state.runId) + "/events", { headers: h, signal: ctrl.signal, cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) throw new Unauthorized();
        if (!r.ok || !r.body) { var e = new Error("HTTP " + r.status); e.status = r.status; throw e; }
        state.streamFailures = 0;
        stopPolling();
        setConn("streaming", "streaming");
        var reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        var buffer = "";
        function pump() {
          return reader.read().then(function (chunk) {
            if (chunk.done) throw new Error("the stream ended");
            buffer += chunk.value;
            var i;
            while ((i = buffer.indexOf("\n\n")) >= 0) {
              parseBlock(buffer.slice(0, i));
              buffer = buffer.slice(i + 2);
            }
            return pump();
          });
        }
        return pump();
      })
      .catch(function (err) {
        if (ctrl.signal.aborted) return;
        if (err instanceof Unauthorized) return showSignIn("That token was not accepted.");
        state.streamFailures += 1;
        if (state.streamFailures >= 3) startPolling();
        else setConn("offline", "reconnecting");
        window.setTimeout(function () { if (state.abort === ctrl) stream(); }, state.streamFailures >= 3 ? 15000 : 2000);
      });
  }

  function startPolling() {
    if (state.pollTimer) return;
    setConn("polling", "polling " + every() + " (no event stream)");
    var tick = function () {
      api("/api/v1/runs/" + encodeURIComponent(state.runId) + "/stages").then(function (body) {
        body.stages.forEach(function (s) { onStage(s, false); });
        renderStages();
        return state.selected ? api(windowPath(state.selected)) : null;
      }).then(function (w) {
        if (w && JSON.stringify(w) !== JSON.stringify(state.windows[w.stage_id])) { onSnapshot(w); markUpdated(); }
      }).catch(failed);
    };
    tick();
    state.pollTimer = window.setInterval(tick, POLL_MS);
  }

  function stopPolling() {
    if (state.pollTimer) window.clearInterval(state.pollTimer);
    state.pollTimer = null;
  }

  function stopLive() {
    stopPolling();
    if (state.retryTimer) window.clearTimeout(state.retryTimer);
    state.retryTimer = null;
    if (state.abort) state.abort.abort();
    state.abort = null;
  }

  // ------------------------------------------------------------------ routing

  function route() {
    stopLive();
    var path = window.location.pathname;
    if (ROOT && path.indexOf(ROOT) === 0) path = path.slice(ROOT.length);
    var match = /^\/runs\/([^/]+)\/?$/.exec(path);
    if (match) showRun(decodeURIComponent(match[1]));
    else showRuns();
  }

  route();
})();

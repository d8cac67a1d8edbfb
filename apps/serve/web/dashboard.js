/*
 * The live ward dashboard: polls GET /api/state (the state contract of apps/serve/server.py) every
 * POLL_MS and keeps the page in step with it. No framework, no build step, nothing fetched
 * from anywhere but this server.
 *
 * One tile per vitals stream (#beds .bed[data-id]) and one row per keyword stream
 * (#kws .kws[data-id]) is created when the stream first appears, updated in place on every
 * poll (so the DOM nodes stay the same ones while a stream lives) and removed when the
 * server stops listing the stream. All server text goes through textContent (never HTML).
 *
 * A stream the server marks stale (connected, but no samples for more than the server's
 * stale_s: a frozen client, a stuck gateway) reads NO DATA: body of the tile greyed, no value
 * shown as a number, its clinical alarms replaced by the technical "no data" alarm (amber),
 * and [data-stale="true"]; the next poll after its data returns shows it live again.
 *
 * Each vital says why it shows no number: the server's reason ("warming up, 12 s left",
 * "ECG lead off (II: flat line)", "recovering, 20 s left", "no data", ...) under it, in
 * .reason ([data-status] the monitor's status), while the value reads "---" in grey. The
 * bed's configured alarm limits (its open's alarm rules: "hr>120") are shown next to the
 * value they watch (.limits: "> 120"), whether or not an alarm is active.
 *
 * A failed poll (network error, timeout, HTTP error, bad JSON) sets body[data-state] to
 * "unreachable", says so in #status, keeps the last state on screen (dimmed) and polls
 * again; the next good poll sets it back to "live". A 401 (a server with a token, a page
 * not opened as /?token=T) sets "unauthorized" and says how to open the page.
 */
"use strict";

(function () {
  const POLL_MS = 500; // time between the end of one poll and the start of the next
  const TIMEOUT_MS = 5000; // a poll that takes longer counts as failed
  const SVG_NS = "http://www.w3.org/2000/svg";
  const SPARK_W = 120; // sparkline viewBox width: one unit per second of history
  const SPARK_H = 32;
  // Display order, label and default sparkline range (widened to fit the data) per vital.
  const VITALS = [
    { key: "HR", label: "HR", units: "bpm", range: [50, 130] },
    { key: "RR", label: "RR", units: "breaths/min", range: [5, 30] },
    { key: "SpO2", label: "SpO\u2082", units: "%", range: [88, 100] },
  ];
  const VITAL_LABEL = { hr: "HR", rr: "RR", spo2: "SpO\u2082" };

  const $ = (id) => document.getElementById(id);
  const beds = new Map(); // stream id -> {el, parts...}
  const kwsRows = new Map(); // stream id -> {el, parts...}
  let lastOkWall = null; // Date of the last good poll
  let polls = 0;
  let failures = 0;
  const timing = { fetchMs: null, renderMs: null };
  const errors = []; // the last 20 failed polls: "ISO time  reason"

  // ---- small helpers ----------------------------------------------------------------

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function setText(e, text) {
    if (e.textContent !== text) e.textContent = text;
  }

  function setAttr(e, name, value) {
    if (e.getAttribute(name) !== value) e.setAttribute(name, value);
  }

  function isNum(v) {
    return typeof v === "number" && Number.isFinite(v);
  }

  /** 83 -> "1 m 23 s", 4000 -> "1 h 6 m"; "–" for a non-number. */
  function duration(s) {
    if (!isNum(s)) return "\u2013";
    s = Math.max(0, Math.floor(s));
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} m ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} m`;
  }

  function clock(unixS) {
    if (!isNum(unixS)) return "\u2013";
    return new Date(unixS * 1000).toLocaleTimeString([], { hour12: false });
  }

  /**
   * "0.4 s ago" for `t`, the seconds since an event (the contract's health.last_seen_s);
   * a Unix time (a server that sends one) is taken against the server clock.
   */
  function ago(t, serverTime) {
    if (!isNum(t)) return "";
    if (t > 1e9) {
      if (!isNum(serverTime)) return "";
      t = serverTime - t;
    }
    return t < 10 ? `${Math.max(0, t).toFixed(1)} s ago` : `${duration(t)} ago`;
  }

  /**
   * How long an alarm has been active: "for 1 m 5 s" from its onset `since` in stream
   * seconds, against `streamNow` (or a Unix time, against the server clock).
   */
  function alarmAge(since, streamNow, serverTime) {
    if (!isNum(since)) return "";
    if (since > 1e9) return isNum(serverTime) ? `for ${duration(serverTime - since)}` : "";
    if (isNum(streamNow) && streamNow >= since) return `for ${duration(streamNow - since)}`;
    return `since ${duration(since)}`;
  }

  /** "hr>120" -> "HR > 120" (a name the alarm syntax cannot parse is shown as it is). */
  function alarmText(name) {
    const m = /^\s*([a-z0-9_]+)\s*([<>]=?)\s*(.*)$/i.exec(String(name));
    if (!m) return String(name);
    const vital = VITAL_LABEL[m[1].toLowerCase()] || m[1];
    return `${vital} ${m[2]} ${m[3]}`;
  }

  // ---- sparkline ----------------------------------------------------------------------

  /**
   * The SVG path of history [[t, v|null], ...] over the seconds from its first t to its
   * last, at most the last SPARK_W; a null (or non-finite) value breaks the line. `d` is
   * "" when nothing is drawable.
   */
  function sparkPath(history, range) {
    const pts = Array.isArray(history)
      ? history.filter((p) => Array.isArray(p) && isNum(p[0]))
      : [];
    if (!pts.length) return { d: "", lo: range[0], hi: range[1] };
    const tEnd = pts[pts.length - 1][0];
    const tStart = Math.min(Math.max(pts[0][0], tEnd - (SPARK_W - 1)), tEnd - 1);
    let lo = range[0];
    let hi = range[1];
    for (const [t, v] of pts) {
      if (t >= tStart && isNum(v)) {
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
    }
    const pad = (hi - lo) * 0.08 || 1;
    lo -= pad;
    hi += pad;
    let d = "";
    let pen = false;
    for (const [t, v] of pts) {
      if (t < tStart || !isNum(v)) {
        pen = false;
        continue;
      }
      const x = ((t - tStart) / (tEnd - tStart)) * SPARK_W;
      const y = SPARK_H - ((v - lo) / (hi - lo)) * SPARK_H;
      d += `${pen ? "L" : "M"}${x.toFixed(1)} ${y.toFixed(1)}`;
      pen = true;
    }
    return { d, lo, hi };
  }

  function makeSpark(label) {
    const svg = document.createElementNS(SVG_NS, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("viewBox", `0 0 ${SPARK_W} ${SPARK_H}`);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", `${label} trend (up to the last 2 minutes)`);
    const path = document.createElementNS(SVG_NS, "path");
    path.setAttribute("vector-effect", "non-scaling-stroke");
    svg.appendChild(path);
    return { svg, path };
  }

  // ---- vitals tiles ---------------------------------------------------------------------

  function makeBed(id) {
    const tile = el("article", "bed");
    tile.dataset.id = id;
    tile.dataset.alarm = "";
    tile.setAttribute("aria-label", `Bed ${id}`);
    const head = el("header", "bed-head");
    const name = el("h3", "bed-id", id);
    const conn = el("span", "conn");
    const model = el("span", "model");
    head.append(name, model, conn);
    const vitals = el("div", "vitals");
    const parts = {};
    for (const v of VITALS) {
      const box = el("div", "vital");
      box.dataset.vital = v.key;
      box.dataset.valid = "false";
      const lab = el("span", "vname", v.label);
      const value = el("span", "value", "---");
      const units = el("span", "units", v.units);
      const limits = el("span", "limits");
      limits.setAttribute("aria-label", `${v.label} alarm limits`);
      const spark = makeSpark(v.label);
      const reason = el("span", "reason");
      reason.hidden = true;
      box.append(lab, value, units, limits, spark.svg, reason);
      vitals.append(box);
      parts[v.key] = {
        box, value, units, limits, reason, path: spark.path, spark: spark.svg,
        histKey: null, limitsKey: "",
      };
    }
    const alarms = el("ul", "alarms");
    alarms.setAttribute("aria-label", "Active alarms");
    const technical = el("ul", "technical");
    technical.setAttribute("aria-label", "Technical alarms");
    const health = el("p", "health");
    tile.append(head, vitals, technical, alarms, health);
    return { el: tile, conn, model, vitals: parts, alarms, technical, health, alarmKey: "", techKey: "" };
  }

  /**
   * Why vital `data` has no valid value: the server's reason, else (a server that sends
   * none) "no data" while stale, "disconnected" once closed, "" otherwise.
   */
  function reasonText(data, connected, stale, valid) {
    if (valid) return "";
    if (data && typeof data.reason === "string" && data.reason) return data.reason;
    if (stale) return "no data";
    return connected ? "" : "disconnected";
  }

  /** The alarm limits of a vital: its `limits` (else the stream's alarm_rules of it). */
  function vitalLimits(s, key, data) {
    if (data && Array.isArray(data.limits)) return data.limits;
    const rules = Array.isArray(s.alarm_rules) ? s.alarm_rules : [];
    return rules.filter((r) => String(r.vital || "").toLowerCase() === key.toLowerCase());
  }

  /** {name: "hr>120", op: ">", threshold: 120} -> "> 120" (else the alarm's text). */
  function limitText(r) {
    if (r && (r.op === ">" || r.op === "<") && isNum(r.threshold)) return `${r.op} ${r.threshold}`;
    const t = alarmText(r && r.name);
    return t.includes(" ") ? t.slice(t.indexOf(" ") + 1) : t;
  }

  function updateLimits(part, s, key, data, activeNames) {
    const lim = vitalLimits(s, key, data);
    const limKey = lim.map((r) => `${r.name}=${limitText(r)}`).join(" ");
    if (limKey !== part.limitsKey) {
      part.limits.replaceChildren(
        ...lim.map((r) => {
          const e = el("span", "limit", limitText(r));
          e.dataset.alarm = String(r.name);
          e.title = `alarm ${r.text || r.name}`;
          return e;
        }),
      );
      part.limitsKey = limKey;
    }
    for (const e of part.limits.children) {
      e.classList.toggle("active", activeNames.has(e.dataset.alarm));
    }
  }

  /** "live", "NO DATA" (connected, stale: no samples for a while) or "DISCONNECTED". */
  function setConn(item, s) {
    const connected = s.connected !== false;
    const stale = connected && s.stale === true;
    setAttr(item.el, "data-connected", String(connected));
    setAttr(item.el, "data-stale", String(stale));
    item.el.classList.toggle("disconnected", !connected);
    item.el.classList.toggle("stale", stale);
    setText(item.conn, !connected ? "DISCONNECTED" : stale ? "NO DATA" : "live");
    setText(item.model, Array.isArray(s.model) ? s.model.join(", ") : s.model || "");
    return { connected, stale };
  }

  /**
   * The technical alarms of a stream (a stale one: the server's "no data" alarm only) into
   * `item.technical`, announced when new; returns them.
   */
  function updateTechnical(item, s, what) {
    let tech = Array.isArray(s.technical) ? s.technical.map(String) : [];
    if (s.connected !== false && s.stale === true && !tech.length) tech = ["no data"];
    const techKey = tech.join("|");
    setAttr(item.el, "data-technical", techKey);
    if (techKey !== item.techKey) {
      item.technical.replaceChildren(...tech.map((m) => el("li", "tech", m)));
      const added = tech.filter((m) => !item.techKey.split("|").includes(m));
      if (added.length) announce(`${what} ${s.id}: technical alarm ${added.join(", ")}`);
      item.techKey = techKey;
    }
    return tech;
  }

  function updateBed(bed, s, serverTime) {
    const { connected, stale } = setConn(bed, s);

    // a stale bed's clinical alarms are as old as its values: not shown (the server sends
    // none either); its technical "no data" alarm takes their place
    const alarms = !stale && Array.isArray(s.alarms) ? s.alarms : [];
    const alarmVitals = new Set(alarms.map((a) => String(a.vital || "").toLowerCase()));
    const activeNames = new Set(alarms.map((a) => String(a.name)));
    const vitals = s.vitals || {};
    for (const v of VITALS) {
      const part = bed.vitals[v.key];
      const data = vitals[v.key];
      const present = data !== undefined && data !== null;
      const valid = present && !stale && data.valid === true && isNum(data.value);
      part.box.hidden = !present;
      setAttr(part.box, "data-valid", String(valid));
      part.box.classList.toggle("in-alarm", alarmVitals.has(v.key.toLowerCase()));
      setText(part.value, valid ? String(Math.round(data.value)) : "---");
      setText(part.units, (present && data.units) || v.units);
      // why there is no number (warming up, lead off, no data, ...), and the alarm limits
      const why = present ? reasonText(data, connected, stale, valid) : "";
      setText(part.reason, why);
      part.reason.hidden = !why;
      setAttr(part.box, "data-reason", why);
      setAttr(part.box, "data-status", stale ? "nodata"
        : (present && typeof data.status === "string" ? data.status : ""));
      updateLimits(part, s, v.key, present ? data : null, activeNames);
      const hist = present && Array.isArray(data.history) ? data.history : [];
      const key = hist.length ? `${hist.length} ${hist[0]} ${hist[hist.length - 1]}` : "";
      if (key !== part.histKey) { // redraw only when the history moved on
        const { d } = sparkPath(hist, v.range);
        setAttr(part.path, "d", d || "M0 0");
        part.path.style.visibility = d ? "" : "hidden";
        part.histKey = key;
      }
    }

    const names = alarms.map((a) => String(a.name));
    const key = names.join(" ");
    setAttr(bed.el, "data-alarm", key);
    bed.el.classList.toggle("alarming", names.length > 0);
    if (key !== bed.alarmKey) {
      bed.alarms.replaceChildren(
        ...alarms.map((a) => {
          const li = el("li", "alarm");
          li.dataset.alarm = String(a.name);
          li.append(el("span", "alarm-name", alarmText(a.name)), el("span", "alarm-since"));
          return li;
        }),
      );
      const added = names.filter((n) => !bed.alarmKey.split(" ").includes(n));
      if (added.length) announce(`Bed ${s.id}: alarm ${added.map(alarmText).join(", ")}`);
      bed.alarmKey = key;
    }
    // technical alarms (no signal on a channel, lead off, no data): no number meanwhile
    const tech = updateTechnical(bed, s, "Bed");
    bed.el.classList.toggle("no-signal", tech.length > 0);
    // the stream time of the latest event (serve/state.py's stream_time_s), else the seconds received
    const streamNow = isNum(s.stream_time_s) ? s.stream_time_s : s.health && s.health.received_s;
    alarms.forEach((a, i) => {
      const since = bed.alarms.children[i].querySelector(".alarm-since");
      setText(since, alarmAge(a.since_s, streamNow, serverTime));
    });

    updateHealth(bed.health, s.health, serverTime, connected, stale);
  }

  function updateHealth(p, h, serverTime, connected, stale) {
    h = h || {};
    const bits = [];
    if (stale) bits.push(`no data for ${duration(h.last_data_s)}`);
    bits.push(`received ${duration(h.received_s)}`);
    if (isNum(h.lag_ms)) bits.push(`lag ${Math.round(h.lag_ms)} ms`);
    bits.push(`dropped ${isNum(h.dropped_blocks) ? h.dropped_blocks : 0}`);
    bits.push(`errors ${isNum(h.errors) ? h.errors : 0}`);
    if (isNum(h.last_seen_s)) bits.push(`seen ${ago(h.last_seen_s, serverTime)}`);
    setText(p, bits.join(" \u00b7 "));
    const warn = !connected || stale || h.dropped_blocks > 0 || h.errors > 0 || h.lag_ms > 1000;
    p.classList.toggle("warn", Boolean(warn));
  }

  // ---- keyword streams ------------------------------------------------------------------

  function makeKws(id) {
    const row = el("article", "kws");
    row.dataset.id = id;
    row.setAttribute("aria-label", `Keyword stream ${id}`);
    const head = el("header", "kws-head");
    const conn = el("span", "conn");
    const model = el("span", "model");
    head.append(el("h3", "kws-id", id), model, conn);
    const health = el("p", "health");
    const technical = el("ul", "technical");
    technical.setAttribute("aria-label", "Technical alarms");
    const list = el("ol", "detections");
    list.setAttribute("aria-label", "Recent detections, newest first");
    const none = el("p", "none", "no detections yet");
    row.append(head, technical, health, list, none);
    return { el: row, conn, model, health, technical, list, none, key: "", techKey: "" };
  }

  function updateKws(row, s, serverTime) {
    const { connected, stale } = setConn(row, s);
    updateTechnical(row, s, "Keyword stream");
    updateHealth(row.health, s.health, serverTime, connected, stale);
    const dets = (Array.isArray(s.detections) ? s.detections : []).slice().reverse();
    const key = JSON.stringify(dets);
    if (key !== row.key) {
      row.list.replaceChildren(
        ...dets.map((d) => {
          const li = el("li", "detection");
          li.dataset.label = String(d.label);
          li.append(
            el("span", "det-label", String(d.label)),
            el("span", "det-score", isNum(d.score) ? d.score.toFixed(2) : ""),
            el("span", "det-time", isNum(d.t) ? `${d.t.toFixed(2)} s` : ""),
          );
          return li;
        }),
      );
      row.key = key;
    }
    row.none.hidden = dets.length > 0;
  }

  // ---- the whole page -----------------------------------------------------------------------

  /** Brings the children of `container` in line with `streams`, sorted by id. */
  function sync(container, registry, streams, make, update, serverTime) {
    const seen = new Set();
    const order = streams
      .filter((s) => s && s.id !== undefined)
      .sort((a, b) => String(a.id).localeCompare(String(b.id), undefined, { numeric: true }));
    for (const s of order) {
      const id = String(s.id);
      seen.add(id);
      let item = registry.get(id);
      if (!item) {
        item = make(id);
        registry.set(id, item);
      }
      update(item, s, serverTime);
    }
    for (const [id, item] of registry) {
      if (!seen.has(id)) {
        item.el.remove();
        registry.delete(id);
      }
    }
    // put the elements in order, touching only those out of place
    let prev = null;
    for (const s of order) {
      const node = registry.get(String(s.id)).el;
      const want = prev ? prev.nextSibling : container.firstChild;
      if (node !== want) container.insertBefore(node, want);
      prev = node;
    }
    return order.length;
  }

  function render(state) {
    const server = state.server || {};
    const streams = Array.isArray(state.streams) ? state.streams : [];
    const t = server.time;
    const nBeds = sync($("beds"), beds, streams.filter((s) => s && s.task === "vitals"),
      makeBed, updateBed, t);
    const nKws = sync($("kws"), kwsRows, streams.filter((s) => s && s.task === "kws"),
      makeKws, updateKws, t);
    $("beds-empty").hidden = nBeds > 0;
    $("kws-empty").hidden = nKws > 0;
    setText($("beds-count"), nBeds ? `(${nBeds})` : "");
    setText($("kws-count"), nKws ? `(${nKws})` : "");
    setText($("server-streams"), isNum(server.streams) ? String(server.streams) : String(streams.length));
    setText($("server-models"), Array.isArray(server.models) && server.models.length
      ? server.models.join(", ") : "\u2013");
    setText($("server-uptime"), duration(server.uptime_s));
    setText($("server-time"), clock(t));
    const alarming = [...beds.values()].filter((b) => b.alarmKey).length;
    document.title = alarming ? `(${alarming}) Ward \u00b7 liquid-stream` : "Ward \u00b7 liquid-stream";
  }

  function announce(text) {
    setText($("announce"), text);
  }

  function setStatus(state, text) {
    setAttr(document.body, "data-state", state);
    setText($("status"), text);
  }

  async function poll() {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    const t0 = performance.now();
    try {
      const r = await fetch("/api/state", { cache: "no-store", signal: ctl.signal });
      if (r.status === 401) {
        // a server with --token: GET /?token=T sets the cookie this fetch sends
        failures += 1;
        setStatus("unauthorized", "Token required: open this page as /?token=YOUR_TOKEN");
        return;
      }
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      const state = await r.json();
      const t1 = performance.now();
      render(state);
      timing.fetchMs = t1 - t0;
      timing.renderMs = performance.now() - t1;
      polls += 1;
      failures = 0;
      lastOkWall = new Date();
      setAttr(document.body, "data-polls", String(polls));
      setStatus("live", "Live");
    } catch (err) {
      failures += 1;
      const since = lastOkWall
        ? ` \u2014 showing the state of ${lastOkWall.toLocaleTimeString([], { hour12: false })}`
        : "";
      const why = err && err.name === "AbortError" ? "no answer" : String((err && err.message) || err);
      errors.push(`${new Date().toISOString()} ${why}`);
      if (errors.length > 20) errors.shift();
      setStatus("unreachable", `Server unreachable (${why}); retrying${since}`);
    } finally {
      clearTimeout(timer);
      setTimeout(poll, POLL_MS);
    }
  }

  // exposed for debugging from the console: good polls, failures in a row, the last good
  // poll's milliseconds fetching + parsing /api/state and rendering it, the last failures
  window.wardDashboard = {
    get polls() { return polls; },
    get failures() { return failures; },
    timing,
    errors,
  };
  poll();
})();

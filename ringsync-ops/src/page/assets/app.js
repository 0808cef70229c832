// The status page of `ringsync serve`. Plain JavaScript, no framework: it
// polls /v1/page and /v1/page/history every second and redraws; changes go
// through the API's own endpoints with the session's CSRF token and the
// profile's revision. Everything shown is set as text (textContent), never
// parsed as HTML: names and descriptions come from operators.
'use strict';

const EVERY_MS = 1000;
const MIN_WINDOW = 120;
const COLOURS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22'];
const DASHES = ['', '6 3', '2 3', '8 3 2 3'];

let csrf = '';
let viewer = null;
let data = null;
let samples = [];
let capacity = 600;
let pending = null; // the profile whose activation is being previewed
let timer = null;

const $ = (id) => document.getElementById(id);

/** An element with attributes and children (strings become text). */
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

/** One call to this server: status and parsed JSON (or null). */
async function call(method, path, body) {
  const headers = { 'Accept': 'application/json' };
  if (method !== 'GET') {
    headers['Content-Type'] = 'application/json';
    headers['X-Ringsync-Csrf'] = csrf;
  }
  const resp = await fetch(path, {
    method, headers, credentials: 'same-origin', cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let json = null;
  try { json = await resp.json(); } catch (_) { /* 204 or not JSON */ }
  return { status: resp.status, json };
}

function when(ms) {
  if (!ms) return '';
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

function inSeconds(ms) {
  const s = Math.round((ms - Date.now()) / 1000);
  if (s <= 0) return 'now';
  if (s < 120) return `in ${s} s`;
  return `in ${Math.round(s / 60)} min`;
}

// === login ===

function showLogin(message) {
  stop();
  viewer = null;
  $('app').hidden = true;
  $('who').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = message || '';
  $('token').focus();
}

function showApp(info) {
  viewer = info.viewer;
  csrf = info.csrf;
  $('login').hidden = true;
  $('app').hidden = false;
  $('who').hidden = false;
  $('viewer').textContent = `${viewer.name} (${viewer.role})`;
  $('logout').hidden = !csrf;
  start();
}

async function login(ev) {
  ev.preventDefault();
  const r = await call('POST', '/page/login', { token: $('token').value });
  $('token').value = '';
  if (r.status === 200) showApp(r.json);
  else showLogin((r.json && r.json.error) || `login refused (${r.status})`);
}

async function logout() {
  await call('POST', '/page/logout');
  csrf = '';
  // A fresh document: the next viewer gets the controls of their own role.
  window.location.reload();
}

// === polling ===

function start() {
  if (timer) return;
  tick();
  timer = setInterval(tick, EVERY_MS);
}

function stop() {
  if (timer) clearInterval(timer);
  timer = null;
}

async function tick() {
  try {
    const last = samples.length ? samples[samples.length - 1].t_ms : null;
    const [page, hist] = await Promise.all([
      call('GET', '/v1/page'),
      call('GET', last === null ? '/v1/page/history' : `/v1/page/history?after=${last}`),
    ]);
    if (page.status === 401) return showLogin('Session ended: log in again.');
    if (page.status !== 200) {
      $('errors').textContent = `/v1/page: ${page.status} ${(page.json && page.json.error) || ''}`;
      return;
    }
    data = page.json;
    if (hist.status === 200) {
      capacity = hist.json.capacity;
      samples = samples.concat(hist.json.samples).slice(-capacity);
    }
    render();
  } catch (e) {
    $('errors').textContent = `ringsync serve does not answer: ${e}`;
  }
}

// === drawing ===

function render() {
  const st = data.status;
  viewer = data.viewer;
  $('site').textContent = st.site;
  const stale = st.store && st.store.stale_since_ms
    ? ` · STORE UNREACHABLE since ${when(st.store.stale_since_ms)}: showing the last known view` : '';
  $('summary').textContent = `profile revision ${st.revision} · drain zone: ${[...st.drain_zone].join(', ') || 'none'} · updated ${when(st.generated_ms)}${stale}`;
  $('errors').textContent = (data.errors || []).join(' · ');
  renderServers();
  renderChart();
  renderProfiles();
  renderHandover();
  renderNodes();
  renderEngines();
  renderAudit();
}

function workText(i) {
  const c = i.counts || {};
  const kinds = ['dialogs', 'transactions', 'registrations', 'subscriptions', 'calls', 'groups']
    .filter((k) => c[k]).map((k) => `${k} ${c[k]}`);
  const total = i.work === null || i.work === undefined ? 'work not known' : `work ${i.work}`;
  return kinds.length ? `${total}: ${kinds.join(', ')}` : total;
}

function tile(i) {
  const eta = i.eta && (i.eta.calls_until_ms || i.eta.registrations_until_ms);
  const until = eta ? Math.max(i.eta.calls_until_ms || 0, i.eta.registrations_until_ms || 0) : null;
  const t = el('div', { class: 'tile', id: `tile-${i.id}`, 'data-state': i.state, 'data-instance': i.id },
    el('div', {}, el('span', { class: 'id', text: i.id }), ` ${i.service} · health ${i.health}`),
    el('div', {}, el('span', { class: 'state', text: i.state })),
    el('div', { class: 'work', text: workText(i) }),
    until ? el('div', { class: 'eta', text: `work gone ${inSeconds(until)} (${when(until)})` }) : null,
    i.stoppable === true || i.stoppable === false
      ? el('div', { class: 'stoppable', text: i.stoppable ? 'stoppable: yes' : 'stoppable: NO' }) : null,
    typeof i.weight === 'number'
      ? el('div', { class: 'weight', text: `weight for new calls ${i.weight.toFixed(2)}` }) : null);
  for (const why of i.unknown || []) t.append(el('div', { class: 'why', text: `unknown: ${why}` }));
  for (const u of i.unreachable || []) t.append(el('div', { class: 'why', text: `${u.node}: ${u.transport} unreachable: ${u.reason}` }));
  return t;
}

function renderServers() {
  const byId = new Map(data.status.instances.map((i) => [i.id, i]));
  const rows = data.servers.map((s) => {
    const head = el('div', {}, el('h3', { text: s.name }),
      el('span', { class: 'zone', text: s.draining ? `drain zone (${s.profiles.join(', ')})` : 'normal zone' }));
    const tiles = el('div', { class: 'tiles' }, ...s.instances.filter((id) => byId.has(id)).map((id) => tile(byId.get(id))));
    return el('div', { class: s.draining ? 'server in-drain' : 'server', 'data-server': s.name }, head, tiles);
  });
  $('servers').replaceChildren(...rows);
}

/** The instances the chart draws: those the gates count. */
function chartInstances() {
  const ids = new Set();
  for (const s of samples) for (const id of Object.keys(s.new_work)) ids.add(id);
  return [...ids].sort();
}

/** The axis top: the smallest of 1, 2, 5 times a power of ten at or above v. */
function niceTop(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 5, 10].map((m) => m * p).find((t) => t >= v);
}

function renderChart() {
  const W = 600, H = 180, L = 34, B = 18;
  const ids = chartInstances();
  const box = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'new work per instance per second' });
  // The window grows with the history up to its capacity: at least two
  // minutes, so a fresh page does not squeeze its few samples to the edge.
  const span = Math.min(capacity, Math.max(MIN_WINDOW, samples.length));
  const n = samples.length;
  const x = (k) => L + (W - L - 4) * ((span - n + k) / Math.max(span - 1, 1));
  let max = 1;
  // The smoothed rate (new work per second over 10 s) is plotted: one
  // point a second of integer counts is unreadable spikes at 1-2 calls/s.
  const rate = (s, id) => (s.rate ? (s.rate[id] || 0) : (s.new_work[id] || 0));
  for (const s of samples) for (const id of Object.keys(s.new_work)) max = Math.max(max, rate(s, id));
  max = niceTop(max);
  const y = (v) => H - B - (H - B - 6) * (v / max);
  // Drain windows: runs of samples with an instance in the drain zone.
  let from = null;
  samples.forEach((s, k) => {
    const on = s.draining.length > 0;
    if (on && from === null) from = k;
    if ((!on || k === samples.length - 1) && from !== null) {
      const to = on ? k : k - 1;
      const r = svg('rect', { x: x(from), y: 2, width: Math.max(x(to) - x(from), 2), height: H - B - 2, fill: '#a15c00', 'fill-opacity': '0.13', class: 'drain-window' });
      r.append(svg('title', {}));
      r.firstChild.textContent = `drain window: ${samples[from].draining.join(', ')} from ${when(samples[from].t_ms)}`;
      box.append(r);
      from = null;
    }
  });
  // The axis in new work per second: ticks at 0, half and the top, a
  // round number (1, 2 or 5 times a power of ten), with light grid lines.
  for (const v of [0, max / 2, max]) {
    box.append(svg('line', { x1: L, y1: y(v), x2: W - 4, y2: y(v), stroke: v ? '#ddd' : '#888', class: 'tick' }));
    const t = svg('text', { x: 2, y: Math.max(y(v) + 3, 10), 'font-size': 10, fill: '#555', class: 'tick-label' });
    t.textContent = `${+v.toFixed(2)}/s`;
    box.append(t);
  }
  const label = svg('text', { x: L, y: H - 4, 'font-size': 10, fill: '#555' });
  label.textContent = `new work per second, averaged over 10 s · last ${Math.round(span * EVERY_MS / 60000)} min`;
  box.append(label);
  const legend = [];
  ids.forEach((id, k) => {
    const colour = COLOURS[k % COLOURS.length];
    const dash = DASHES[Math.floor(k / COLOURS.length) % DASHES.length];
    const pts = samples.map((s, j) => `${x(j).toFixed(1)},${y(rate(s, id)).toFixed(1)}`).join(' ');
    box.append(svg('polyline', { points: pts, fill: 'none', stroke: colour, 'stroke-width': 1.5, 'stroke-dasharray': dash, 'data-instance': id }));
    const end = samples.length ? samples[samples.length - 1] : null;
    const last = end ? (end.new_work[id] || 0) : 0;
    const avg = end ? rate(end, id) : 0;
    // Set through the CSSOM: the page's CSP forbids style attributes.
    const swatch = el('span', { class: 'swatch' });
    swatch.style.background = colour;
    legend.push(el('li', {}, swatch, `${id}: ${avg.toFixed(1)}/s over 10 s, ${last}/s now`));
  });
  $('chart').replaceChildren(box);
  $('legend').replaceChildren(...legend);
}

function actionButton(label, cls, onclick) {
  return el('button', { type: 'button', class: `action ${cls || ''}`, onclick, text: label });
}

function renderProfiles() {
  const active = data.profiles.filter((p) => p.state === 'active').map((p) => p.name);
  $('zone').textContent = `Active: ${active.join(', ') || 'none'}. Drain zone: ${[...data.status.drain_zone].join(', ') || 'empty'}.`;
  const rows = data.profiles.map((p) => {
    const acts = el('td', {});
    if (viewer.can_operate) {
      if (p.state === 'active') acts.append(actionButton('Deactivate', '', () => change(p, 'deactivate')));
      else acts.append(actionButton('Activate…', '', () => preview(p)));
    }
    if (viewer.can_delete) acts.append(' ', actionButton('Delete', '', () => remove(p)));
    return el('tr', { 'data-profile': p.name },
      el('td', { text: p.name }), el('td', { text: p.state }), el('td', { text: p.servers.join(', ') }),
      el('td', { text: String(p.revision) }), el('td', { text: p.description || '' }), acts);
  });
  $('profiles').tBodies[0].replaceChildren(...rows);
  // A viewer that may not change anything gets no controls at all: the
  // form and the preview leave the document (logging out reloads the page).
  if (!viewer.can_operate) {
    for (const id of ['create', 'preview']) if ($(id)) $(id).remove();
    return;
  }
  $('create').hidden = false;
  const box = $('new-servers');
  if (box.querySelectorAll('input').length !== data.servers.length) {
    box.replaceChildren(el('legend', { text: 'servers' }), ...data.servers.map((s) => el('label', {},
      el('input', { type: 'checkbox', value: s.name, name: 'server' }), ` ${s.name}`)));
  }
}

/** Says what a refused change found, the profile as it is now on a 409. */
function refused(r, what) {
  const e = r.json || {};
  let msg = `${what}: ${r.status} ${e.error || ''}`;
  if (r.status === 409 && e.current) {
    const c = e.current;
    msg += ` Now: revision ${c.revision}, ${c.state}, servers ${c.servers.join(', ')}. Nothing was changed; look again and retry.`;
  }
  $('action-error').textContent = msg;
}

async function create(ev) {
  ev.preventDefault();
  const servers = [...document.querySelectorAll('#new-servers input:checked')].map((i) => i.value);
  const body = { name: $('new-name').value.trim(), description: $('new-description').value, servers };
  const r = await call('POST', '/v1/profiles', body);
  if (r.status === 201 || r.status === 200) {
    $('action-error').textContent = '';
    $('create').reset();
    tick();
  } else refused(r, 'create');
}

async function preview(p) {
  const r = await call('POST', `/v1/profiles/${encodeURIComponent(p.id)}/activate?dry_run=true`);
  if (r.status !== 200) return refused(r, 'preview');
  pending = { id: p.id, name: p.name, revision: p.revision };
  const plan = r.json;
  const body = [];
  body.push(el('p', { class: 'would-drain', text: plan.would_drain.length
    ? `Would drain: ${plan.would_drain.map((i) => `${i.id} (${i.service} on ${i.server})`).join(', ')}.`
    : 'Would drain no instance that is not draining already.' }));
  body.push(el('p', { text: `Drain zone: ${plan.drain_zone_before.join(', ') || 'empty'} → ${plan.drain_zone_after.join(', ')}` }));
  for (const s of plan.shares) {
    const pct = (v) => `${Math.round(v * 100)}%`;
    body.push(el('p', { class: 'shares', text: `${s.service} ring: ${s.instances.map((i) => `${i.id} ${pct(i.before)} → ${pct(i.after)}`).join(', ')}` }));
  }
  for (const w of plan.warnings) body.push(el('p', { class: 'error warning', text: `Warning: ${w}` }));
  $('preview-title').textContent = `Activate ${p.name} (revision ${p.revision})?`;
  $('preview-body').replaceChildren(...body);
  $('preview').hidden = false;
  $('confirm').focus();
}

async function confirmActivate() {
  if (!pending) return;
  const p = pending;
  pending = null;
  $('preview').hidden = true;
  const r = await call('POST', `/v1/profiles/${encodeURIComponent(p.id)}/activate`, { revision: p.revision });
  if (r.status === 200) $('action-error').textContent = '';
  else refused(r, `activate ${p.name}`);
  tick();
}

async function change(p, what) {
  const r = await call('POST', `/v1/profiles/${encodeURIComponent(p.id)}/${what}`, { revision: p.revision });
  if (r.status === 200) $('action-error').textContent = '';
  else refused(r, `${what} ${p.name}`);
  tick();
}

async function remove(p) {
  if (!window.confirm(`Delete profile ${p.name}?`)) return;
  const r = await call('DELETE', `/v1/profiles/${encodeURIComponent(p.id)}`, { revision: p.revision });
  if (r.status === 200) $('action-error').textContent = '';
  else refused(r, `delete ${p.name}`);
  tick();
}

function renderHandover() {
  const h = data.handover;
  $('handover-section').hidden = !h || h.groups.length === 0;
  if (!h) return;
  const pl = h.planner;
  const next = pl.next_move_ms ? ` next move ${inSeconds(pl.next_move_ms)} (${when(pl.next_move_ms)})` : '';
  $('planner').textContent = `planner: ${pl.acting || 'none elected'} · ${pl.next}${next}${pl.holding ? ` · holding: ${pl.holding}` : ''} · moves done ${pl.done}, planned ${pl.planned}`;
  $('handover').tBodies[0].replaceChildren(...h.groups.map((g) => el('tr', {},
    el('td', { text: g.group }), el('td', { text: g.confirmed || 'none confirmed' }), el('td', { text: g.desired }),
    el('td', { text: g.state }),
    el('td', { text: g.next_move ? `${g.next_move.kind} to ${g.next_move.to} ${inSeconds(g.next_move.at_ms)}` : '' }),
    el('td', { class: g.blocked ? 'error' : '', text: g.blocked || '' }))));
}

function renderNodes() {
  const st = data.status;
  $('nodes').tBodies[0].replaceChildren(...st.nodes.map((n) => {
    const behind = n.revision !== undefined && n.revision < st.revision ? ` (behind ${st.revision})` : '';
    const state = n.error ? `no report: ${n.error}` : n.stale_since_ms ? `view stale since ${when(n.stale_since_ms)}` : 'reporting';
    return el('tr', {}, el('td', { text: n.kind }), el('td', { text: n.node || '' }), el('td', { text: n.addr }),
      el('td', { text: n.revision === undefined ? '' : `${n.revision}${behind}` }),
      el('td', { class: n.error || n.stale_since_ms ? 'error' : '', text: state }));
  }));
}

function renderEngines() {
  const es = data.status.engines || [];
  $('engines-section').hidden = es.length === 0;
  $('engines').tBodies[0].replaceChildren(...es.map((e) => el('tr', {},
    el('td', { text: e.name }), el('td', { text: e.kind }), el('td', { text: e.address }),
    el('td', { text: e.reachable === null || e.reachable === undefined ? 'not yet' : e.reachable ? 'yes' : 'NO' }),
    el('td', { text: e.acting ? 'yes' : 'no' }), el('td', { text: e.revision === null || e.revision === undefined ? '' : String(e.revision) }),
    el('td', { class: 'error', text: e.error || '' }))));
}

function renderAudit() {
  $('audit').tBodies[0].replaceChildren(...data.audit.slice().reverse().map((r) => el('tr', {},
    el('td', { text: when(r.at_ms) }), el('td', { text: r.role ? `${r.who} (${r.role})` : r.who }),
    el('td', { text: r.action }), el('td', { text: r.profile ? `${r.profile.name} (${r.profile.id})` : (r.target || '') }), el('td', { text: String(r.status) }),
    el('td', { text: r.error || '' }))));
}

// === start ===

async function boot() {
  $('login-form').addEventListener('submit', login);
  $('logout').addEventListener('click', logout);
  $('create').addEventListener('submit', create);
  $('confirm').addEventListener('click', confirmActivate);
  $('cancel').addEventListener('click', () => { pending = null; $('preview').hidden = true; });
  const r = await call('GET', '/page/session');
  if (r.status === 200) showApp(r.json);
  else showLogin();
}

document.addEventListener('DOMContentLoaded', boot);

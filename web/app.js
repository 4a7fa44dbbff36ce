// devhook inspector: a single page over the inspector's JSON API.
//
// Rule: request and response content is only ever put in the page as text
// (textContent, text nodes, input values). Nothing here sets innerHTML.
'use strict';

(function () {
  // ---- DOM helpers -------------------------------------------------------

  // h builds an element. attrs: class, title, href, id, type, value,
  // data-*, aria-*, disabled, checked, on: {event: fn}. Children: nodes,
  // strings (as text), arrays, null.
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === null || v === undefined || v === false) continue;
        if (k === 'on') {
          for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
        } else if (k === 'class') {
          el.className = v;
        } else if (k === 'value') {
          el.value = v;
        } else if (k === 'checked') {
          el.checked = !!v;
        } else {
          el.setAttribute(k, v === true ? '' : String(v));
        }
      }
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      if (Array.isArray(c)) append(el, c);
      else if (c instanceof Node) el.appendChild(c);
      else el.appendChild(document.createTextNode(String(c)));
    }
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
  }

  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));

  function toast(msg, kind) {
    const t = $('#toast');
    clear(t).appendChild(h('div', { class: 'toast-msg ' + (kind || '') }, msg));
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => clear(t), 4000);
  }

  // ---- API -----------------------------------------------------------------

  async function api(path, opts) {
    const res = await fetch(path, Object.assign({ headers: { Accept: 'application/json' } }, opts || {}));
    const text = await res.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
    if (!res.ok) {
      const msg = body && body.error ? body.error : (res.status + ' ' + res.statusText);
      const err = new Error(msg);
      err.status = res.status;
      throw err;
    }
    return body;
  }

  const enc = encodeURIComponent;

  // ---- formatting --------------------------------------------------------

  function fmtTime(iso, withDate) {
    if (!iso) return '';
    const d = new Date(iso);
    if (isNaN(d)) return iso;
    const p = (n, w) => String(n).padStart(w || 2, '0');
    const time = p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds()) + '.' + p(d.getMilliseconds(), 3);
    const today = new Date();
    if (withDate || d.toDateString() !== today.toDateString()) {
      return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' + time;
    }
    return time;
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined || isNaN(ms)) return '';
    ms = Number(ms);
    if (ms < 0) return '−' + fmtMs(-ms);
    if (ms < 1) return ms.toFixed(2) + ' ms';
    if (ms < 100) return ms.toFixed(1) + ' ms';
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
    const m = Math.floor(ms / 60000);
    if (m < 60) return m + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
    return Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
  }

  function fmtSize(n) {
    if (n < 1024) return n + ' B';
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
    return (n / 1024 / 1024).toFixed(1) + ' MiB';
  }

  const VERDICTS = {
    ok: ['valid signature', 'ok'],
    missing_signature: ['missing signature', 'bad'],
    invalid_format: ['bad signature format', 'bad'],
    invalid_time: ['signature too old/new', 'warn'],
    invalid_signature: ['invalid signature', 'bad'],
    no_secret: ['no secret to check', 'neutral'],
    unchecked: ['not checked', 'neutral'],
  };

  function verdictBadge(result) {
    const v = VERDICTS[result] || [result || 'unknown', 'neutral'];
    return h('span', { class: 'badge verdict v-' + v[1], 'data-verdict': result || '', title: 'signature verdict: ' + (result || 'unknown') }, v[0]);
  }

  function statusBadge(status, error) {
    if (!status) {
      return h('span', { class: 'badge status s-none', 'data-status': '0', title: error ? 'the receiver gave no status: ' + error : 'not forwarded' }, error ? 'none' : '—');
    }
    const cls = status < 300 ? 's-2xx' : status < 400 ? 's-3xx' : status < 500 ? 's-4xx' : 's-5xx';
    return h('span', { class: 'badge status ' + cls, 'data-status': String(status), title: 'receiver answered ' + status }, String(status));
  }

  // retryChip shows where the agent stands with a delivery it owes the
  // receiver: retrying, or given up.
  function retryChip(r) {
    if (!r) return null;
    if (r.state === 'failed') {
      // The reason up to its colon ("gave up after 12 attempts over 1h");
      // the whole of it shows on hover and in the detail.
      const reason = r.reason || 'gave up';
      const cut = reason.indexOf(': ');
      return h('span', { class: 'chip retry-failed', 'data-retry': 'failed', title: reason }, 'failed: ' + (cut > 0 ? reason.slice(0, cut) : reason));
    }
    return h('span', { class: 'chip retry-owed', 'data-retry': 'owed', title: 'the receiver has not taken it; devhook retries since ' + fmtTime(r.since, true) }, 'retrying');
  }

  function stepChip(s) {
    if (!s) return h('span', { class: 'muted' }, '—');
    return h('span', { class: 'chip step-' + s, 'data-status-v2': s }, s);
  }

  function runLink(runID) {
    if (!runID) return h('span', { class: 'muted' }, '—');
    return h('a', { class: 'mono run-link', href: '#/runs/' + enc(runID), title: 'run timeline', on: { click: (e) => e.stopPropagation() } }, shortID(runID));
  }

  function shortID(id) {
    return id && id.length > 18 ? id.slice(0, 8) + '…' + id.slice(-6) : id;
  }

  function pathText(s) {
    return s.path + (s.query ? '?' + s.query : '');
  }

  // ---- state -----------------------------------------------------------------

  const state = {
    settings: null,
    route: null,
    list: null, // {filter, items: Map id→summary, order: [ids], next, tbody}
    detail: null, // {id, data, compare: Set of seq, editorOpen}
    run: null, // run id shown
    liveSeen: false,
  };

  // ---- routing ------------------------------------------------------------

  function parseRoute() {
    const raw = location.hash.replace(/^#/, '') || '/';
    const [path, qs] = raw.split('?');
    const params = new URLSearchParams(qs || '');
    const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    if (parts[0] === 'd' && parts[1]) return { name: 'detail', id: parts[1], params };
    if (parts[0] === 'runs' && parts[1]) return { name: 'run', id: parts[1], params };
    if (parts[0] === 'runs') return { name: 'runs', params };
    if (parts[0] === 'settings') return { name: 'settings', params };
    return { name: 'list', params };
  }

  function render() {
    const r = parseRoute();
    state.route = r;
    state.list = null;
    state.detail = null;
    state.run = null;
    for (const a of $$('nav.tabs a')) {
      const on = a.dataset.nav === (r.name === 'detail' ? 'list' : r.name === 'run' ? 'runs' : r.name);
      a.classList.toggle('active', on);
    }
    const view = clear($('#view'));
    view.removeAttribute('data-view');
    switch (r.name) {
      case 'detail': return renderDetail(view, r.id);
      case 'run': return renderRun(view, r.id);
      case 'runs': return renderRuns(view);
      case 'settings': return renderSettings(view);
      default: return renderList(view, r.params);
    }
  }

  function showError(view, err, what) {
    clear(view).appendChild(h('div', { class: 'panel error-panel', 'data-error': String(err.status || '') },
      h('h2', null, what),
      h('p', null, err.message),
      h('p', null, h('a', { href: '#/' }, '← back to deliveries'))));
  }

  // ---- settings ------------------------------------------------------------

  async function loadSettings() {
    try {
      state.settings = await api('/api/settings');
    } catch (e) {
      return;
    }
    const s = state.settings;
    const strip = clear($('#settings-strip'));
    strip.appendChild(h('span', { class: 'kv', title: 'forward targets' }, '→ ',
      h('span', { class: 'mono' }, s.forward.length ? s.forward.join(', ') : 'no forward target')));
    if (s.public_url) strip.appendChild(h('span', { class: 'kv', title: 'public URL: give this to the service' }, 'public ', h('span', { class: 'mono' }, s.public_url)));
    strip.appendChild(h('span', { class: 'badge ' + (s.secret_known ? 'v-ok' : 'v-neutral'), id: 'secret-state' },
      s.secret_known ? 'secret known' : 'no secret'));
  }

  function renderSettings(view) {
    view.dataset.view = 'settings';
    const s = state.settings;
    if (!s) {
      view.appendChild(h('p', { class: 'pad muted' }, 'Settings are not available.'));
      return;
    }
    const row = (k, v, hint) => [h('dt', null, k), h('dd', null, v, hint ? h('div', { class: 'hint' }, hint) : null)];
    view.appendChild(h('section', { class: 'panel settings' },
      h('h2', null, 'Settings'),
      h('dl', { class: 'deflist' },
        row('Forward targets', s.forward.length ? h('ul', { class: 'plain' }, s.forward.map((f) => h('li', { class: 'mono' }, f))) : h('span', { class: 'muted' }, 'none'),
          'Each delivery is sent to these local receivers.'),
        row('Public URL', s.public_url ? h('span', { class: 'mono', id: 'public-url' }, s.public_url) : h('span', { class: 'muted' }, 'unknown'),
          'Register this URL as the webhook\'s endpoint_url with the service.'),
        row('Relay', s.relay_url ? h('span', { class: 'mono' }, s.relay_url) : h('span', { class: 'muted' }, 'unknown')),
        row('Channel', s.channel ? h('span', { class: 'mono' }, s.channel) : h('span', { class: 'muted' }, '—')),
        row('Webhook secret', h('span', { class: 'badge ' + (s.secret_known ? 'v-ok' : 'v-neutral') }, s.secret_known ? 'known' : 'not known'),
          s.secret_known ? 'Signatures are checked and replays are re-signed with a fresh t. The secret is never shown.'
            : 'Without the secret devhook cannot check signatures or re-sign replays. Start devhook listen with --secret or --register.'),
        row('Signature check', h('span', { class: 'mono' }, s.verify),
          s.verify === 'enforce' ? 'Deliveries with a bad signature are answered by devhook and not forwarded.'
            : s.verify === 'off' ? 'Signatures are not checked.' : 'Every delivery is forwarded; the verdict is recorded.'),
        row('Replay', s.replay_available ? 'available' : 'not available'))));
  }

  // ---- list ------------------------------------------------------------------

  const FILTER_KEYS = ['verdict', 'status', 'run_id', 'status_v2', 'q'];

  function renderList(view, params) {
    view.dataset.view = 'list';
    const filter = {};
    for (const k of FILTER_KEYS) if (params.get(k)) filter[k] = params.get(k);

    const setFilter = (k, v) => {
      const p = new URLSearchParams();
      const f = Object.assign({}, filter, { [k]: v });
      for (const key of FILTER_KEYS) if (f[key]) p.set(key, f[key]);
      const qs = p.toString();
      location.hash = '#/' + (qs ? '?' + qs : '');
    };
    const select = (k, label, options) => h('label', { class: 'field' }, label,
      h('select', { name: k, id: 'filter-' + k, on: { change: (e) => setFilter(k, e.target.value) } },
        options.map(([v, text]) => h('option', { value: v, selected: (filter[k] || '') === v }, text))));
    let timer = null;
    const input = (k, label, placeholder, size) => h('label', { class: 'field' }, label,
      h('input', {
        name: k, id: 'filter-' + k, type: 'search', placeholder, value: filter[k] || '', size: size || 14, autocomplete: 'off', spellcheck: 'false',
        on: {
          input: (e) => { clearTimeout(timer); const v = e.target.value.trim(); timer = setTimeout(() => setFilter(k, v), 500); },
          keydown: (e) => { if (e.key === 'Enter') { clearTimeout(timer); setFilter(k, e.target.value.trim()); } },
        },
      }));

    const filters = h('form', { class: 'filters', id: 'filters', on: { submit: (e) => e.preventDefault() } },
      select('verdict', 'Verdict', [['', 'any'], ...Object.keys(VERDICTS).map((k) => [k, k])]),
      input('status', 'Receiver status', '200 or none', 9),
      input('run_id', 'Run id', 'run id', 16),
      select('status_v2', 'status_v2', [['', 'any'], ['queued', 'queued'], ['running', 'running'], ['succeeded', 'succeeded']]),
      input('q', 'Body contains', 'text in the body', 22),
      Object.keys(filter).length ? h('a', { class: 'button ghost', href: '#/', id: 'clear-filters' }, 'Clear filters') : null);

    const tbody = h('tbody', null);
    const table = h('table', { class: 'list', id: 'deliveries' },
      h('thead', null, h('tr', null,
        ['Time', 'Method', 'Path', 'Run', 'status_v2', 'Signature', 'Receiver', 'Duration', 'Tries'].map((c) => h('th', null, c)))),
      tbody);
    const more = h('div', { class: 'more' });
    const notice = h('div', { class: 'notice', id: 'list-notice', hidden: true });
    view.appendChild(h('section', { class: 'list-view' }, filters, notice, h('div', { class: 'table-wrap' }, table), more));

    const L = { filter, items: new Map(), order: [], next: '', tbody, more, notice, loading: false };
    state.list = L;
    loadPage(L, '');
  }

  async function loadPage(L, before) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(L.filter)) p.set(k, v);
    if (before) p.set('before', before);
    p.set('limit', '50');
    L.loading = true;
    clear(L.more).appendChild(h('span', { class: 'muted' }, 'Loading…'));
    let page;
    try {
      page = await api('/api/deliveries?' + p.toString());
    } catch (e) {
      clear(L.more).appendChild(h('div', { class: 'error-text' }, 'Could not list deliveries: ' + e.message));
      L.loading = false;
      return;
    }
    if (state.list !== L) return;
    L.loading = false;
    for (const s of page.items) {
      if (L.items.has(s.id)) continue;
      L.items.set(s.id, s);
      L.order.push(s.id);
      L.tbody.appendChild(listRow(s, false));
    }
    L.next = page.next;
    clear(L.more);
    if (page.next) {
      L.more.appendChild(h('button', { class: 'button', id: 'load-more', on: { click: () => loadPage(L, L.next) } }, 'Load older deliveries'));
    } else if (L.items.size === 0) {
      L.more.appendChild(emptyState(L.filter));
    } else {
      L.more.appendChild(h('span', { class: 'muted' }, 'End of history · ' + L.items.size + ' shown'));
    }
  }

  function emptyState(filter) {
    if (Object.keys(filter).length) return h('div', { class: 'empty' }, 'No delivery matches these filters.');
    const s = state.settings || {};
    return h('div', { class: 'empty', id: 'empty' },
      h('p', null, 'No deliveries yet. They appear here as soon as the service sends one.'),
      s.public_url ? h('p', null, 'Webhook URL for the service: ', h('code', null, s.public_url)) : null);
  }

  function listRow(s, fresh) {
    const tr = h('tr', {
      'data-id': s.id, class: fresh ? 'row fresh' : 'row', tabindex: '0',
      on: {
        click: () => { location.hash = '#/d/' + enc(s.id); },
        keydown: (e) => { if (e.key === 'Enter') location.hash = '#/d/' + enc(s.id); },
      },
    },
    h('td', { class: 'time mono', title: fmtTime(s.received_at, true) }, fmtTime(s.received_at)),
    h('td', null, h('span', { class: 'method m-' + String(s.method).toLowerCase() }, s.method)),
    h('td', { class: 'path mono' }, h('a', { href: '#/d/' + enc(s.id) }, pathText(s)), s.queued ? h('span', { class: 'chip queued', title: 'waited in the relay for the agent' }, 'queued') : null),
    h('td', null, runLink(s.event && s.event.run_id)),
    h('td', null, stepChip(s.event && s.event.status_v2)),
    h('td', null, verdictBadge(s.verdict)),
    h('td', null, s.attempts ? statusBadge(s.status, s.error) : h('span', { class: 'muted', title: 'not forwarded yet' }, 'pending'), retryChip(s.retry)),
    h('td', { class: 'num mono' }, s.attempts ? fmtMs(s.duration_ms) : ''),
    h('td', { class: 'num' }, String(s.attempts || 0)));
    return tr;
  }

  function matchesFilter(f, s) {
    if (f.verdict && s.verdict !== f.verdict) return false;
    if (f.run_id && (s.event || {}).run_id !== f.run_id) return false;
    if (f.status_v2 && (s.event || {}).status_v2 !== f.status_v2) return false;
    if (f.status) {
      const want = f.status === 'none' || f.status === '-1' || f.status === '0' ? 0 : Number(f.status);
      if ((s.status || 0) !== want) return false;
    }
    return true;
  }

  function onListChange(c) {
    const L = state.list;
    if (!L) return;
    const s = c.delivery;
    if (L.items.has(s.id)) {
      L.items.set(s.id, s);
      const old = $('tr[data-id="' + CSS.escape(s.id) + '"]', L.tbody);
      if (old) old.replaceWith(listRow(s, true));
      return;
    }
    if (c.kind !== 'delivery' && c.kind !== 'attempt') return;
    if (L.filter.q) {
      // The body filter runs on the server: offer a refresh.
      L.notice.hidden = false;
      clear(L.notice).appendChild(h('span', null, 'New deliveries arrived. ',
        h('a', { href: '#', on: { click: (e) => { e.preventDefault(); render(); } } }, 'Refresh')));
      return;
    }
    if (!matchesFilter(L.filter, s)) return;
    // Newest first: ids are time-ordered.
    L.items.set(s.id, s);
    const row = listRow(s, true);
    const after = L.order.find((id) => id < s.id);
    if (after) {
      L.tbody.insertBefore(row, $('tr[data-id="' + CSS.escape(after) + '"]', L.tbody));
      L.order.splice(L.order.indexOf(after), 0, s.id);
    } else if (!L.next) {
      L.tbody.appendChild(row);
      L.order.push(s.id);
    } else {
      return;
    }
    const empty = $('#empty');
    if (empty) clear(L.more);
  }

  // ---- body viewer ---------------------------------------------------------

  // bodyViewer shows a decoded body with tabs: pretty JSON, raw text, hex,
  // base64, and a download link.
  function bodyViewer(view, b64, downloadURL, name) {
    const modes = [];
    if (view.json && view.pretty) modes.push(['pretty', 'Pretty', view.pretty]);
    if (view.utf8) modes.push(['raw', 'Raw', view.text || '']);
    if (!view.utf8) {
      modes.push(['hex', 'Hex', view.hex || '']);
      modes.push(['base64', 'Base64', b64 || '']);
    }
    const pre = h('pre', { class: 'body-text mono', 'data-body': name });
    const tabs = h('div', { class: 'seg' });
    const show = (mode) => {
      const m = modes.find((x) => x[0] === mode) || modes[0];
      pre.textContent = m[2];
      pre.dataset.mode = m[0];
      pre.classList.toggle('empty-body', view.size === 0);
      if (view.size === 0) pre.textContent = '(empty body)';
      for (const b of tabs.children) b.classList.toggle('active', b.dataset.mode === m[0]);
    };
    for (const [mode, label] of modes) {
      tabs.appendChild(h('button', { type: 'button', class: 'seg-btn', 'data-mode': mode, on: { click: () => show(mode) } }, label));
    }
    const meta = h('div', { class: 'body-meta' },
      modes.length > 1 ? tabs : null,
      h('span', { class: 'muted' }, fmtSize(view.size) + (view.content_type ? ' · ' + view.content_type : '') + (view.json ? ' · JSON' : view.utf8 ? '' : ' · binary')),
      view.truncated ? h('span', { class: 'chip warn' }, 'truncated: download for the whole body') : null,
      h('span', { class: 'spacer' }),
      view.size > 0 ? h('button', { type: 'button', class: 'button small ghost', on: { click: () => copyText(pre.textContent, 'Body copied') } }, 'Copy') : null,
      view.size > 0 && downloadURL ? h('a', { class: 'button small ghost', href: downloadURL, download: '' }, 'Download') : null);
    show(modes.length ? modes[0][0] : 'raw');
    return h('div', { class: 'body-viewer', 'data-viewer': name }, meta, pre);
  }

  function headerTable(header, cls) {
    const names = Object.keys(header || {}).sort((a, b) => a.toLowerCase().localeCompare(b.toLowerCase()));
    if (!names.length) return h('p', { class: 'muted small' }, 'no headers');
    const rows = [];
    for (const n of names) {
      for (const v of header[n]) {
        rows.push(h('tr', null, h('th', { class: 'mono' }, n), h('td', { class: 'mono' }, v)));
      }
    }
    return h('table', { class: 'headers ' + (cls || '') }, h('tbody', null, rows));
  }

  async function copyText(text, done) {
    try {
      await navigator.clipboard.writeText(text);
      toast(done || 'Copied', 'ok');
    } catch (e) {
      const ta = h('textarea', { class: 'copy-fallback mono', readonly: true, rows: '8' });
      ta.value = text;
      const box = h('div', { class: 'panel' }, h('p', null, 'Copy from here (the browser refused clipboard access):'), ta);
      $('#view').prepend(box);
      ta.select();
    }
  }

  // ---- detail ------------------------------------------------------------------

  async function renderDetail(view, id) {
    view.dataset.view = 'detail';
    const D = { id, data: null, compare: [], editorOpen: false, highlight: null };
    state.detail = D;
    await loadDetail(D);
  }

  async function loadDetail(D) {
    let d;
    try {
      d = await api('/api/deliveries/' + enc(D.id));
    } catch (e) {
      if (state.detail === D) showError($('#view'), e, 'Delivery ' + D.id);
      return;
    }
    if (state.detail !== D) return;
    // A change we already show (the page's own replay, then its event): keep the page as it is.
    if (D.data && JSON.stringify(d) === JSON.stringify(D.data)) return;
    const fresh = D.data && (D.data.attempts || []).length < (d.attempts || []).length ? (d.attempts || []).length : null;
    D.data = d;
    const y = window.scrollY;
    drawDetail(D, fresh);
    if (fresh !== null) window.scrollTo(0, y);
  }

  function drawDetail(D, highlightSeq) {
    const d = D.data;
    const view = clear($('#view'));
    view.dataset.view = 'detail';
    const ev = d.event || {};
    const v = d.verdict || {};
    const attempts = d.attempts || [];
    const last = attempts[attempts.length - 1];

    const head = h('section', { class: 'detail-head panel' },
      h('div', { class: 'crumbs' }, h('a', { href: '#/' }, '← Deliveries'), ev.run_id ? [' · ', h('a', { href: '#/runs/' + enc(ev.run_id) }, 'run timeline')] : null),
      h('h1', { class: 'req-line' }, h('span', { class: 'method m-' + String(d.method).toLowerCase() }, d.method), ' ', h('span', { class: 'mono' }, pathText(d))),
      h('div', { class: 'head-badges' }, verdictBadge(v.result), ev.status_v2 ? stepChip(ev.status_v2) : null,
        last ? [h('span', { class: 'muted' }, 'receiver'), statusBadge(last.status, last.error)] : h('span', { class: 'chip' }, 'not forwarded yet'),
        d.queued ? h('span', { class: 'chip queued' }, 'queued while no agent was connected') : null,
        retryChip(d.retry)),
      d.retry ? h('p', { class: 'retry-note ' + (d.retry.state === 'failed' ? 'error-text' : 'warn-text'), id: 'retry-note' },
        d.retry.state === 'failed'
          ? 'failed: devhook ' + (d.retry.reason || 'gave up') + '. The sender was answered 202 long ago and will not send it again: replay it once the receiver works.'
          : 'The receiver has not taken this delivery yet (no answer, 408, 429 or 5xx). devhook retries it with backoff since ' + fmtTime(d.retry.since, true) + '; each retry is an attempt below.') : null,
      last && d.view.attempts[attempts.length - 1] && d.view.attempts[attempts.length - 1].hint
        ? h('p', { class: 'refusal-hint warn-text', id: 'refusal-hint' }, hintText(d.view.attempts[attempts.length - 1].hint)) : null,
      h('dl', { class: 'facts' },
        h('dt', null, 'Received'), h('dd', null, fmtTime(d.received_at, true)),
        h('dt', null, 'Id'), h('dd', { class: 'mono', id: 'delivery-id' }, d.id),
        ev.run_id ? [h('dt', null, 'Run'), h('dd', null, runLink(ev.run_id), ' ', h('span', { class: 'muted' }, ev.status ? 'status ' + ev.status : ''))] : null,
        d.remote_addr ? [h('dt', null, 'From'), h('dd', { class: 'mono' }, d.remote_addr)] : null));

    const sig = h('section', { class: 'panel signature sig-' + ((VERDICTS[v.result] || [0, 'neutral'])[1]), id: 'signature' },
      h('h2', null, 'Signature'),
      h('div', { class: 'sig-line' }, verdictBadge(v.result), h('span', { class: 'sig-reason', id: 'verdict-reason' }, v.reason || (v.result === 'ok' ? 'The service-signature header matches the body and the secret.' : ''))),
      v.t ? h('p', { class: 'small muted' }, 'Signed at ' + fmtTime(new Date(v.t).toISOString(), true) + ' (' + signedAge(new Date(d.received_at) - v.t) + ')') : null,
      h('div', { class: 'reference' }, h('span', { class: 'muted' }, 'The reference receiver would answer '),
        statusBadge(v.status), ' ', h('code', { id: 'reference-text' }, v.text || '')));

    const request = h('section', { class: 'panel request' },
      h('h2', null, 'Request'),
      h('h3', null, 'Headers'), headerTable(d.header),
      h('h3', null, 'Body'), bodyViewer(d.view.body, d.body, '/api/deliveries/' + enc(d.id) + '/body', 'request'));

    const attemptsBox = h('section', { class: 'panel attempts', id: 'attempts' },
      h('div', { class: 'panel-title' }, h('h2', null, 'Attempts ', h('span', { class: 'count' }, String(attempts.length))),
        attempts.length > 1 ? h('span', { class: 'hint' }, 'Tick two to compare') : null),
      attempts.length ? attempts.slice().reverse().map((a) => attemptCard(D, a, attempts.indexOf(a), highlightSeq))
        : h('p', { class: 'muted' }, 'Not forwarded yet.'));

    const compare = h('div', { id: 'compare-slot' });
    const left = h('div', { class: 'col' }, sig, request);
    const right = h('div', { class: 'col' }, replayPanel(D), attemptsBox);
    view.appendChild(head);
    view.appendChild(compare);
    view.appendChild(h('div', { class: 'detail-grid' }, left, right));
    drawCompare(D);
  }

  // hintText is a refusal hint with its `commands` as code.
  function hintText(s) {
    return String(s).split('`').map((part, i) => (i % 2 ? h('code', null, part) : part));
  }

  // signedAge says how long before arrival a delivery was signed.
  function signedAge(ms) {
    if (ms < 0) return fmtMs(-ms) + ' after it arrived: the sender\'s clock is ahead';
    return fmtMs(ms) + ' before it arrived';
  }

  function attemptCard(D, a, index, highlightSeq) {
    const d = D.data;
    const av = d.view.attempts[index] || { response: { size: 0, utf8: true } };
    const req = a.request;
    const checked = D.compare.includes(a.seq);
    const open = index === d.attempts.length - 1;
    return h('details', { class: 'attempt' + (a.seq === highlightSeq ? ' fresh' : ''), 'data-seq': String(a.seq), 'data-kind': a.kind, open },
      h('summary', null,
        h('span', { class: 'seq' }, '#' + a.seq),
        h('span', { class: 'chip kind-' + a.kind }, a.kind),
        req && req.resigned ? h('span', { class: 'chip', title: 'signed again with a fresh t' }, 're-signed') : null,
        req && req.body !== d.body ? h('span', { class: 'chip warn', title: 'sent with another body' }, 'edited body') : null,
        req && headersEdited(d.header, req.header) ? h('span', { class: 'chip warn', title: 'sent with other headers' }, 'edited headers') : null,
        statusBadge(a.status, a.error),
        h('span', { class: 'mono small' }, fmtMs(a.duration_ms)),
        h('span', { class: 'muted small', title: a.started_at }, fmtTime(a.started_at)),
        h('span', { class: 'spacer' }),
        h('label', { class: 'cmp', on: { click: (e) => e.stopPropagation() } },
          h('input', { type: 'checkbox', class: 'cmp-box', checked, on: { change: (e) => toggleCompare(D, a.seq, e.target.checked) } }), 'compare')),
      h('div', { class: 'attempt-body' },
        h('p', { class: 'mono small target' }, '→ ' + a.target),
        a.error ? h('p', { class: 'error-text' }, a.error) : null,
        av.hint ? h('p', { class: 'refusal-hint warn-text' }, hintText(av.hint)) : null,
        h('h3', null, 'Response headers'), headerTable(a.header),
        h('h3', null, 'Response body'),
        bodyViewer(av.response, a.body, '/api/deliveries/' + enc(d.id) + '/attempts/' + a.seq + '/body', 'attempt-' + a.seq),
        req ? h('details', { class: 'sent' },
          h('summary', null, 'Request as sent (' + (req.resigned ? 're-signed' : 'edited') + ')'),
          h('p', { class: 'mono small' }, req.method + ' ' + req.path + (req.query ? '?' + req.query : '')),
          headerTable(req.header),
          av.request ? bodyViewer(av.request, req.body, null, 'sent-' + a.seq) : null) : null));
  }

  // headersEdited compares two header maps, leaving out the signature,
  // which a re-signed replay changes by design.
  function headersEdited(a, b) {
    const norm = (x) => JSON.stringify(Object.keys(x || {}).filter((k) => k.toLowerCase() !== 'service-signature')
      .sort().map((k) => [k.toLowerCase(), x[k]]));
    return norm(a) !== norm(b);
  }

  function toggleCompare(D, seq, on) {
    D.compare = D.compare.filter((s) => s !== seq);
    if (on) D.compare.push(seq);
    while (D.compare.length > 2) {
      const drop = D.compare.shift();
      const box = $('.attempt[data-seq="' + drop + '"] .cmp-box');
      if (box) box.checked = false;
    }
    drawCompare(D);
  }

  function drawCompare(D) {
    const slot = $('#compare-slot');
    if (!slot) return;
    clear(slot);
    if (D.compare.length !== 2) return;
    const [sa, sb] = D.compare.slice().sort((x, y) => x - y);
    const atts = D.data.attempts;
    const ia = atts.findIndex((a) => a.seq === sa);
    const ib = atts.findIndex((a) => a.seq === sb);
    if (ia < 0 || ib < 0) return;
    const A = atts[ia], B = atts[ib];
    const va = D.data.view.attempts[ia].response, vb = D.data.view.attempts[ib].response;
    const textOf = (v, b64) => v.pretty || v.text || v.hex || b64 || '';

    const names = Array.from(new Set([...Object.keys(A.header || {}), ...Object.keys(B.header || {})])).sort();
    const hrows = names.map((n) => {
      const x = ((A.header || {})[n] || []).join(', ');
      const y = ((B.header || {})[n] || []).join(', ');
      return h('tr', { class: x === y ? '' : 'differs' }, h('th', { class: 'mono' }, n), h('td', { class: 'mono' }, x || '—'), h('td', { class: 'mono' }, y || '—'));
    });
    const col = (a) => h('th', null, '#' + a.seq + ' ' + a.kind);
    slot.appendChild(h('section', { class: 'panel compare', id: 'compare' },
      h('div', { class: 'panel-title' }, h('h2', null, 'Compare responses'),
        h('button', { type: 'button', class: 'button small ghost', on: { click: () => { D.compare = []; $$('.cmp-box').forEach((b) => { b.checked = false; }); drawCompare(D); } } }, 'Close')),
      h('table', { class: 'headers cmp-table' },
        h('thead', null, h('tr', null, h('th', null, ''), col(A), col(B))),
        h('tbody', null,
          h('tr', { class: A.status === B.status ? '' : 'differs' }, h('th', null, 'Status'), h('td', null, statusBadge(A.status, A.error)), h('td', null, statusBadge(B.status, B.error))),
          h('tr', null, h('th', null, 'Duration'), h('td', { class: 'mono' }, fmtMs(A.duration_ms)), h('td', { class: 'mono' }, fmtMs(B.duration_ms))),
          h('tr', { class: (A.error || '') === (B.error || '') ? '' : 'differs' }, h('th', null, 'Error'), h('td', null, A.error || '—'), h('td', null, B.error || '—')),
          hrows)),
      h('h3', null, 'Body'),
      diffView(textOf(va, A.body), textOf(vb, B.body))));
  }

  // diffView shows two texts side by side, lines aligned by a longest
  // common subsequence, with changed lines marked.
  function diffView(a, b) {
    const la = a.split('\n'), lb = b.split('\n');
    const rows = [];
    if (la.length * lb.length > 4e6) {
      for (let i = 0; i < Math.max(la.length, lb.length); i++) rows.push([la[i], lb[i], la[i] === lb[i] ? '' : 'chg']);
    } else {
      const n = la.length, m = lb.length;
      const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
      for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i][j] = la[i] === lb[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
      let i = 0, j = 0;
      while (i < n || j < m) {
        if (i < n && j < m && la[i] === lb[j]) { rows.push([la[i], lb[j], '']); i++; j++; }
        else if (j < m && (i >= n || L[i][j + 1] >= L[i + 1][j])) { rows.push([null, lb[j], 'ins']); j++; }
        else { rows.push([la[i], null, 'del']); i++; }
      }
    }
    const same = rows.every((r) => r[2] === '');
    return h('div', { class: 'diff' + (same ? ' same' : '') },
      same ? h('p', { class: 'muted small' }, 'The bodies are identical.') : null,
      h('div', { class: 'diff-grid mono' }, rows.map(([x, y, k]) => [
        h('div', { class: 'dl ' + (k === 'del' || k === 'chg' ? 'del' : k === 'ins' ? 'pad' : '') }, x === null ? '' : x),
        h('div', { class: 'dl ' + (k === 'ins' || k === 'chg' ? 'ins' : k === 'del' ? 'pad' : '') }, y === null ? '' : y)])));
  }

  // ---- replay ------------------------------------------------------------------

  function replayPanel(D) {
    const d = D.data;
    const s = state.settings || {};
    const avail = d.view.replay_available;
    const resign = d.view.resign;
    const editor = h('div', { class: 'editor', id: 'replay-editor', hidden: !D.editorOpen });
    const panel = h('section', { class: 'panel replay', id: 'replay-panel' },
      h('h2', null, 'Replay'),
      h('div', { class: 'actions' },
        h('button', {
          type: 'button', class: 'button primary', id: 'replay', disabled: !avail,
          title: resign ? 'Send again, signed with a fresh t' : 'Send again exactly as it arrived',
          on: { click: () => doReplay(D, {}) },
        }, resign ? 'Replay (re-signed)' : 'Replay'),
        resign ? h('button', { type: 'button', class: 'button', id: 'replay-asis', disabled: !avail, title: 'Send again with the original signature header', on: { click: () => doReplay(D, { resign: false }) } }, 'Replay as-is') : null,
        h('button', { type: 'button', class: 'button', id: 'replay-edit', disabled: !avail, on: { click: () => { D.editorOpen = !D.editorOpen; editor.hidden = !D.editorOpen; } } }, 'Edit & replay…'),
        h('button', { type: 'button', class: 'button ghost', id: 'copy-curl', on: { click: () => copyCurl(d) } }, 'Copy as curl')),
      h('p', { class: 'hint' }, !avail ? 'Replay is not available: no agent is running with this inspector.'
        : resign ? 'Re-signed with a fresh t, so the receiver\'s 5-minute window accepts it. Every replay is recorded as an attempt.'
          : (s.secret_known ? '' : 'No secret known: replays carry the original signature, which a receiver rejects after 5 minutes. ') + 'Every replay is recorded as an attempt.'),
      editor);
    buildEditor(D, editor);
    return panel;
  }

  function headerLines(header) {
    const out = [];
    for (const n of Object.keys(header || {}).sort()) for (const v of header[n]) out.push(n + ': ' + v);
    return out.join('\n');
  }

  function buildEditor(D, editor) {
    const d = D.data;
    const s = state.settings || {};
    const binary = !d.view.body.utf8;
    const base = (s.forward || [])[0] || '';
    const to = h('input', { type: 'url', id: 'edit-to', class: 'mono', value: base, placeholder: 'http://127.0.0.1:3000', size: 40 });
    const hdrs = h('textarea', { id: 'edit-headers', class: 'mono', rows: '6', spellcheck: 'false' });
    hdrs.value = headerLines(d.header);
    const body = h('textarea', { id: 'edit-body', class: 'mono', rows: '12', spellcheck: 'false' });
    body.value = binary ? (d.body || '') : (d.view.body.text || '');
    const origHeaders = hdrs.value, origBody = body.value;
    const resign = h('input', { type: 'checkbox', id: 'edit-resign', checked: d.view.resign, disabled: !d.view.resign });
    append(editor, [
      h('label', { class: 'field block' }, 'Target (base URL; the delivery\'s path ' + pathText(d) + ' is added)', to),
      h('label', { class: 'field block' }, 'Headers, one "Name: value" a line', hdrs),
      h('label', { class: 'field block' }, binary ? 'Body (base64: the body is binary)' : 'Body', body),
      h('label', { class: 'check' }, resign, d.view.resign ? ' Re-sign with a fresh t' : ' Re-sign (needs the webhook secret, which is not known)'),
      h('div', { class: 'actions' },
        h('button', {
          type: 'button', class: 'button primary', id: 'replay-send',
          on: {
            click: () => {
              const req = { resign: resign.checked };
              if (to.value.trim() && to.value.trim() !== base) req.to = to.value.trim();
              if (hdrs.value !== origHeaders) {
                const header = {};
                for (const line of hdrs.value.split('\n')) {
                  if (!line.trim()) continue;
                  const i = line.indexOf(':');
                  if (i <= 0) { toast('Header line without a colon: ' + line, 'bad'); return; }
                  const k = line.slice(0, i).trim();
                  (header[k] = header[k] || []).push(line.slice(i + 1).trim());
                }
                req.header = header;
              }
              if (body.value !== origBody) {
                if (binary) req.body_base64 = body.value.replace(/\s+/g, '');
                else req.body_text = body.value;
              }
              doReplay(D, req);
            },
          },
        }, 'Send'),
        h('button', { type: 'button', class: 'button ghost', on: { click: () => { D.editorOpen = false; editor.hidden = true; } } }, 'Cancel'))]);
  }

  async function doReplay(D, req) {
    const buttons = $$('#replay-panel button');
    buttons.forEach((b) => { b.disabled = true; });
    let a;
    try {
      a = await api('/api/deliveries/' + enc(D.id) + '/replay', {
        method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify(req),
      });
    } catch (e) {
      toast('Replay failed: ' + e.message, 'bad');
      buttons.forEach((b) => { b.disabled = false; });
      return;
    }
    toast('Replay #' + a.seq + ': ' + (a.status ? a.status : 'none' + (a.error ? ' (' + a.error + ')' : '')) + ' in ' + fmtMs(a.duration_ms), a.status && a.status < 400 ? 'ok' : 'bad');
    D.editorOpen = false;
    if (state.detail === D) await loadDetail(D);
  }

  async function copyCurl(d) {
    let text;
    try {
      const res = await fetch('/api/deliveries/' + enc(d.id) + '/curl');
      if (!res.ok) throw new Error(res.status + ' ' + res.statusText);
      text = await res.text();
    } catch (e) {
      toast('Could not build the curl command: ' + e.message, 'bad');
      return;
    }
    copyText(text, 'curl command copied');
  }

  // ---- runs ------------------------------------------------------------------

  async function renderRuns(view) {
    view.dataset.view = 'runs';
    let runs;
    try {
      runs = await api('/api/runs');
    } catch (e) {
      showError(view, e, 'Runs');
      return;
    }
    if (state.route.name !== 'runs') return;
    clear(view);
    const rows = runs.items.map((r) => h('tr', { class: 'row', 'data-run': r.run_id, tabindex: '0', on: { click: () => { location.hash = '#/runs/' + enc(r.run_id); } } },
      h('td', { class: 'mono' }, h('a', { href: '#/runs/' + enc(r.run_id) }, r.run_id)),
      h('td', null, h('span', { class: 'mini-steps' }, r.statuses.map((s) => stepChip(s)))),
      h('td', null, stepChip(r.last_status_v2)),
      h('td', { class: 'num' }, String(r.deliveries)),
      h('td', { class: 'mono' }, fmtTime(r.first_received_at)),
      h('td', { class: 'mono' }, fmtTime(r.last_received_at))));
    view.appendChild(h('section', { class: 'panel' },
      h('h2', null, 'Runs'),
      h('p', { class: 'hint' }, 'Deliveries grouped by data.run_id, from the newest ' + runs.scanned + ' deliveries.'),
      rows.length ? h('div', { class: 'table-wrap' }, h('table', { class: 'list', id: 'runs' },
        h('thead', null, h('tr', null, ['Run', 'Arrived', 'Last status_v2', 'Deliveries', 'First', 'Last'].map((c) => h('th', null, c)))),
        h('tbody', null, rows))) : h('p', { class: 'empty' }, 'No run.status deliveries yet.')));
  }

  async function renderRun(view, runID) {
    view.dataset.view = 'run';
    state.run = runID;
    let t;
    try {
      t = await api('/api/runs/' + enc(runID));
    } catch (e) {
      if (state.run === runID) showError(view, e, 'Run ' + runID);
      return;
    }
    if (state.run !== runID) return;
    clear(view);
    view.dataset.view = 'run';

    // The expected steps, each with the first delivery that carried it.
    const firstOf = {};
    for (const s of t.steps) {
      const k = (s.event || {}).status_v2;
      if (k && !firstOf[k]) firstOf[k] = s;
    }
    const lastIdx = Math.max(-1, ...t.expected.map((k, i) => (firstOf[k] ? i : -1)));
    const track = h('ol', { class: 'timeline', id: 'timeline' });
    t.expected.forEach((k, i) => {
      const s = firstOf[k];
      const missing = t.missing.includes(k);
      if (i > 0) {
        // The time between two neighbouring steps, when both arrived.
        const p = firstOf[t.expected[i - 1]];
        let label = '', cls = 'gap';
        if (s && p) {
          const diff = new Date(s.received_at) - new Date(p.received_at);
          label = diff >= 0 ? '+' + fmtMs(diff) : fmtMs(-diff) + ' earlier';
          cls += diff >= 0 ? ' done' : ' back';
        }
        track.appendChild(h('li', { class: cls }, h('span', null, label)));
      }
      const cls = s ? 'step done' : missing ? 'step missing' : i > lastIdx ? 'step pending' : 'step';
      const flagged = s && s.flags && s.flags.length;
      track.appendChild(h('li', { class: cls + (flagged ? ' flagged' : ''), 'data-step': k },
        h('div', { class: 'dot' }),
        h('div', { class: 'step-name' }, k),
        s ? h('div', { class: 'step-time mono' }, fmtTime(s.received_at)) : h('div', { class: 'step-time' }, missing ? 'missing' : 'not yet'),
        s ? h('div', { class: 'step-badges' }, verdictBadge(s.verdict), s.attempts ? statusBadge(s.status, s.error) : null) : null,
        s ? h('a', { class: 'small', href: '#/d/' + enc(s.id) }, 'open delivery') : null));
    });

    const issues = t.issues.length
      ? h('div', { class: 'issues bad', id: 'run-issues' }, h('strong', null, 'Look at this: '), h('ul', null, t.issues.map((x) => h('li', null, x))))
      : h('div', { class: 'issues good', id: 'run-issues' }, t.complete ? 'All three steps arrived in order.' : 'Steps so far arrived in order; the run has not finished.');

    const arrivals = h('table', { class: 'list', id: 'run-deliveries' },
      h('thead', null, h('tr', null, ['#', 'Time', '+ since previous', 'status_v2', 'Signature', 'Receiver', 'Note'].map((c) => h('th', null, c)))),
      h('tbody', null, t.steps.map((s, i) => h('tr', { class: 'row' + (s.flags ? ' flagged' : ''), 'data-id': s.id, on: { click: () => { location.hash = '#/d/' + enc(s.id); } } },
        h('td', { class: 'num' }, String(i + 1)),
        h('td', { class: 'mono' }, fmtTime(s.received_at)),
        h('td', { class: 'mono num' }, i ? '+' + fmtMs(s.since_previous_ms) : ''),
        h('td', null, stepChip((s.event || {}).status_v2)),
        h('td', null, verdictBadge(s.verdict)),
        h('td', null, s.attempts ? statusBadge(s.status, s.error) : h('span', { class: 'muted' }, 'pending')),
        h('td', { class: s.note ? 'warn-text' : '' }, s.note || '')))));

    view.appendChild(h('section', { class: 'panel run' },
      h('div', { class: 'crumbs' }, h('a', { href: '#/runs' }, '← Runs'), ' · ', h('a', { href: '#/?run_id=' + enc(runID) }, 'deliveries of this run')),
      h('h1', null, 'Run ', h('span', { class: 'mono' }, runID)),
      h('p', { class: 'muted' }, t.steps.length + ' deliveries' + (t.steps.length > 1 ? ' over ' + fmtMs(t.total_ms) : '') + (t.complete ? ' · finished' : ' · in progress')),
      track, issues,
      h('h2', null, 'In order of arrival'), h('div', { class: 'table-wrap' }, arrivals)));
  }

  // ---- health ------------------------------------------------------------------

  // showHealth draws the banner for the agent's devhook.Health.
  function showHealth(hl) {
    const el = $('#health');
    if (!el) return;
    clear(el);
    const lines = [];
    let level = '';
    if (hl && hl.storage_error) {
      level = 'bad';
      lines.push(h('p', { id: 'health-storage' }, h('strong', null, 'Recording fails'), ' since ' + fmtTime(hl.since, true) + ': ' + hl.storage_error + '. ',
        'Live deliveries are answered 503 and not forwarded; ' + (hl.held || 0) + ' queued ' + ((hl.held || 0) === 1 ? 'delivery is' : 'deliveries are') + ' held and go through by themselves once recording works again (free some disk space).'));
    }
    if (hl && hl.failed) {
      level = 'bad';
      lines.push(h('p', { id: 'health-failed' }, h('strong', null, hl.failed + (hl.failed === 1 ? ' delivery' : ' deliveries') + ' failed: '),
        'devhook gave up retrying ' + (hl.failed === 1 ? 'it' : 'them') + '. Their rows say "failed"; replay them once the receiver works.'));
    }
    if (hl && hl.owed) {
      level = level || 'warn';
      lines.push(h('p', { id: 'health-owed' }, h('strong', null, hl.owed + (hl.owed === 1 ? ' delivery' : ' deliveries') + ' owed to the receiver: '),
        'it did not take ' + (hl.owed === 1 ? 'it' : 'them') + ' (no answer, 408, 429 or 5xx); devhook retries.'));
    }
    el.hidden = lines.length === 0;
    el.className = 'health ' + level;
    el.dataset.level = level;
    append(el, lines);
  }

  async function loadHealth() {
    try {
      showHealth(await api('/api/status'));
    } catch (e) {
      // An inspector without an agent has no status to show.
    }
  }

  // ---- live stream -------------------------------------------------------

  function connect() {
    const live = $('#live');
    const es = new EventSource('/api/events');
    let opened = false;
    es.addEventListener('ready', () => {
      live.textContent = 'live';
      live.className = 'live on';
      document.body.dataset.live = '1';
      loadSettings();
      loadHealth();
      // After a reconnect, fetch what was missed.
      if (opened || state.liveSeen) render();
      opened = true;
      state.liveSeen = true;
    });
    const onChange = (e) => {
      let c;
      try { c = JSON.parse(e.data); } catch (err) { return; }
      onListChange(c);
      const D = state.detail;
      if (D && c.delivery && c.delivery.id === D.id && D.data) {
        clearTimeout(D.reload);
        D.reload = setTimeout(() => loadDetail(D), 150);
      }
      if (state.run && c.delivery && (c.delivery.event || {}).run_id === state.run) {
        clearTimeout(connect.runTimer);
        const view = $('#view');
        connect.runTimer = setTimeout(() => { if (state.run) renderRun(view, state.run); }, 150);
      }
      if (state.route && state.route.name === 'runs' && c.kind === 'delivery') {
        clearTimeout(connect.runsTimer);
        connect.runsTimer = setTimeout(() => { if (state.route.name === 'runs') renderRuns($('#view')); }, 300);
      }
    };
    es.addEventListener('delivery', onChange);
    es.addEventListener('attempt', onChange);
    es.addEventListener('retry', onChange);
    es.addEventListener('health', (e) => {
      let c;
      try { c = JSON.parse(e.data); } catch (err) { return; }
      showHealth(c.health);
    });
    es.onerror = () => {
      live.textContent = 'reconnecting…';
      live.className = 'live off';
      document.body.dataset.live = '0';
      // The browser retries by itself after a network error, but gives up
      // on an error answer (devhook shutting down): start again later.
      if (es.readyState === EventSource.CLOSED) setTimeout(connect, 2000);
    };
  }

  // ---- start -----------------------------------------------------------------

  window.addEventListener('hashchange', render);
  document.addEventListener('DOMContentLoaded', async () => {
    await loadSettings();
    loadHealth();
    render();
    connect();
  });
})();

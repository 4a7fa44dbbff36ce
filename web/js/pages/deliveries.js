// The deliveries page (#/): the filters, the table, older pages on demand,
// the rows the live stream adds, updates or removes, and a selection of
// rows to save as a scenario file or to delete.

import { listDeliveries, scenarioURL, deleteDeliveries } from '../api.js';
import { h, clear, $, saveLink } from '../dom.js';
import { fmtTime, fmtMs, pathText } from '../format.js';
import { VERDICTS, verdictBadge, statusBadge, retryChip, stepChip, runLink, routeChip } from '../badges.js';
import { deliveryHref } from '../routes.js';
import { state } from '../state.js';

const FILTER_KEYS = ['verdict', 'status', 'run_id', 'status_v2', 'q'];

// renderList draws the list for the route's filter parameters. redraw
// draws the route again: the list offers it when new deliveries may match a
// filter that only the server can apply.
export function renderList(view, params, redraw) {
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
  const all = h('input', { type: 'checkbox', id: 'select-all', 'aria-label': 'Select every delivery shown', title: 'Select every delivery shown' });
  const table = h('table', { class: 'list', id: 'deliveries' },
    h('thead', null, h('tr', null, h('th', { class: 'pick' }, all),
      ['Time', 'Method', 'Path', 'Run', 'status_v2', 'Signature', 'Receiver', 'Duration', 'Tries'].map((c) => h('th', null, c)))),
    tbody);
  const more = h('div', { class: 'more' });
  const notice = h('div', { class: 'notice', id: 'list-notice', hidden: true });
  // Records of the store that its reads skipped (damaged, or a newer
  // devhook's): the list shows the others, and says so here.
  const damage = h('div', { class: 'notice warn', id: 'list-damage', hidden: true });
  // The selection's bar sits at the end of the filters' row, so that
  // ticking a row moves no other.
  const bar = h('div', { class: 'selection-bar', id: 'selection-bar', hidden: true });
  filters.appendChild(bar);
  view.appendChild(h('section', { class: 'list-view' }, filters, damage, notice, h('div', { class: 'table-wrap' }, table), more));

  const L = { filter, items: new Map(), order: [], next: '', tbody, more, notice, damage, loading: false, redraw, selected: new Set(), all, bar };
  all.addEventListener('change', () => {
    for (const id of L.order) {
      if (all.checked) L.selected.add(id); else L.selected.delete(id);
    }
    for (const box of tbody.querySelectorAll('input.pick-box')) box.checked = all.checked;
    showSelection(L);
  });
  state.list = L;
  loadPage(L, '');
}

// showSelection draws the bar that offers to save the selected rows as a
// scenario file, and the header's box: ticked when every row shown is.
function showSelection(L) {
  const n = L.selected.size;
  L.all.checked = n > 0 && L.order.every((id) => L.selected.has(id));
  L.all.indeterminate = n > 0 && !L.all.checked;
  L.bar.hidden = n === 0;
  clear(L.bar);
  if (!n) return;
  const ids = L.order.filter((id) => L.selected.has(id));
  L.bar.appendChild(h('span', { id: 'selection-count' }, n === 1 ? '1 delivery selected' : n + ' deliveries selected'));
  L.bar.appendChild(saveLink({
    class: 'button primary small', id: 'save-selection', href: scenarioURL({ ids }),
    title: 'Download these deliveries as a scenario file, as devhook scenario save --id writes it',
  }, 'Save as scenario', L.notice, 'Could not save as a scenario: '));
  L.bar.appendChild(deleteButton(L, ids));
  L.bar.appendChild(h('button', {
    class: 'button ghost small', id: 'clear-selection', type: 'button',
    on: { click: () => { L.selected.clear(); for (const box of L.tbody.querySelectorAll('input.pick-box')) box.checked = false; showSelection(L); } },
  }, 'Clear selection'));
}

// deleteButton deletes the selected rows on a second click: the first
// asks, in the button itself.
function deleteButton(L, ids) {
  let armed = false;
  const b = h('button', {
    class: 'button danger small', id: 'delete-selection', type: 'button',
    title: 'Delete these deliveries from the record, as devhook deliveries delete does',
    on: {
      click: async () => {
        if (!armed) {
          armed = true;
          b.classList.add('armed');
          b.textContent = ids.length === 1 ? 'Delete it? Click again' : 'Delete ' + ids.length + '? Click again';
          return;
        }
        b.disabled = true;
        try {
          const res = await deleteDeliveries(ids);
          // The live stream says so too; this is for a page without it.
          onListDeleted({ deleted: res.ids || ids });
        } catch (e) {
          b.disabled = false;
          L.notice.hidden = false;
          clear(L.notice).appendChild(h('span', { class: 'error-text', id: 'delete-error' }, 'Could not delete: ' + e.message));
        }
      },
    },
  }, 'Delete');
  return b;
}

async function loadPage(L, before) {
  L.loading = true;
  clear(L.more).appendChild(h('span', { class: 'muted' }, 'Loading…'));
  let page;
  try {
    page = await listDeliveries(L.filter, before, '50');
  } catch (e) {
    clear(L.more).appendChild(h('div', { class: 'error-text' }, 'Could not list deliveries: ' + e.message));
    L.loading = false;
    return;
  }
  if (state.list !== L) return;
  L.loading = false;
  if (page.damage_note) {
    L.damage.hidden = false;
    clear(L.damage).appendChild(h('span', null, page.damage_note));
  }
  for (const s of page.items) {
    if (L.items.has(s.id)) continue;
    L.items.set(s.id, s);
    L.order.push(s.id);
    L.tbody.appendChild(listRow(L, s, false));
  }
  showSelection(L);
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

// listRow draws a delivery's row; its box keeps the row's place in the
// selection when the live stream redraws it.
function listRow(L, s, fresh) {
  const box = h('input', {
    type: 'checkbox', class: 'pick-box', checked: L.selected.has(s.id), 'aria-label': 'Select this delivery',
    on: {
      change: (e) => { if (e.target.checked) L.selected.add(s.id); else L.selected.delete(s.id); showSelection(L); },
      keydown: (e) => e.stopPropagation(),
    },
  });
  const tr = h('tr', {
    'data-id': s.id, class: fresh ? 'row fresh' : 'row', tabindex: '0',
    on: {
      click: () => { location.hash = deliveryHref(s.id); },
      keydown: (e) => { if (e.key === 'Enter') location.hash = deliveryHref(s.id); },
    },
  },
  // A click in the box's cell ticks the box, and opens nothing.
  h('td', { class: 'pick', on: { click: (e) => { e.stopPropagation(); if (e.target !== box) box.click(); } } }, box),
  h('td', { class: 'time mono', title: fmtTime(s.received_at, true) }, fmtTime(s.received_at)),
  h('td', null, h('span', { class: 'method m-' + String(s.method).toLowerCase() }, s.method)),
  h('td', { class: 'path mono' }, h('a', { href: deliveryHref(s.id) }, pathText(s)), s.queued ? h('span', { class: 'chip queued', title: 'waited in the relay for the agent' }, 'queued') : null,
    s.route && s.route.index ? routeChip(s.route) : null,
    // A search lists a delivery whose body it could not read: its body
    // may hold the text; the chip says why it is in the list.
    s.body_error ? h('span', { class: 'chip warn body-unreadable', title: s.body_error }, 'body unreadable') : null),
  h('td', null, runLink(s.event && s.event.run_id)),
  h('td', null, stepChip(s.event && s.event.status_v2)),
  h('td', null, verdictBadge(s.verdict)),
  h('td', null, s.attempts ? statusBadge(s.status, s.error) : h('span', { class: 'muted', title: 'not forwarded yet' }, 'pending'), retryChip(s.retry)),
  h('td', { class: 'num mono' }, s.attempts && !(s.attempts === 1 && s.route && s.route.target === 'drop') ? fmtMs(s.duration_ms) : ''),
  h('td', { class: 'num' }, String(s.attempts || 0)));
  return tr;
}

// onListDeleted takes the deleted deliveries out of the list; a deletion
// too large to name draws the list again.
export function onListDeleted(c) {
  const L = state.list;
  if (!L) return;
  if (c.reload) {
    L.redraw();
    return;
  }
  let n = 0;
  for (const id of c.deleted || []) {
    if (!L.items.has(id)) continue;
    L.items.delete(id);
    L.selected.delete(id);
    L.order.splice(L.order.indexOf(id), 1);
    const row = $('tr[data-id="' + CSS.escape(id) + '"]', L.tbody);
    if (row) row.remove();
    n++;
  }
  if (!n) return;
  showSelection(L);
  if (!L.next) {
    clear(L.more).appendChild(L.items.size ? h('span', { class: 'muted' }, 'End of history · ' + L.items.size + ' shown') : emptyState(L.filter));
  }
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

// onListChange brings the list up to date with a change from the live
// stream: a row it shows is redrawn, a new delivery that matches the filter
// is put in its place.
export function onListChange(c) {
  const L = state.list;
  if (!L) return;
  const s = c.delivery;
  if (L.items.has(s.id)) {
    L.items.set(s.id, s);
    const old = $('tr[data-id="' + CSS.escape(s.id) + '"]', L.tbody);
    if (old) old.replaceWith(listRow(L, s, true));
    return;
  }
  if (c.kind !== 'delivery' && c.kind !== 'attempt') return;
  if (L.filter.q) {
    // The body filter runs on the server: offer a refresh.
    L.notice.hidden = false;
    clear(L.notice).appendChild(h('span', null, 'New deliveries arrived. ',
      h('a', { href: '#', on: { click: (e) => { e.preventDefault(); L.redraw(); } } }, 'Refresh')));
    return;
  }
  if (!matchesFilter(L.filter, s)) return;
  // Newest first: ids are time-ordered.
  L.items.set(s.id, s);
  const row = listRow(L, s, true);
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
  showSelection(L);
  const empty = $('#empty');
  if (empty) clear(L.more);
}

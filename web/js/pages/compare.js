// Comparing two attempts of a delivery: their status, duration, error and
// headers in a table, and their bodies side by side, line by line.

import { h, clear, $, $$ } from '../dom.js';
import { fmtMs } from '../format.js';
import { statusBadge } from '../badges.js';

// toggleCompare ticks or unticks an attempt; ticking a third unticks the
// oldest ticked.
export function toggleCompare(D, seq, on) {
  D.compare = D.compare.filter((s) => s !== seq);
  if (on) D.compare.push(seq);
  while (D.compare.length > 2) {
    const drop = D.compare.shift();
    const box = $('.attempt[data-seq="' + drop + '"] .cmp-box');
    if (box) box.checked = false;
  }
  drawCompare(D);
}

// drawCompare shows the comparison when two attempts are ticked, and
// nothing otherwise.
export function drawCompare(D) {
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

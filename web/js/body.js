// The body viewer and the header table, for a request or an answer.

import { h, copyText } from './dom.js';
import { fmtSize } from './format.js';

// bodyViewer shows a decoded body with tabs: pretty JSON, raw text, hex,
// base64, and a download link.
export function bodyViewer(view, b64, downloadURL, name) {
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

export function headerTable(header, cls) {
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

// Element helpers: building nodes, finding them, and the page-wide
// messages (toast, error panel, copy to the clipboard).
//
// Rule: request and response content is only ever put in the page as text
// (textContent, text nodes, input values). Nothing here sets innerHTML.

import { download } from './api.js';

// h builds an element. attrs: class, title, href, id, type, value,
// data-*, aria-*, disabled, checked, on: {event: fn}. Children: nodes,
// strings (as text), arrays, null.
export function h(tag, attrs, ...children) {
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

export function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export const $ = (sel, root) => (root || document).querySelector(sel);
export const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));

export function toast(msg, kind) {
  const t = $('#toast');
  clear(t).appendChild(h('div', { class: 'toast-msg ' + (kind || '') }, msg));
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => clear(t), 4000);
}

// showError replaces the view with a panel saying what could not be shown.
export function showError(view, err, what) {
  clear(view).appendChild(h('div', { class: 'panel error-panel', 'data-error': String(err.status || '') },
    h('h2', null, what),
    h('p', null, err.message),
    h('p', null, h('a', { href: '#/' }, '← back to deliveries'))));
}

// copyText puts text on the clipboard, or, when the browser refuses, in a
// box at the top of the view to copy by hand.
export async function copyText(text, done) {
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

// saveLink is a link (attrs: id, class, title, href: an API download such
// as a scenario file) that saves what the API answers. It fetches the file
// first and saves it from memory, so that an error answer (409: a delivery
// that cannot be read, the message naming the file and what to do) is
// said in slot, after failText, and stays there to be read: a plain
// download link leaves an error answer to the browser, which says only
// that the download failed.
export function saveLink(attrs, label, slot, failText) {
  const a = h('a', Object.assign({}, attrs, {
    download: true,
    on: {
      click: async (ev) => {
        ev.preventDefault();
        if (a.dataset.busy) return;
        a.dataset.busy = '1';
        slot.hidden = true;
        clear(slot);
        try {
          const f = await download(a.getAttribute('href'));
          const url = URL.createObjectURL(f.blob);
          const save = h('a', { href: url, download: f.name, hidden: true });
          document.body.appendChild(save);
          save.click();
          save.remove();
          setTimeout(() => URL.revokeObjectURL(url), 60000);
        } catch (e) {
          slot.hidden = false;
          clear(slot).appendChild(h('span', { class: 'error-text', id: 'save-error', 'data-status': String(e.status || '') }, failText + e.message));
        } finally {
          delete a.dataset.busy;
        }
      },
    },
  }), label);
  return a;
}

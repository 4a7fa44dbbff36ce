// Element helpers: building nodes, finding them, and the page-wide
// messages (toast, error panel, copy to the clipboard).
//
// Rule: request and response content is only ever put in the page as text
// (textContent, text nodes, input values). Nothing here sets innerHTML.

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

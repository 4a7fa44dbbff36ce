// The replay workbench on the delivery page: send a delivery again as it
// arrived, re-signed or not, or edited (target, headers, body), and copy it
// as a curl command.

import { replay, curl } from '../api.js';
import { h, append, $, $$, toast, copyText } from '../dom.js';
import { fmtMs, pathText } from '../format.js';
import { state } from '../state.js';
import { VERDICTS } from '../badges.js';

// replayPanel draws the panel for the delivery D shows. reload fetches the
// delivery again, with the attempt a replay added.
export function replayPanel(D, reload) {
  const d = D.data;
  const s = state.settings || {};
  // A route that drops the delivery leaves a replay without a target: it
  // needs one, in the editor.
  const rr = d.view.replay_route;
  const dropped = !!rr && rr.target === 'drop';
  const avail = d.view.replay_available && !dropped;
  const resign = d.view.resign;
  const editor = h('div', { class: 'editor', id: 'replay-editor', hidden: !D.editorOpen });
  // Where the signature failed when the delivery came, a re-signed replay
  // carries a new, valid signature: its answer says nothing of the
  // original failure. Replaying it as it arrived comes first then.
  const failed = sigFailed(d.verdict);
  const asIs = h('button', {
    type: 'button', class: 'button' + (failed ? ' primary' : ''), id: 'replay-asis', disabled: !avail,
    title: 'Send again with the original signature header (or none, as it came)',
    on: { click: () => doReplay(D, { resign: false }, reload) },
  }, failed ? 'Replay as it arrived' : 'Replay as-is');
  const resigned = h('button', {
    type: 'button', class: 'button' + (failed ? '' : ' primary'), id: 'replay', disabled: !avail,
    title: resign ? (failed ? 'Send again with a new, valid signature (the original one failed)' : 'Send again, signed with a fresh t') : 'Send again exactly as it arrived',
    on: { click: () => doReplay(D, {}, reload) },
  }, resign ? (failed ? 'Replay with a new valid signature' : 'Replay (re-signed)') : 'Replay');
  let hint;
  if (dropped) hint = 'Route ' + rr.index + ' (' + rr.text + ') drops this delivery: give a target in Edit & replay to send it somewhere.';
  else if (!avail) hint = 'Replay is not available: no agent is running with this inspector.';
  else if (rr && rr.index) hint = 'A replay goes to route ' + rr.index + '\'s target, ' + d.view.target + ' (' + rr.text + '). ' + replayHint(s, resign, failed, d);
  if (hint === undefined) hint = replayHint(s, resign, failed, d);
  const first = resign && failed ? [asIs, resigned] : resign ? [resigned, asIs] : [resigned];
  const panel = h('section', { class: 'panel replay', id: 'replay-panel' },
    h('h2', null, 'Replay'),
    h('div', { class: 'actions' }, ...first,
      h('button', { type: 'button', class: 'button', id: 'replay-edit', disabled: !d.view.replay_available, on: { click: () => { D.editorOpen = !D.editorOpen; editor.hidden = !D.editorOpen; } } }, 'Edit & replay…'),
      h('button', { type: 'button', class: 'button ghost', id: 'copy-curl', on: { click: () => copyCurl(d) } }, 'Copy as curl')),
    h('p', { class: 'hint', id: 'replay-hint' }, hint),
    h('p', { class: 'error-text small', id: 'replay-error', hidden: true }),
    editor);
  buildEditor(D, editor, reload);
  return panel;
}

// replayHint says how a replay is signed.
function replayHint(s, resign, failed, d) {
  if (resign && failed) return 'This delivery\'s signature failed when it came (' + (VERDICTS[d.verdict.result] || [d.verdict.result])[0] + '). "Replay as it arrived" sends the same signature again, so the receiver\'s answer shows how it treats that failure. A replay re-signed carries a new, valid signature: a 200 then does not mean the original problem is gone. Every replay is recorded as an attempt.';
  if (resign) return 'Re-signed with a fresh t, so the receiver\'s 5-minute window accepts it. Every replay is recorded as an attempt.';
  return (s.secret_known ? '' : 'No secret known: replays carry the original signature, which a receiver rejects after 5 minutes. ') + 'Every replay is recorded as an attempt.';
}

// sigFailed tells a verdict that says the signature itself failed
// (missing, malformed, expired, not matching) from one that says nothing
// of it (no secret, verification off).
function sigFailed(v) {
  return !!v && ['missing_signature', 'invalid_format', 'invalid_time', 'invalid_signature'].includes(v.result);
}

function headerLines(header) {
  const out = [];
  for (const n of Object.keys(header || {}).sort()) for (const v of header[n]) out.push(n + ': ' + v);
  return out.join('\n');
}

// parseHeaderLines reads "Name: value" lines into a map from the name in
// lower case to the name as written and its values in order; a line
// without a colon is returned as a string, to be said.
function parseHeaderLines(text) {
  const m = new Map();
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    const i = line.indexOf(':');
    if (i <= 0) return line;
    const name = line.slice(0, i).trim();
    const key = name.toLowerCase();
    if (!m.has(key)) m.set(key, { name, values: [] });
    m.get(key).values.push(line.slice(i + 1).trim());
  }
  return m;
}

// headerEdit turns the editor's headers into an edit of the delivery's:
// set_header for the names whose values changed or that are new,
// remove_header for those gone. The headers the user did not touch are
// not sent back: the agent sends them as recorded, byte for byte (a value
// that is not UTF-8 shows here with U+FFFD, and would not survive a trip
// through the page).
function headerEdit(orig, edited) {
  const set = {}, remove = [];
  for (const [key, e] of edited) {
    const o = orig.get(key);
    if (!o || o.values.length !== e.values.length || o.values.some((v, i) => v !== e.values[i])) set[e.name] = e.values;
  }
  for (const [key, o] of orig) if (!edited.has(key)) remove.push(o.name);
  const out = {};
  if (Object.keys(set).length) out.set_header = set;
  if (remove.length) out.remove_header = remove;
  return out;
}

function buildEditor(D, editor, reload) {
  const d = D.data;
  const s = state.settings || {};
  const binary = !d.view.body.utf8;
  // The target a replay takes without one of its own: the route's, when a
  // route takes the delivery; none when it drops it.
  const rr = d.view.replay_route;
  const base = rr && rr.index ? (rr.target === 'drop' ? '' : rr.target) : ((s.forward || [])[0] || '');
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
              const edited = parseHeaderLines(hdrs.value);
              if (typeof edited === 'string') { toast('Header line without a colon: ' + edited, 'bad'); return; }
              Object.assign(req, headerEdit(parseHeaderLines(origHeaders), edited));
            }
            if (body.value !== origBody) {
              if (binary) req.body_base64 = body.value.replace(/\s+/g, '');
              else req.body_text = body.value;
            }
            doReplay(D, req, reload);
          },
        },
      }, 'Send'),
      h('button', { type: 'button', class: 'button ghost', on: { click: () => { D.editorOpen = false; editor.hidden = true; } } }, 'Cancel'))]);
}

async function doReplay(D, req, reload) {
  const buttons = $$('#replay-panel button');
  buttons.forEach((b) => { b.disabled = true; });
  let a;
  try {
    a = await replay(D.id, req);
  } catch (e) {
    sayRefused('Replay failed: ' + e.message);
    buttons.forEach((b) => { b.disabled = false; });
    return;
  }
  toast('Replay #' + a.seq + ': ' + (a.status ? a.status : 'none' + (a.error ? ' (' + a.error + ')' : '')) + ' in ' + fmtMs(a.duration_ms), a.status && a.status < 400 ? 'ok' : 'bad');
  D.editorOpen = false;
  if (state.detail === D) await reload();
}

async function copyCurl(d) {
  let text;
  try {
    text = await curl(d.id);
  } catch (e) {
    sayRefused('Could not build the curl command: ' + e.message);
    return;
  }
  copyText(text, 'curl command copied');
}

// sayRefused says why a replay or a curl command was refused in a toast,
// and in the panel, where it stays to be read: a delivery that cannot be
// read (409) is refused with the store's words, which name the file and
// what to do, too long for a toast.
function sayRefused(text) {
  toast(text, 'bad');
  const p = $('#replay-error');
  if (p) {
    p.textContent = text;
    p.hidden = false;
  }
}

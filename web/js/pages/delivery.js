// The delivery page (#/d/{id}): the request line and its facts, the
// signature verdict, the request, every attempt with its answer, and the
// replay panel and the comparison of two answers beside them.

import { getDelivery, bodyURL, attemptBodyURL } from '../api.js';
import { h, clear, $, showError } from '../dom.js';
import { fmtTime, fmtMs, pathText, signedAge } from '../format.js';
import { VERDICTS, verdictBadge, statusBadge, retryChip, stepChip, runLink, routeChip } from '../badges.js';
import { bodyViewer, headerTable } from '../body.js';
import { runHref } from '../routes.js';
import { state } from '../state.js';
import { drawCompare, toggleCompare } from './compare.js';
import { replayPanel } from './replay.js';

export async function renderDetail(view, id) {
  view.dataset.view = 'detail';
  const D = { id, data: null, compare: [], editorOpen: false, highlight: null };
  state.detail = D;
  await loadDetail(D);
}

async function loadDetail(D) {
  let d;
  try {
    d = await getDelivery(D.id);
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
  // Parts the store could not read (a damaged or missing body file, a
  // damaged attempt): the rest is shown, and the delivery is not sent.
  const unreadable = (d.body_error ? 1 : 0) + attempts.filter((a) => a.read_error).length;

  const head = h('section', { class: 'detail-head panel' },
    h('div', { class: 'crumbs' }, h('a', { href: '#/' }, '← Deliveries'), ev.run_id ? [' · ', h('a', { href: runHref(ev.run_id) }, 'run timeline')] : null),
    h('h1', { class: 'req-line' }, h('span', { class: 'method m-' + String(d.method).toLowerCase() }, d.method), ' ', h('span', { class: 'mono' }, pathText(d))),
    h('div', { class: 'head-badges' }, verdictBadge(v.result), ev.status_v2 ? stepChip(ev.status_v2) : null,
      last && last.read_error ? h('span', { class: 'chip warn' }, 'last attempt unreadable')
        : last && last.kind === 'drop' && last.route ? routeChip(last.route)
        : last ? [h('span', { class: 'muted' }, 'receiver'), statusBadge(last.status, last.error)] : h('span', { class: 'chip' }, 'not forwarded yet'),
      d.queued ? h('span', { class: 'chip queued' }, 'queued while no agent was connected') : null,
      retryChip(d.retry)),
    d.retry ? h('p', { class: 'retry-note ' + (d.retry.state === 'failed' ? 'error-text' : 'warn-text'), id: 'retry-note' },
      d.retry.state === 'failed'
        ? 'failed: devhook ' + (d.retry.reason || 'gave up') + '. The sender was answered 202 long ago and will not send it again: replay it once the receiver works.'
        : 'The receiver has not taken this delivery yet (no answer, 408, 429 or 5xx). devhook retries it with backoff since ' + fmtTime(d.retry.since, true) + '; each retry is an attempt below.') : null,
    unreadable ? h('p', { class: 'error-text', id: 'partial-note' },
      (d.body_error ? 'The body of this delivery cannot be read' + (unreadable > 1 ? ', nor some of its attempts' : '')
        : 'Some attempts of this delivery cannot be read') +
      ': the rest is shown below, each part that cannot be read saying why and what to do. ' +
      (d.body_error ? 'devhook does not replay it, nor export it as a whole delivery.'
        : 'Its request is whole: it can be replayed, and its curl command copied.')) : null,
    last && d.view.attempts[attempts.length - 1] && d.view.attempts[attempts.length - 1].hint
      ? h('p', { class: 'refusal-hint warn-text', id: 'refusal-hint' }, hintText(d.view.attempts[attempts.length - 1].hint)) : null,
    h('dl', { class: 'facts' },
      h('dt', null, 'Received'), h('dd', null, fmtTime(d.received_at, true)),
      h('dt', null, 'Id'), h('dd', { class: 'mono', id: 'delivery-id' }, d.id),
      ev.run_id ? [h('dt', null, 'Run'), h('dd', null, runLink(ev.run_id), ' ', h('span', { class: 'muted', id: 'status-note' }, d.view.status_note || (ev.status ? 'status ' + ev.status : '')))] : null,
      d.route ? [h('dt', null, 'Route'), h('dd', { id: 'delivery-route' }, routeChip(d.route), ' ', routeText(d.route))] : null,
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
    h('h3', null, 'Body'), d.body_error
      ? h('p', { class: 'error-text mono small', id: 'body-error' }, 'The body cannot be read: ' + d.body_error)
      : bodyViewer(d.view.body, d.body, bodyURL(d.id), 'request'));

  const attemptsBox = h('section', { class: 'panel attempts', id: 'attempts' },
    h('div', { class: 'panel-title' }, h('h2', null, 'Attempts ', h('span', { class: 'count' }, String(attempts.length))),
      attempts.length > 1 ? h('span', { class: 'hint' }, 'Tick two to compare') : null),
    attempts.length ? attempts.slice().reverse().map((a) => attemptCard(D, a, attempts.indexOf(a), highlightSeq))
      : h('p', { class: 'muted' }, 'Not forwarded yet.'));

  const compare = h('div', { id: 'compare-slot' });
  const left = h('div', { class: 'col' }, sig, request);
  const right = h('div', { class: 'col' }, replayPanel(D, () => loadDetail(D)), attemptsBox);
  view.appendChild(head);
  view.appendChild(compare);
  view.appendChild(h('div', { class: 'detail-grid' }, left, right));
  drawCompare(D);
}

// routeName is "route N", or "no route" for the default (index 0).
function routeName(r) {
  return r && r.index ? 'route ' + r.index : 'no route';
}

// routeText is what a route says, for the facts.
function routeText(r) {
  if (!r.index) return h('span', { class: 'muted' }, 'no route matched: the --forward targets');
  return h('span', { class: 'mono small', id: 'route-text' }, r.text);
}

// hintText is a refusal hint with its `commands` as code.
function hintText(s) {
  return String(s).split('`').map((part, i) => (i % 2 ? h('code', null, part) : part));
}

function attemptCard(D, a, index, highlightSeq) {
  const d = D.data;
  if (a.read_error) {
    return h('details', { class: 'attempt unreadable', 'data-seq': String(a.seq), open: true },
      h('summary', null, h('span', { class: 'seq' }, a.seq ? '#' + a.seq : '#?'), h('span', { class: 'chip warn' }, 'unreadable')),
      h('div', { class: 'attempt-body' }, h('p', { class: 'error-text mono small read-error' }, 'This attempt cannot be read: ' + a.read_error)));
  }
  const av = d.view.attempts[index] || { response: { size: 0, utf8: true } };
  const req = a.request;
  const checked = D.compare.includes(a.seq);
  const open = index === d.attempts.length - 1;
  return h('details', { class: 'attempt' + (a.seq === highlightSeq ? ' fresh' : ''), 'data-seq': String(a.seq), 'data-kind': a.kind, open },
    h('summary', null,
      h('span', { class: 'seq' }, '#' + a.seq),
      h('span', { class: 'chip kind-' + a.kind }, a.kind),
      a.route && a.kind !== 'drop' ? routeChip(a.route) : null,
      madeChips(d, a),
      a.kind === 'drop' ? null : statusBadge(a.status, a.error),
      a.kind === 'drop' ? null : h('span', { class: 'mono small' }, fmtMs(a.duration_ms)),
      h('span', { class: 'muted small', title: a.started_at }, fmtTime(a.started_at)),
      h('span', { class: 'spacer' }),
      h('label', { class: 'cmp', on: { click: (e) => e.stopPropagation() } },
        h('input', { type: 'checkbox', class: 'cmp-box', checked, on: { change: (e) => toggleCompare(D, a.seq, e.target.checked) } }), 'compare')),
    a.kind === 'drop' ? h('div', { class: 'attempt-body' },
      h('p', { class: 'small target' }, 'Dropped by ' + routeName(a.route) + ' (' + (a.route ? a.route.text : '') + '): recorded, not forwarded; the sender got 202.'))
      : h('div', { class: 'attempt-body' },
      h('p', { class: 'mono small target' }, '→ ' + a.target),
      a.error ? h('p', { class: 'error-text' }, a.error) : null,
      av.hint ? h('p', { class: 'refusal-hint warn-text' }, hintText(av.hint)) : null,
      h('h3', null, 'Response headers'), headerTable(a.header),
      h('h3', null, 'Response body'),
      bodyViewer(av.response, a.body, attemptBodyURL(d.id, a.seq), 'attempt-' + a.seq),
      req ? h('details', { class: 'sent' },
        h('summary', null, 'Request as sent (' + (a.made ? madeLabel(a) : req.resigned ? 're-signed' : 'edited') + ')'),
        h('p', { class: 'mono small' }, req.method + ' ' + req.path + (req.query ? '?' + req.query : '')),
        headerTable(req.header),
        av.request ? bodyViewer(av.request, req.body, null, 'sent-' + a.seq) : null) : null));
}

// MADE says how an attempt's request was made from its delivery (the
// attempt's "made"): its label and what it means.
const MADE = {
  'as-arrived': ['as arrived', 'sent as the delivery arrived, with its original signature'],
  're-signed': ['re-signed', 'sent as the delivery arrived, signed again with a fresh t'],
  'edited': ['edited, not re-signed', 'body or headers edited, sent with the signature header as edited (the delivery\'s, unless changed): not signed again, so it does not sign an edited body'],
  'edited re-signed': ['edited, re-signed', 'body or headers edited, then signed with a fresh t'],
};

function madeKey(a) {
  return a.made === 'edited' && a.request && a.request.resigned ? 'edited re-signed' : a.made;
}

function madeLabel(a) {
  return (MADE[madeKey(a)] || [a.made])[0];
}

// madeChips label how attempt a was made. An attempt recorded before
// devhook kept that (no "made") is told from its request, as then.
function madeChips(d, a) {
  const req = a.request;
  if (!a.made) {
    return [
      req && req.resigned ? h('span', { class: 'chip', title: 'signed again with a fresh t' }, 're-signed') : null,
      req && req.body !== d.body ? h('span', { class: 'chip warn', title: 'sent with another body' }, 'edited body') : null,
      req && headersEdited(d.header, req.header) ? h('span', { class: 'chip warn', title: 'sent with other headers' }, 'edited headers') : null,
    ];
  }
  const [label, title] = MADE[madeKey(a)] || [a.made, ''];
  return [h('span', { class: 'chip made' + (madeKey(a) === 'edited' ? ' warn' : ''), 'data-made': a.made, title }, label)];
}

// headersEdited compares two header maps, leaving out the signature,
// which a re-signed replay changes by design.
function headersEdited(a, b) {
  const norm = (x) => JSON.stringify(Object.keys(x || {}).filter((k) => k.toLowerCase() !== 'service-signature')
    .sort().map((k) => [k.toLowerCase(), x[k]]));
  return norm(a) !== norm(b);
}

// onDetailChange reloads the delivery on screen when the live stream says it
// changed, once the changes of the moment have arrived.
export function onDetailChange(c) {
  const D = state.detail;
  if (D && c.delivery && c.delivery.id === D.id && D.data) {
    clearTimeout(D.reload);
    D.reload = setTimeout(() => loadDetail(D), 150);
  }
}

// onDetailDeleted says so when the delivery on screen was deleted; a
// deletion too large to name loads it again, which says so if it went.
export function onDetailDeleted(c) {
  const D = state.detail;
  if (!D || D.deleted) return;
  const id = D.data ? D.data.id : D.id;
  if (c.reload) {
    loadDetail(D);
    return;
  }
  if (!(c.deleted || []).includes(id)) return;
  D.deleted = true;
  clearTimeout(D.reload);
  const view = clear($('#view'));
  view.appendChild(h('div', { class: 'panel', id: 'deleted-note' },
    h('h2', null, 'Deleted'),
    h('p', null, 'Delivery ', h('span', { class: 'mono' }, id), ' was deleted.'),
    h('p', null, h('a', { href: '#/' }, '← back to deliveries'))));
}

// Badges and chips shared by the pages: the signature verdict, the
// receiver's status, the retry state, the run step, a link to a run, the
// route that took a delivery.

import { h } from './dom.js';
import { fmtTime, shortID } from './format.js';
import { runHref } from './routes.js';

// VERDICTS maps a signature verdict to its words and its colour.
export const VERDICTS = {
  ok: ['valid signature', 'ok'],
  missing_signature: ['missing signature', 'bad'],
  invalid_format: ['bad signature format', 'bad'],
  invalid_time: ['signature too old/new', 'warn'],
  invalid_signature: ['invalid signature', 'bad'],
  no_secret: ['no secret to check', 'neutral'],
  unchecked: ['not checked', 'neutral'],
};

export function verdictBadge(result) {
  const v = VERDICTS[result] || [result || 'unknown', 'neutral'];
  return h('span', { class: 'badge verdict v-' + v[1], 'data-verdict': result || '', title: 'signature verdict: ' + (result || 'unknown') }, v[0]);
}

export function statusBadge(status, error) {
  if (!status) {
    return h('span', { class: 'badge status s-none', 'data-status': '0', title: error ? 'the receiver gave no status: ' + error : 'not forwarded' }, error ? 'none' : '—');
  }
  const cls = status < 300 ? 's-2xx' : status < 400 ? 's-3xx' : status < 500 ? 's-4xx' : 's-5xx';
  return h('span', { class: 'badge status ' + cls, 'data-status': String(status), title: 'receiver answered ' + status }, String(status));
}

// retryChip shows where the agent stands with a delivery it owes the
// receiver: retrying, or given up.
export function retryChip(r) {
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

export function stepChip(s) {
  if (!s) return h('span', { class: 'muted' }, '—');
  return h('span', { class: 'chip step-' + s, 'data-status-v2': s }, s);
}

export function runLink(runID) {
  if (!runID) return h('span', { class: 'muted' }, '—');
  return h('a', { class: 'mono run-link', href: runHref(runID), title: 'run timeline', on: { click: (e) => e.stopPropagation() } }, shortID(runID));
}

// routeChip names the route (listen --route) that took a delivery or chose
// an attempt's target; its text shows on hover.
export function routeChip(r) {
  const drop = r.target === 'drop';
  return h('span', {
    class: 'chip route' + (drop ? ' route-drop' : ''), 'data-route': String(r.index),
    title: r.index ? 'route ' + r.index + ': ' + r.text : 'no route matched: the --forward targets',
  }, r.index ? (drop ? 'dropped by route ' + r.index : 'route ' + r.index) : 'default');
}

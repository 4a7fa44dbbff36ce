// The runs pages: #/runs lists the runs the deliveries' data.run_id name,
// #/runs/{id} draws one run's timeline (the expected steps, the time
// between them, what is missing or out of order) and its deliveries in
// order of arrival, with "Save as scenario" (the run's deliveries as a
// scenario file). Both redraw when the live stream brings a delivery.

import { listRuns, getRun, scenarioURL } from '../api.js';
import { h, clear, $, showError, saveLink } from '../dom.js';
import { fmtTime, fmtMs } from '../format.js';
import { verdictBadge, statusBadge, stepChip } from '../badges.js';
import { deliveryHref, runHref, runDeliveriesHref } from '../routes.js';
import { state } from '../state.js';

export async function renderRuns(view) {
  view.dataset.view = 'runs';
  let runs;
  try {
    runs = await listRuns();
  } catch (e) {
    showError(view, e, 'Runs');
    return;
  }
  if (state.route.name !== 'runs') return;
  clear(view);
  const rows = runs.items.map((r) => h('tr', { class: 'row', 'data-run': r.run_id, tabindex: '0', on: { click: () => { location.hash = runHref(r.run_id); } } },
    h('td', { class: 'mono' }, h('a', { href: runHref(r.run_id) }, r.run_id)),
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

export async function renderRun(view, runID) {
  view.dataset.view = 'run';
  state.run = runID;
  let t;
  try {
    t = await getRun(runID);
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
        const diff = gapMs(p, s);
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
      s ? h('a', { class: 'small', href: deliveryHref(s.id) }, 'open delivery') : null));
  });

  const issues = t.issues.length
    ? h('div', { class: 'issues bad', id: 'run-issues' }, h('strong', null, 'Look at this: '), h('ul', null, t.issues.map((x) => h('li', null, x))))
    : h('div', { class: 'issues good', id: 'run-issues' }, t.complete ? (t.expected.length === 3 ? 'All three steps arrived in order.' : 'Every step arrived in order.') : 'Steps so far arrived in order; the run has not finished.');

  const arrivals = h('table', { class: 'list', id: 'run-deliveries' },
    h('thead', null, h('tr', null, ['#', 'Time', '+ since previous', 'status_v2', 'Signature', 'Receiver', 'Note'].map((c) => h('th', null, c)))),
    h('tbody', null, t.steps.map((s, i) => h('tr', { class: 'row' + (s.flags ? ' flagged' : ''), 'data-id': s.id, on: { click: () => { location.hash = deliveryHref(s.id); } } },
      h('td', { class: 'num' }, String(i + 1)),
      h('td', { class: 'mono' }, fmtTime(s.received_at)),
      h('td', { class: 'mono num', 'data-gap': i ? String(gapMs(t.steps[i - 1], s)) : '' }, i ? '+' + fmtMs(gapMs(t.steps[i - 1], s)) : ''),
      h('td', null, stepChip((s.event || {}).status_v2)),
      h('td', null, verdictBadge(s.verdict)),
      h('td', null, s.attempts ? statusBadge(s.status, s.error) : h('span', { class: 'muted' }, 'pending')),
      h('td', { class: s.note ? 'warn-text' : '' }, s.note || '')))));

  // Why "Save as scenario" was refused (a delivery of the run that cannot
  // be read), said under the title.
  const saveSlot = h('div', { class: 'notice', id: 'run-notice', hidden: true });
  view.appendChild(h('section', { class: 'panel run' },
    h('div', { class: 'crumbs' }, h('a', { href: '#/runs' }, '← Runs'), ' · ', h('a', { href: runDeliveriesHref(runID) }, 'deliveries of this run')),
    h('div', { class: 'panel-title' },
      h('h1', null, 'Run ', h('span', { class: 'mono' }, runID)),
      saveLink({
        class: 'button', id: 'save-scenario', href: scenarioURL({ run: runID }),
        title: 'Download the deliveries of this run as a scenario file, as devhook scenario save --run ' + runID + ' writes it',
      }, 'Save as scenario', saveSlot, 'Could not save this run as a scenario: ')),
    saveSlot,
    h('p', { class: 'muted' }, t.steps.length + ' deliveries' + (t.steps.length > 1 ? ' over ' + fmtMs(t.total_ms) : '') + (t.complete ? ' · finished' : ' · in progress')),
    track, issues,
    h('h2', null, 'In order of arrival'), h('div', { class: 'table-wrap' }, arrivals)));
}

// The timers that put off a redraw until the changes of the moment have
// arrived.
let runTimer = null;
let runsTimer = null;

// onRunsChange redraws the run on screen when the live stream brings one of
// its deliveries, and the runs list when it brings a new delivery.
export function onRunsChange(c) {
  if (state.run && c.delivery && (c.delivery.event || {}).run_id === state.run) {
    clearTimeout(runTimer);
    const view = $('#view');
    runTimer = setTimeout(() => { if (state.run) renderRun(view, state.run); }, 150);
  }
  if (state.route && state.route.name === 'runs' && c.kind === 'delivery') {
    clearTimeout(runsTimer);
    runsTimer = setTimeout(() => { if (state.route.name === 'runs') renderRuns($('#view')); }, 300);
  }
}

// gapMs is the time from step a to step b, from the server's offsets at
// full precision: the timeline and the table compute every gap this one
// way, so that the same gap is never shown rounded two ways (received_at
// through Date keeps whole milliseconds only).
function gapMs(a, b) {
  return b.offset_ms - a.offset_ms;
}

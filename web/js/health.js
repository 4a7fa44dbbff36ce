// The health banner: what the agent says is wrong (recording fails,
// deliveries failed or owed to the receiver), from /api/status at start and
// from the live stream's "health" events after.

import { getStatus } from './api.js';
import { h, append, clear, $ } from './dom.js';
import { fmtTime } from './format.js';

// showHealth draws the banner for the agent's devhook.Health.
export function showHealth(hl) {
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

export async function loadHealth() {
  try {
    showHealth(await getStatus());
  } catch (e) {
    // An inspector without an agent has no status to show.
  }
}

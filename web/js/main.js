// devhook inspector: a single page over the inspector's JSON API, written
// as native ES modules with no build step. This is the entry point: the
// router, which draws the page the URL fragment names (routes.js), the
// wiring of the live stream to the pages, and the start.
//
// Rule: request and response content is only ever put in the page as text
// (textContent, text nodes, input values). Nothing here sets innerHTML.

import { clear, $, $$ } from './dom.js';
import { loadHealth, showHealth } from './health.js';
import { startLive } from './live.js';
import { parseRoute } from './routes.js';
import { state } from './state.js';
import { renderList, onListChange, onListDeleted } from './pages/deliveries.js';
import { renderDetail, onDetailChange, onDetailDeleted } from './pages/delivery.js';
import { renderRuns, renderRun, onRunsChange } from './pages/runs.js';
import { loadSettings, renderSettings } from './pages/settings.js';

// render draws the page for the current route, forgetting the one before.
function render() {
  const r = parseRoute();
  state.route = r;
  state.list = null;
  state.detail = null;
  state.run = null;
  for (const a of $$('nav.tabs a')) {
    const on = a.dataset.nav === (r.name === 'detail' ? 'list' : r.name === 'run' ? 'runs' : r.name);
    a.classList.toggle('active', on);
  }
  const view = clear($('#view'));
  view.removeAttribute('data-view');
  switch (r.name) {
    case 'detail': return renderDetail(view, r.id);
    case 'run': return renderRun(view, r.id);
    case 'runs': return renderRuns(view);
    case 'settings': return renderSettings(view);
    default: return renderList(view, r.params, render);
  }
}

const live = {
  ready(again) {
    loadSettings();
    loadHealth();
    // After a reconnect, fetch what was missed.
    if (again) render();
  },
  change(c) {
    onListChange(c);
    onDetailChange(c);
    onRunsChange(c);
  },
  deleted(c) {
    onListDeleted(c);
    onDetailDeleted(c);
    // A run's timeline, or the runs, without them: drawn again.
    if (state.route && (state.route.name === 'run' || state.route.name === 'runs')) render();
  },
  health: showHealth,
};

window.addEventListener('hashchange', render);
document.addEventListener('DOMContentLoaded', async () => {
  await loadSettings();
  loadHealth();
  render();
  startLive(live);
});

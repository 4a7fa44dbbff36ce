// The page's routes live in the URL fragment, so that the server serves one
// page and the browser's back button works:
//
//   #/                  deliveries, newest first; ?verdict=&status=&run_id=&status_v2=&q= filter them
//   #/d/{id}            one delivery: signature, request, attempts, replay
//   #/runs              runs, grouped by data.run_id
//   #/runs/{id}         one run's timeline
//   #/settings          what this devhook listens with
//
// Anything else is the deliveries list.

const enc = encodeURIComponent;

// parseRoute reads the current fragment: {name, id, params}.
export function parseRoute() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, qs] = raw.split('?');
  const params = new URLSearchParams(qs || '');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'd' && parts[1]) return { name: 'detail', id: parts[1], params };
  if (parts[0] === 'runs' && parts[1]) return { name: 'run', id: parts[1], params };
  if (parts[0] === 'runs') return { name: 'runs', params };
  if (parts[0] === 'settings') return { name: 'settings', params };
  return { name: 'list', params };
}

export const deliveryHref = (id) => '#/d/' + enc(id);

export const runHref = (runID) => '#/runs/' + enc(runID);

// runDeliveriesHref is the list filtered to one run.
export const runDeliveriesHref = (runID) => '#/?run_id=' + enc(runID);

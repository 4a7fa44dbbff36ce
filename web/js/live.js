// The live stream: Server-Sent Events from GET /api/events.
//
//   event: ready      data: {}               the stream is open (again)
//   event: delivery   data: devhook.Change   a delivery arrived
//   event: attempt    data: devhook.Change   it was forwarded or replayed
//   event: retry      data: devhook.Change   its retry state changed
//   event: health     data: devhook.Change   the agent's health changed
//   event: deleted    data: devhook.Change   deliveries were deleted
//
// A Change is {kind, delivery: summary, attempt?, health?}; a deleted one
// is {kind, deleted: [ids]}, or {kind, reload: true} when they were too
// many to name. The server
// also sends comment lines when idle, and drops a page that falls behind:
// the browser then reconnects, and the page reloads what it missed on the
// next "ready". The badge #live and body[data-live] say whether the stream
// is up.

import { $ } from './dom.js';

// startLive opens the stream and keeps it open. hooks.ready(again) runs on
// each "ready", again being false the first time; hooks.change(c) on each
// delivery, attempt and retry change; hooks.health(h) on each health
// change, with the agent's devhook.Health; hooks.deleted(c) on each
// deletion.
export function startLive(hooks) {
  let seen = false; // a stream was ready before: a "ready" is a reconnect
  const connect = () => {
    const live = $('#live');
    const es = new EventSource('/api/events');
    es.addEventListener('ready', () => {
      live.textContent = 'live';
      live.className = 'live on';
      document.body.dataset.live = '1';
      hooks.ready(seen);
      seen = true;
    });
    const onChange = (e) => {
      let c;
      try { c = JSON.parse(e.data); } catch (err) { return; }
      hooks.change(c);
    };
    es.addEventListener('delivery', onChange);
    es.addEventListener('attempt', onChange);
    es.addEventListener('retry', onChange);
    es.addEventListener('deleted', (e) => {
      let c;
      try { c = JSON.parse(e.data); } catch (err) { return; }
      hooks.deleted(c);
    });
    es.addEventListener('health', (e) => {
      let c;
      try { c = JSON.parse(e.data); } catch (err) { return; }
      hooks.health(c.health);
    });
    es.onerror = () => {
      live.textContent = 'reconnecting…';
      live.className = 'live off';
      document.body.dataset.live = '0';
      // The browser retries by itself after a network error, but gives up
      // on an error answer (devhook shutting down): start again later.
      if (es.readyState === EventSource.CLOSED) setTimeout(connect, 2000);
    };
  };
  connect();
}

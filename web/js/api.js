// The inspector's JSON API, as the page uses it. Every request the page
// makes, and every API address it links to, is built here:
//
//   GET  /api/settings                      forward targets, public URL, secret known, verify mode
//   GET  /api/status                        the agent's health (recording, owed, failed)
//   GET  /api/deliveries?filters&before&limit   a page of summaries, newest first, and next
//   GET  /api/deliveries/{id}               one delivery with its attempts and their views
//   GET  /api/deliveries/{id}/body          the request body, to download
//   GET  /api/deliveries/{id}/attempts/{seq}/body   an answer's body, to download
//   GET  /api/deliveries/{id}/curl          a curl command that sends it again (text)
//   POST /api/deliveries/{id}/replay        send it again, maybe edited; answers the attempt
//   DELETE /api/deliveries?id=&id=          delete those deliveries; answers {deleted, ids}
//   GET  /api/runs                          deliveries grouped by run id
//   GET  /api/runs/{id}                     one run's timeline
//   GET  /api/scenario?run_id= | ?id=&id=   deliveries as a scenario file, to download
//
// The live stream (/api/events) is live.js's. An answer that is not 2xx
// throws an Error whose message is the API's "error" field and whose
// status is the HTTP status; so does a download the page fetches itself
// (download: a scenario file), to say why it was refused.

const enc = encodeURIComponent;

async function api(path, opts) {
  const res = await fetch(path, Object.assign({ headers: { Accept: 'application/json' } }, opts || {}));
  const text = await res.text();
  if (!res.ok) throw apiError(res, text);
  try { return text ? JSON.parse(text) : null; } catch (e) { return null; }
}

// apiError is the Error of an answer res that is not 2xx, whose text is
// text: the API's "error" field (what went wrong and what to do: a
// delivery that cannot be read is a 409 that says which file), else the
// status.
function apiError(res, text) {
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
  const err = new Error(body && body.error ? body.error : (res.status + ' ' + res.statusText));
  err.status = res.status;
  return err;
}

export const getSettings = () => api('/api/settings');

export const getStatus = () => api('/api/status');

// listDeliveries asks for up to limit summaries older than before (none:
// the newest) that match filter, an object of the API's filter parameters.
export function listDeliveries(filter, before, limit) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(filter)) p.set(k, v);
  if (before) p.set('before', before);
  p.set('limit', limit);
  return api('/api/deliveries?' + p.toString());
}

export const getDelivery = (id) => api('/api/deliveries/' + enc(id));

export const bodyURL = (id) => '/api/deliveries/' + enc(id) + '/body';

export const attemptBodyURL = (id, seq) => '/api/deliveries/' + enc(id) + '/attempts/' + seq + '/body';

// replay sends a delivery again; req holds what to change (to, header,
// body_text or body_base64, resign). It answers the new attempt.
export const replay = (id, req) => api('/api/deliveries/' + enc(id) + '/replay', {
  method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify(req),
});

// curl answers the curl command, as text, that sends the delivery again.
export async function curl(id) {
  const res = await fetch('/api/deliveries/' + enc(id) + '/curl');
  const text = await res.text();
  if (!res.ok) throw apiError(res, text);
  return text;
}

// download fetches url, a download the API answers (a scenario file), and
// answers its bytes and the file name its Content-Disposition gives. An
// error answer throws, as api's do.
export async function download(url) {
  const res = await fetch(url);
  if (!res.ok) throw apiError(res, await res.text());
  const m = /filename="?([^";]+)"?/.exec(res.headers.get('Content-Disposition') || '');
  return { blob: await res.blob(), name: m ? m[1] : 'download' };
}

// deleteDeliveries deletes the deliveries ids: all of them, or none when
// one is gone already.
export const deleteDeliveries = (ids) => api('/api/deliveries?' + ids.map((id) => 'id=' + enc(id)).join('&'), { method: 'DELETE' });

export const listRuns = () => api('/api/runs');

export const getRun = (id) => api('/api/runs/' + enc(id));

// scenarioURL is the download of deliveries as a scenario file, the bytes
// `devhook scenario save --run RUN_ID` (sel.run) or `--id ID,ID` (sel.ids)
// writes.
export function scenarioURL(sel) {
  const p = new URLSearchParams();
  if (sel.run) p.set('run_id', sel.run);
  for (const id of sel.ids || []) p.append('id', id);
  return '/api/scenario?' + p.toString();
}

// Formatting: times, durations, sizes, ids and paths as the page shows
// them. Plain strings in, plain strings out; nothing here touches the page.

export function fmtTime(iso, withDate) {
  if (!iso) return '';
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  const p = (n, w) => String(n).padStart(w || 2, '0');
  const time = p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds()) + '.' + p(d.getMilliseconds(), 3);
  const today = new Date();
  if (withDate || d.toDateString() !== today.toDateString()) {
    return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' + time;
  }
  return time;
}

export function fmtMs(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return '';
  ms = Number(ms);
  if (ms < 0) return '−' + fmtMs(-ms);
  if (ms < 1) return ms.toFixed(2) + ' ms';
  if (ms < 100) return ms.toFixed(1) + ' ms';
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
  const m = Math.floor(ms / 60000);
  if (m < 60) return m + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
  return Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
}

export function fmtSize(n) {
  if (n < 1024) return n + ' B';
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
  return (n / 1024 / 1024).toFixed(1) + ' MiB';
}

// shortID keeps the head and the tail of a long id.
export function shortID(id) {
  return id && id.length > 18 ? id.slice(0, 8) + '…' + id.slice(-6) : id;
}

// pathText is a request's path with its query.
export function pathText(s) {
  return s.path + (s.query ? '?' + s.query : '');
}

// signedAge says how long before arrival a delivery was signed.
export function signedAge(ms) {
  if (ms < 0) return fmtMs(-ms) + ' after it arrived: the sender\'s clock is ahead';
  return fmtMs(ms) + ' before it arrived';
}

// Settings: what this devhook listens with. loadSettings fetches them and
// draws the strip in the header; renderSettings is the #/settings page.

import { getSettings } from '../api.js';
import { h, clear, $ } from '../dom.js';
import { state } from '../state.js';

export async function loadSettings() {
  try {
    state.settings = await getSettings();
  } catch (e) {
    return;
  }
  const s = state.settings;
  const strip = clear($('#settings-strip'));
  strip.appendChild(h('span', { class: 'kv', title: 'forward targets' }, '→ ',
    h('span', { class: 'mono' }, s.forward.length ? s.forward.join(', ') : 'no forward target')));
  const routes = s.routes || [];
  if (routes.length) strip.appendChild(h('span', { class: 'kv', id: 'routes-count', title: routes.map((r) => 'route ' + r.index + ': ' + r.text).join('\n') }, routes.length === 1 ? '1 route' : routes.length + ' routes'));
  if (s.public_url) strip.appendChild(h('span', { class: 'kv', title: 'public URL: give this to the service' }, 'public ', h('span', { class: 'mono' }, s.public_url)));
  strip.appendChild(h('span', { class: 'badge ' + (s.secret_known ? 'v-ok' : 'v-neutral'), id: 'secret-state' },
    s.secret_known ? 'secret known' : 'no secret'));
}

export function renderSettings(view) {
  view.dataset.view = 'settings';
  const s = state.settings;
  if (!s) {
    view.appendChild(h('p', { class: 'pad muted' }, 'Settings are not available.'));
    return;
  }
  const row = (k, v, hint) => [h('dt', null, k), h('dd', null, v, hint ? h('div', { class: 'hint' }, hint) : null)];
  view.appendChild(h('section', { class: 'panel settings' },
    h('h2', null, 'Settings'),
    h('dl', { class: 'deflist' },
      (s.routes || []).length ? row('Routes', h('ol', { class: 'plain', id: 'routes' }, s.routes.map((r) => h('li', { class: 'mono' }, 'route ' + r.index + '  ' + r.text))),
        'Tried in order for each delivery: the first whose conditions all hold sends it to its target, or drops it (recorded, not forwarded, the sender answered 202).') : null,
      row('Forward targets', s.forward.length ? h('ul', { class: 'plain' }, s.forward.map((f) => h('li', { class: 'mono' }, f))) : h('span', { class: 'muted' }, 'none'),
        (s.routes || []).length ? 'What no route matches is sent to these local receivers.' : 'Each delivery is sent to these local receivers.'),
      row('Public URL', s.public_url ? h('span', { class: 'mono', id: 'public-url' }, s.public_url) : h('span', { class: 'muted' }, 'unknown'),
        'Register this URL as the webhook\'s endpoint_url with the service.'),
      row('Relay', s.relay_url ? h('span', { class: 'mono' }, s.relay_url) : h('span', { class: 'muted' }, 'unknown')),
      row('Channel', s.channel ? h('span', { class: 'mono' }, s.channel) : h('span', { class: 'muted' }, '—')),
      row('Webhook secret', h('span', { class: 'badge ' + (s.secret_known ? 'v-ok' : 'v-neutral') }, s.secret_known ? 'known' : 'not known'),
        s.secret_known ? 'Signatures are checked and replays are re-signed with a fresh t. The secret is never shown.'
          : 'Without the secret devhook cannot check signatures or re-sign replays. Start devhook listen with --secret or --register.'),
      row('Signature check', h('span', { class: 'mono' }, s.verify),
        s.verify === 'enforce' ? 'Deliveries with a bad signature are answered by devhook and not forwarded.'
          : s.verify === 'off' ? 'Signatures are not checked.' : 'Every delivery is forwarded; the verdict is recorded.'),
      row('Replay', s.replay_available ? 'available' : 'not available'))));
}

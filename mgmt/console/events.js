// Events and operations: the event log (newest first) and the array's
// long-running work with its progress, which a running one can cancel;
// refreshed every 2 s.
//   ListEvents (the newest 200), ListOperations, CancelOperation.
import { call, list_all, num } from './api.js';
import { action, badge, clear, h, progress, short, state_name, table, time } from './ui.js';

export const title = 'Events and operations';
const events_shown = 200;

export async function render(root, scope) {
  const ops_section = h('section.card.wide', { id: 'operations' }, h('h2', {}, 'Operations'));
  const events_section = h('section.card.wide', { id: 'events' }, h('h2', {}, 'Events'));
  root.append(ops_section, events_section);

  const refresh = async () => {
    const [operations, events] = await Promise.all([
      list_all('ListOperations', {}, 'operations'),
      call('ListEvents', { pageSize: events_shown }),
    ]);
    if (!scope.alive) return;
    // Running first, then the newest.
    operations.sort((a, b) => (b.state === 'RUNNING') - (a.state === 'RUNNING') || num(b.createTimeUnixMs) - num(a.createTimeUnixMs));
    clear(ops_section, h('h2', {}, 'Operations'), table(['Operation', 'Kind', 'On', 'State', 'Progress', 'Started', 'Ended', 'Error', ''],
      operations.map((o) => ({
        dataset: { name: o.name, kind: o.kind, state: o.state, progress: String(o.progressFraction) },
        cells: [short(o.name), o.kind, o.resource, badge(o.state, { RUNNING: 'warn', SUCCEEDED: 'good', FAILED: 'bad' }[o.state] ?? ''),
          progress(o.progressFraction), time(o.createTimeUnixMs), time(o.endTimeUnixMs), o.error?.message || '-',
          o.state === 'RUNNING' ? action('Cancel', async () => { await call('CancelOperation', { name: o.name }); await refresh(); },
            { confirm_text: `Cancel ${o.kind} of ${o.resource}?`, kind: 'danger' }) : ''],
      })), { empty: 'no operations since the array started' }));
    clear(events_section, h('h2', {}, 'Events'), table(['Time', 'Severity', 'About', 'Message'],
      (events.events ?? []).map((e) => {
        const severity = state_name(e.severity, 'SEVERITY_');
        return {
          dataset: { name: e.name, severity },
          class: `severity-${severity.toLowerCase()}`,
          cells: [time(e.timeUnixMs), badge(severity, { WARNING: 'warn', ERROR: 'bad', CRITICAL: 'bad', INFO: '' }[severity] ?? ''),
            e.resource || '-', e.message],
        };
      }), { empty: 'no events' }),
    events.nextPageToken ? h('p.hint', {}, `The newest ${events_shown}; \`strata events --limit 1000\` shows more.`) : null);
  };
  await scope.every(2000, refresh);
}

// Disks and groups: each group's state, rebuild and scrub, each disk's
// state and health, refreshed every second; the CLI's disk and group
// actions.
//   ListDiskGroups, ListDisks, ListOperations (rebuilds and scrubs running);
//   FailDisk, ReplaceDisk, UpdateDisk (update_mask "spare"),
//   ScrubDiskGroup, CancelOperation.
import { call, list_all, num } from './api.js';
import { action, api_form, badge, bytes, clear, fixed, h, progress, short, state_name, table } from './ui.js';

export const title = 'Disks and groups';

export async function render(root, scope) {
  const groups_section = h('section.card.wide', { id: 'groups' }, h('h2', {}, 'Disk groups'));
  const ops_section = h('section.card.wide', { id: 'group-operations' }, h('h2', {}, 'Rebuilds and scrubs'));
  const disks_section = h('section.card.wide', { id: 'disks' }, h('h2', {}, 'Disks'));
  const replace_form = api_form({
    title: 'Replace a failed disk',
    fields: [
      { name: 'name', label: 'Failed disk', field: 'name', options: [] },
      { name: 'replacement', label: 'Replacement', field: 'replacement', options: [] },
    ],
    submit_label: 'Replace',
    // "the same disk" (value ""): the failed disk's own name.
    submit: (v) => call('ReplaceDisk', { name: v.name, replacement: v.replacement || v.name }),
    done: () => refresh(),
  });
  replace_form.id = 'replace-form';
  root.append(groups_section, ops_section, disks_section, h('section.card', {}, replace_form));

  const refresh = async () => {
    const [groups, disks, operations] = await Promise.all([
      list_all('ListDiskGroups', {}, 'groups'),
      list_all('ListDisks', {}, 'disks'),
      list_all('ListOperations', {}, 'operations'),
    ]);
    if (!scope.alive) return;
    draw_groups(groups_section, groups, refresh);
    draw_operations(ops_section, operations.filter((o) => o.kind.startsWith('group.') || o.kind.startsWith('disk.')), refresh);
    draw_disks(disks_section, disks, refresh);
    // The replace form's choices: failed members, and what may take their
    // place (a blank disk, a spare, or the failed disk itself).
    const failed = disks.filter((d) => d.state === 'DISK_FAILED').map((d) => [d.name, short(d.name)]);
    const blank = disks.filter((d) => d.state === 'DISK_UNUSED' || d.state === 'DISK_SPARE').map((d) => [d.name, `${short(d.name)} (${state_name(d.state, 'DISK_').toLowerCase()})`]);
    set_options(replace_form.inputs.name, failed.length ? failed : [['', 'no failed disk']]);
    set_options(replace_form.inputs.replacement, [['', 'the same disk (rebuild in place)'], ...blank]);
  };
  await scope.every(1000, refresh);
}

// Rebuilds a select's options only when they changed, so that a choice
// being made is not lost to the refresh.
function set_options(select, options) {
  const key = JSON.stringify(options);
  if (select.dataset.options === key) return;
  const chosen = select.value;
  clear(select, options.map(([value, label]) => h('option', { value }, label)));
  if (options.some(([value]) => value === chosen)) select.value = chosen;
  select.dataset.options = key;
}

function draw_groups(section, groups, refresh) {
  clear(section, h('h2', {}, 'Disk groups'), table(['Group', 'Kind', 'State', 'Size', 'Background work', 'Repaired blocks', 'Members', ''],
    groups.map((g) => {
      const state = state_name(g.state, 'GROUP_');
      const done = num(g.rebuildBytesDone);
      const total = num(g.rebuildBytesTotal);
      let work = '-';
      if (state === 'REBUILDING' && total > 0) work = h('span', {}, 'rebuild ', progress(done / total), ` ${fixed(g.rebuildEtaSeconds, 0)} s left`);
      else if (g.scrubbing) work = 'scrubbing';
      else if (g.resyncing) work = 'resync';
      if (num(g.resyncUnverifiableStripes) > 0) work = h('span', {}, work, ` · ${g.resyncUnverifiableStripes} stripes unverifiable`);
      return {
        dataset: { name: g.name, state, rebuildDone: String(done), rebuildTotal: String(total), scrubbing: String(g.scrubbing) },
        class: `state-${state.toLowerCase()}`,
        cells: [short(g.name), g.kind, badge(state, state === 'OPTIMAL' ? 'good' : state === 'REBUILDING' ? 'warn' : 'bad'), bytes(g.sizeBytes),
          work, g.repairedBlocks, g.members.map(short).join(', '),
          g.kind === 'RAID6' ? action('Scrub', async () => { await call('ScrubDiskGroup', { name: g.name }); await refresh(); }) : ''],
      };
    })));
}

function draw_operations(section, operations, refresh) {
  const recent = operations.filter((o) => o.state === 'RUNNING' || Date.now() - num(o.endTimeUnixMs) < 10 * 60 * 1000);
  clear(section, h('h2', {}, 'Rebuilds and scrubs'), table(['Operation', 'Kind', 'On', 'State', 'Progress', ''],
    recent.map((o) => ({
      dataset: { name: o.name, kind: o.kind, state: o.state, progress: String(o.progressFraction) },
      cells: [short(o.name), o.kind, o.resource, o.state, progress(o.progressFraction),
        o.state === 'RUNNING' ? action('Cancel', async () => { await call('CancelOperation', { name: o.name }); await refresh(); }, { kind: 'danger' }) : ''],
    })), { empty: 'none running' }));
}

function draw_disks(section, disks, refresh) {
  clear(section, h('h2', {}, 'Disks'), table(['Disk', 'Slot', 'Kind', 'Size', 'State', 'Group', 'Read errors / timeouts', 'Model', ''],
    disks.map((d) => {
      const state = state_name(d.state, 'DISK_');
      const kind = { ONLINE: 'good', SPARE: 'good', FAILED: 'bad', REBUILDING: 'warn' }[state] ?? '';
      const health = `${d.health?.readErrors ?? 0} / ${d.health?.timeouts ?? 0}`;
      const actions = [];
      if (state === 'ONLINE') {
        actions.push(action('Fail', async () => { await call('FailDisk', { name: d.name }); await refresh(); },
          { confirm_text: `Fail ${d.name} out of ${d.group}, as a dying drive would be?`, kind: 'danger' }));
      }
      if (state === 'UNUSED') {
        actions.push(action('Make spare', async () => {
          await call('UpdateDisk', { disk: { name: d.name, spare: true }, updateMask: 'spare' });
          await refresh();
        }));
      }
      if (state === 'SPARE') {
        actions.push(action('Unmake spare', async () => {
          await call('UpdateDisk', { disk: { name: d.name, spare: false }, updateMask: 'spare' });
          await refresh();
        }));
      }
      return {
        dataset: { name: d.name, state },
        class: `state-${state.toLowerCase()}`,
        cells: [short(d.name), d.slot, d.kind, bytes(d.sizeBytes), badge(state, kind),
          d.group ? `${short(d.group)} #${d.member}` : '-', h('span', {}, health, d.health?.failure ? h('span.failure', {}, ` ${d.health.failure}`) : ''),
          d.model, h('span.actions', {}, actions)],
      };
    })));
}

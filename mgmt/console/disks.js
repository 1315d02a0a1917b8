// Disks and groups: each group's state, rebuild and scrub, each disk's
// state and health, refreshed every second; the CLI's disk and group
// actions.
// actions; a Ceph tier connected to a pool, and the pools' cold cooling.
//   ListDiskGroups, ListDisks, ListOperations (rebuilds and scrubs running),
//   ListPools; FailDisk, ReplaceDisk, UpdateDisk (update_mask "spare"),
//   ScrubDiskGroup, CancelOperation, CreateDiskGroup (kind CEPH),
//   UpdatePool (update_mask "cold_cooling_seconds").
import { ApiError, call, list_all, num } from './api.js';
import { action, api_form, badge, bytes, clear, fixed, h, parse_size, progress, short, state_name, table } from './ui.js';

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
  const pool_options = (await list_all('ListPools', {}, 'pools')).map((p) => [p.name, short(p.name)]);
  // A Ceph tier for a pool: the API checks every input against the
  // cluster before it records anything, and names what is wrong.
  const ceph_form = api_form({
    title: 'Add a Ceph tier to a pool',
    fields: [
      { name: 'id', label: 'Group name', field: 'group_id', placeholder: 'c1' },
      { name: 'pool', label: 'Pool', field: 'pool', options: pool_options },
      { name: 'monitors', label: 'Monitors', field: 'group.ceph.monitors', placeholder: '10.0.0.1:3300,10.0.0.2:3300' },
      { name: 'user', label: 'cephx user', field: 'group.ceph.user', placeholder: 'admin' },
      { name: 'keyring', label: 'Keyring file (on the controller)', field: 'group.ceph.keyring_path', placeholder: '/etc/ceph/ceph.client.strata.keyring' },
      { name: 'rados_pool', label: 'RADOS pool', field: 'group.ceph.rados_pool', placeholder: 'strata' },
      { name: 'image', label: 'RBD image', field: 'group.ceph.image', placeholder: 'p1-cold' },
      { name: 'size', label: 'Size', field: 'group.ceph.size_bytes', placeholder: '10T' },
      { name: 'create', label: 'Create the image', field: 'group.ceph.create', type: 'checkbox' },
    ],
    submit_label: 'Connect',
    submit: (v) => {
      const size = parse_size(v.size);
      if (v.size === '' || Number.isNaN(size)) {
        const reason = `"${v.size}" is not a size (bytes, or with K, M, G, T: 10T)`;
        throw new ApiError({ code: 'invalid_argument', message: `group.ceph.size_bytes: ${reason}`, field: 'group.ceph.size_bytes', reason, status: 0 });
      }
      const ceph = { monitors: v.monitors, user: v.user, keyringPath: v.keyring, radosPool: v.rados_pool, image: v.image, sizeBytes: String(size), create: v.create };
      return call('CreateDiskGroup', { groupId: v.id, group: { kind: 'CEPH', ceph }, pool: v.pool });
    },
    done: () => refresh(),
  });
  ceph_form.id = 'ceph-form';
  const cooling_form = api_form({
    title: "A pool's cold cooling",
    fields: [
      { name: 'pool', label: 'Pool', field: 'pool.name', options: pool_options },
      { name: 'seconds', label: 'Idle seconds before Ceph (0: never)', field: 'pool.cold_cooling_seconds', placeholder: '2678400 (31 days)' },
    ],
    submit_label: 'Set',
    submit: (v) => {
      if (!/^[0-9]+$/.test(v.seconds)) {
        const reason = `"${v.seconds}" is not a whole number of seconds`;
        throw new ApiError({ code: 'invalid_argument', message: `pool.cold_cooling_seconds: ${reason}`, field: 'pool.cold_cooling_seconds', reason, status: 0 });
      }
      return call('UpdatePool', { pool: { name: v.pool, coldCoolingSeconds: v.seconds }, updateMask: 'coldCoolingSeconds' });
    },
  });
  cooling_form.id = 'cooling-form';
  root.append(groups_section, ops_section, disks_section,
    h('div.forms', {}, h('section.card', {}, replace_form), h('section.card', {}, ceph_form), h('section.card', {}, cooling_form)));

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
      let members = g.members.map(short).join(', ');
      if (g.kind === 'CEPH' && g.ceph) {
        // Where its image is, and what its cluster says.
        const c = g.ceph;
        members = `${c.radosPool}/${c.image} at ${c.monitors}`;
        const cluster = (num(c.clusterSizeBytes) ? ` · cluster ${bytes(c.clusterUsedBytes)} of ${bytes(c.clusterSizeBytes)} used` : '') +
          (num(c.radosPoolAvailableBytes) ? ` · ${bytes(c.radosPoolAvailableBytes)} left in ${c.radosPool}` : '');
        work = h('span.ceph-health', {}, c.status || c.health || '-', (c.healthChecks ?? []).map((x) => `; ${x}`).join(''), cluster);
      }
      return {
        dataset: { name: g.name, state, rebuildDone: String(done), rebuildTotal: String(total), scrubbing: String(g.scrubbing) },
        class: `state-${state.toLowerCase()}`,
        cells: [short(g.name), g.kind, badge(state, state === 'OPTIMAL' ? 'good' : state === 'REBUILDING' ? 'warn' : 'bad'), bytes(g.sizeBytes),
          work, g.repairedBlocks, members,
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

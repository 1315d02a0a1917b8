// Volumes: each volume's size, where its data lies (SSD, HDD and Ceph
// tier), read-cache hits and latency (and per tier), refreshed every 2 s; create, resize, move
// between tiers, delete.
//   ListPools (the create form's choices), ListVolumes of every pool
//   (parent pools/-), GetVolumeStatistics per volume;
//   CreateVolume, UpdateVolume (update_mask "size_bytes"), MoveVolume,
//   DeleteVolume.
import { ApiError, call, list_all, num } from './api.js';
import { action, api_form, bytes, clear, fixed, h, parse_size, percent, short, show_notice, table } from './ui.js';

export const title = 'Volumes';

// A size the form could not read, named at the field the API would name.
function size_of(text, field) {
  const size = parse_size(text);
  if (text === '' || Number.isNaN(size)) {
    const reason = `"${text}" is not a size (bytes, or with K, M, G, T: 100G)`;
    throw new ApiError({ code: 'invalid_argument', message: `${field}: ${reason}`, field, reason, status: 0 });
  }
  return size;
}

export async function render(root, scope) {
  const list_section = h('section.card.wide', { id: 'volumes' }, h('h2', {}, 'Volumes'));
  const pools = await list_all('ListPools', {}, 'pools');
  const pool_options = pools.map((p) => [p.name, short(p.name)]);

  const create_form = api_form({
    title: 'Create a volume',
    fields: [
      { name: 'pool', label: 'Pool', field: 'parent', options: pool_options },
      { name: 'id', label: 'Name', field: 'volume_id', placeholder: 'v2' },
      { name: 'size', label: 'Size', field: 'volume.size_bytes', placeholder: '100G' },
      { name: 'affinity', label: 'Affinity', field: 'volume.affinity', options: [['AUTO', 'auto'], ['PERFORMANCE', 'performance (SSD)'], ['CAPACITY', 'capacity (HDD)'], ['LOCAL', 'local (never Ceph)']] },
      { name: 'block_size', label: 'Block size', field: 'volume.block_size_bytes', options: [['512', '512 (512e)'], ['4096', '4096 (4Kn)']] },
      { name: 'write_cache', label: 'Write cache', field: 'volume.write_cache', options: [['', "the pool's"], ['WRITE_THROUGH', 'write-through']] },
    ],
    submit_label: 'Create',
    submit: (v) => {
      const volume = { sizeBytes: String(size_of(v.size, 'volume.size_bytes')), affinity: v.affinity, blockSizeBytes: Number(v.block_size) };
      if (v.write_cache) volume.writeCache = v.write_cache;
      return call('CreateVolume', { parent: v.pool, volumeId: v.id, volume });
    },
    done: async (volume, form) => {
      form.reset();
      show_notice(`${volume.name} created`);
      await refresh();
    },
  });
  create_form.id = 'create-volume';

  const resize_form = api_form({
    title: 'Resize a volume (grow only)',
    fields: [
      { name: 'name', label: 'Volume', field: 'volume.name', options: [] },
      { name: 'size', label: 'New size', field: 'volume.size_bytes', placeholder: '200G' },
    ],
    submit_label: 'Resize',
    submit: (v) => call('UpdateVolume', { volume: { name: v.name, sizeBytes: String(size_of(v.size, 'volume.size_bytes')) }, updateMask: 'sizeBytes' }),
    done: async () => refresh(),
  });
  resize_form.id = 'resize-volume';
  root.append(list_section, h('div.forms', {}, h('section.card', {}, create_form), h('section.card', {}, resize_form)));

  let names = '';
  const refresh = async () => {
    const volumes = await list_all('ListVolumes', { parent: 'pools/-' }, 'volumes');
    const stats = await Promise.all(volumes.map((v) => call('GetVolumeStatistics', { name: v.name })));
    if (!scope.alive) return;
    draw_volumes(list_section, volumes, stats, refresh);
    const key = volumes.map((v) => v.name).join(',');
    if (key !== names) {
      names = key;
      const select = resize_form.inputs.name;
      const chosen = select.value;
      clear(select, volumes.map((v) => h('option', { value: v.name }, v.name)));
      if (volumes.some((v) => v.name === chosen)) select.value = chosen;
    }
  };
  await scope.every(2000, refresh);
}

function draw_volumes(section, volumes, stats, refresh) {
  const any_cold = stats.some((s) => num(s.coldBytes) > 0 || (s.coldTierFraction ?? 0) > 0);
  clear(section, h('h2', {}, 'Volumes'), table(
    ['Volume', 'Size', 'Block', 'Affinity', 'Write cache', 'Allocated', any_cold ? 'Placement (SSD / HDD / Ceph)' : 'Placement (SSD / HDD)', 'Cache hits', 'SSD reads',
      any_cold ? 'Ceph reads' : null, 'IOPS (r / w)', 'Latency ms (r / w)', 'Read ms by tier (mean / p99)', ''].filter((c) => c !== null),
    volumes.map((v, i) => {
      const s = stats[i];
      const allocated = num(s.allocatedBytes);
      const ssd = num(s.performanceBytes);
      const cold = num(s.coldBytes);
      const width = (part) => `${allocated ? (100 * part) / allocated : 0}%`;
      const placement = h('span.placement', { title: `${bytes(ssd)} on SSD, ${bytes(s.capacityBytes)} on HDD, ${bytes(cold)} in Ceph` },
        h('span.split', {}, h('span.ssd', { style: { width: width(ssd) } }), any_cold ? h('span.cold', { style: { width: width(cold) } }) : null),
        ` ${bytes(ssd)} / ${bytes(s.capacityBytes)}`, any_cold ? ` / ${bytes(cold)}` : '');
      const tier_names = { performance: 'SSD', capacity: 'HDD', cold: 'Ceph', cache: 'cache' };
      const by_tier = (s.tierReads ?? []).filter((t) => (t.latencyMs ?? 0) > 0)
        .map((t) => h('span.tier-latency', { dataset: { tier: t.tier } }, `${tier_names[t.tier] ?? t.tier} ${fixed(t.latencyMs, 2)} / ${fixed(t.p99LatencyMs, 1)}`));
      return {
        dataset: { name: v.name, sizeBytes: String(v.sizeBytes) },
        cells: [v.name, bytes(v.sizeBytes), v.blockSizeBytes, String(v.affinity).toLowerCase(),
          s.writeCache || (v.writeCache === 'WRITE_THROUGH' ? 'write-through' : 'write-back'), bytes(allocated), placement,
          percent(s.cacheHitFraction), percent(s.performanceTierFraction), any_cold ? percent(s.coldTierFraction) : null,
          `${fixed(s.readIops, 0)} / ${fixed(s.writeIops, 0)}`, `${fixed(s.readLatencyMs, 2)} / ${fixed(s.writeLatencyMs, 2)}`,
          by_tier.length ? h('span.tier-latencies', {}, by_tier) : '-',
          h('span.actions', {},
            action('To SSD', async () => { await call('MoveVolume', { name: v.name, affinity: 'PERFORMANCE' }); show_notice(`${v.name}: moving to the SSD tier`); await refresh(); }),
            action('To HDD', async () => { await call('MoveVolume', { name: v.name, affinity: 'CAPACITY' }); show_notice(`${v.name}: moving to the HDD tier`); await refresh(); }),
            action('Delete', async () => { await call('DeleteVolume', { name: v.name }); show_notice(`${v.name} deleted`); await refresh(); },
              { confirm_text: `Delete ${v.name} and its data?`, kind: 'danger' }))].filter((c) => c !== null),
      };
    })));
}

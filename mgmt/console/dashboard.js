// Dashboard: the controllers, the pools' space per tier, what needs an
// admin (alerts), and the live I/O, refreshed every 2 s.
//   ListControllers; ListPools + GetPoolStatistics per pool; ListDiskGroups,
//   ListDisks, ListOperations (alerts); ListVolumes (pools/-: every pool's)
//   + GetVolumeStatistics per volume (latency: the mean over the volumes,
//   weighted by IOPS).
import { call, list_all, num } from './api.js';
import { badge, bytes, clear, fixed, h, progress, short, state_name, table, time } from './ui.js';

export const title = 'Dashboard';
const history_samples = 60;  // two minutes at 2 s

export async function render(root, scope) {
  const controllers = h('section.card', {}, h('h2', {}, 'Controllers'));
  const alerts = h('section.card', { id: 'alerts' }, h('h2', {}, 'Alerts'));
  const live = h('section.card', { id: 'live' }, h('h2', {}, 'Live I/O'));
  const pools = h('section.card.wide', { id: 'pools' }, h('h2', {}, 'Pools'));
  root.append(h('div.grid', {}, controllers, alerts, live, pools));
  const samples = [];

  await scope.every(2000, async () => {
    const [controller_list, pool_list, groups, disks, operations] = await Promise.all([
      list_all('ListControllers', {}, 'controllers'),
      list_all('ListPools', {}, 'pools'),
      list_all('ListDiskGroups', {}, 'groups'),
      list_all('ListDisks', {}, 'disks'),
      list_all('ListOperations', {}, 'operations'),
    ]);
    const volumes = await list_all('ListVolumes', { parent: 'pools/-' }, 'volumes');
    const [pool_stats, volume_stats] = await Promise.all([
      Promise.all(pool_list.map((p) => call('GetPoolStatistics', { name: p.name }))),
      Promise.all(volumes.map((v) => call('GetVolumeStatistics', { name: v.name }))),
    ]);
    if (!scope.alive) return;
    draw_controllers(controllers, controller_list);
    draw_alerts(alerts, groups, disks, operations, pool_stats);
    samples.push(totals(pool_stats, volume_stats));
    if (samples.length > history_samples) samples.shift();
    draw_live(live, samples);
    draw_pools(pools, pool_list, pool_stats);
  });
}

function draw_controllers(section, list) {
  clear(section, h('h2', {}, 'Controllers'), table(['Controller', 'State', 'Version', 'iSCSI portal', 'Pools', 'Started'],
    list.map((c) => {
      const state = state_name(c.state, 'CONTROLLER_');
      return { dataset: { name: c.name, state }, cells: [short(c.name), badge(state, state === 'ACTIVE' ? 'good' : 'bad'), c.version || '-',
        c.iscsiPortal || '-', c.pools.map(short).join(', ') || '-', time(c.startTimeUnixMs)] };
    })));
}

function draw_alerts(section, groups, disks, operations, pool_stats) {
  const items = [];
  for (const g of groups) {
    const state = state_name(g.state, 'GROUP_');
    if (state === 'DEGRADED' || state === 'FAILED') items.push(['bad', `${g.name} is ${state.toLowerCase()}: ${g.failedMembers} member(s) failed`]);
    // A Ceph tier out of reach: its extents' I/O fails, the rest serves.
    if (state === 'UNAVAILABLE') items.push(['bad', `${g.name} (Ceph) is unavailable: ${g.ceph?.status || g.ceph?.health || 'its cluster does not answer'}`]);
    if (state === 'REBUILDING') {
      const total = num(g.rebuildBytesTotal);
      items.push(['warn', h('span', {}, `${g.name} is rebuilding `, progress(total ? num(g.rebuildBytesDone) / total : 0),
        ` ${fixed(g.rebuildEtaSeconds, 0)} s left`)]);
    }
  }
  for (const d of disks) {
    if (d.state === 'DISK_FAILED') items.push(['bad', `${d.name} failed${d.health?.failure ? `: ${d.health.failure}` : ''}`]);
  }
  for (const o of operations) {
    if (o.state === 'RUNNING' && o.kind === 'group.rebuild' && !groups.some((g) => g.name === o.resource && g.state === 'GROUP_REBUILDING')) {
      items.push(['warn', h('span', {}, `${o.kind} of ${o.resource} `, progress(o.progressFraction))]);
    }
  }
  for (const s of pool_stats) {
    if (s.writesStopped) items.push(['bad', `${s.pool} refuses writes: ${s.writesStopped}`]);
    if (s.writeThroughReason) items.push(['warn', `${s.pool} writes through: ${s.writeThroughReason}`]);
  }
  clear(section, h('h2', {}, 'Alerts'), items.length
    ? h('ul.alerts', {}, items.map(([kind, text]) => h(`li.${kind}`, {}, text)))
    : h('p.good', {}, 'Nothing needs attention.'));
}

// The array's I/O now: rates summed over the pools, latency averaged over
// the volumes weighted by their IOPS.
function totals(pool_stats, volume_stats) {
  const sum = (list, f) => list.reduce((a, x) => a + Number(x[f] ?? 0), 0);
  const weighted = (iops, latency) => {
    const weight = sum(volume_stats, iops);
    return weight > 0 ? volume_stats.reduce((a, v) => a + Number(v[iops]) * Number(v[latency]), 0) / weight : 0;
  };
  return {
    read_iops: sum(pool_stats, 'readIops'),
    write_iops: sum(pool_stats, 'writeIops'),
    read_mb_per_second: sum(pool_stats, 'readMbPerSecond'),
    write_mb_per_second: sum(pool_stats, 'writeMbPerSecond'),
    read_latency_ms: weighted('readIops', 'readLatencyMs'),
    write_latency_ms: weighted('writeIops', 'writeLatencyMs'),
  };
}

function draw_live(section, samples) {
  const now = samples[samples.length - 1];
  const figure = (label, value, unit, series) => h('div.figure', {},
    h('span.figure-label', {}, label), h('span.figure-value', {}, value, h('small', {}, ` ${unit}`)), sparkline(samples.map(series)));
  clear(section, h('h2', {}, 'Live I/O'), h('div.figures', {},
    figure('IOPS (read / write)', `${fixed(now.read_iops, 0)} / ${fixed(now.write_iops, 0)}`, '', (s) => s.read_iops + s.write_iops),
    figure('Throughput (read / write)', `${fixed(now.read_mb_per_second, 1)} / ${fixed(now.write_mb_per_second, 1)}`, 'MB/s',
      (s) => s.read_mb_per_second + s.write_mb_per_second),
    figure('Latency (read / write)', `${fixed(now.read_latency_ms, 2)} / ${fixed(now.write_latency_ms, 2)}`, 'ms',
      (s) => Math.max(s.read_latency_ms, s.write_latency_ms))),
  h('p.hint', {}, 'Rates over the array\'s last 5 s sample, refreshed every 2 s.'));
}

function sparkline(values) {
  const width = 160;
  const height = 28;
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('class', 'sparkline');
  svg.setAttribute('aria-hidden', 'true');
  const max = Math.max(...values, 1e-9);
  // The samples there are across the whole width (one: a flat line).
  const series = values.length === 1 ? [values[0], values[0]] : values;
  const step = width / (series.length - 1);
  const points = series.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`);
  const line = document.createElementNS(ns, 'polyline');
  line.setAttribute('points', points.join(' '));
  svg.append(line);
  return svg;
}

// "31 days", "5 h", "90 s": the largest whole unit.
function duration(seconds) {
  if (seconds % 86400 === 0) return `${seconds / 86400} days`;
  if (seconds % 3600 === 0) return `${seconds / 3600} h`;
  if (seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}

function draw_pools(section, pool_list, pool_stats) {
  const tier = (label, size, free) => {
    const used = num(size) - num(free);
    return h('div.tier', {}, h('span.tier-label', {}, label),
      progress(num(size) ? used / num(size) : 0, `${bytes(used)} of ${bytes(size)}`));
  };
  clear(section, h('h2', {}, 'Pools'), h('div.pools', {}, pool_list.map((p, i) => {
    const s = pool_stats[i];
    const total = num(s.performanceBytes) + num(s.capacityBytes) + num(s.coldBytes);
    const cold = num(s.coldBytes) > 0;
    const cooling = p.coldCoolingSeconds === undefined ? '31 days (default)' : num(p.coldCoolingSeconds) === 0 ? 'off' : duration(num(p.coldCoolingSeconds));
    return h('article.pool', { dataset: { name: p.name } },
      h('h3', {}, short(p.name), ' ', h('small', {}, `owner ${short(p.owner) || 'a'}`)),
      tier('SSD tier (performance)', s.performanceBytes, s.performanceFreeBytes),
      tier('HDD tier (capacity)', s.capacityBytes, s.capacityFreeBytes),
      cold ? tier('Ceph tier (cold)', s.coldBytes, s.coldFreeBytes) : null,
      h('dl', {},
        cold ? [h('dt', {}, 'Cold cooling'), h('dd', {}, cooling),
          h('dt', {}, 'Moved to / from Ceph'), h('dd.cold-moves', {}, `${s.coldDemotions ?? 0} / ${s.coldPromotions ?? 0} extents`)] : null,
        h('dt', {}, 'Committed'), h('dd', {}, `${bytes(s.committedBytes)} (${total ? fixed((100 * num(s.committedBytes)) / total, 0) : 0}% of the tiers)`),
        h('dt', {}, 'Read cache'), h('dd', {}, p.readCacheGroup ? bytes(s.readCacheBytes) : 'none'),
        h('dt', {}, 'Write cache'), h('dd', {}, s.writeCache || 'none',
          s.writeLogBytes && num(s.writeLogBytes) ? ` · log ${bytes(s.writeLogUsedBytes)} of ${bytes(s.writeLogBytes)}, ${bytes(s.dirtyBytes)} dirty` : ''),
        h('dt', {}, 'Groups'), h('dd', {}, p.groups.map(short).join(', '))));
  })));
}

// Heat map: a pool's or a volume's extents over time. x: the heat
// history's snapshots, oldest left, then a live "now" column; y: the
// extents, by volume and index; colour: the heat score (random I/Os per
// half-life, log scale); an outline for extents on the SSD tier, and a
// triangle where an extent changed tier since the snapshot before (a
// migration: ▲ promoted, ▼ demoted). The hottest extents now are listed
// below with their tier. Each drawn cell carries data-volume,
// data-extent, data-tier and data-column (a snapshot's sequence, or
// "now"), and a table repeats the now column, for tests and screen
// readers.
//   ListPools, ListVolumes; ListHeatHistory (parent: the pool or volume;
//   re-read as new snapshots come); ListHeat (every page, extent order,
//   per volume) every 3 s.
import { ApiError, call, list_all, num } from './api.js';
import { bytes, clear, fixed, h, short, table, time } from './ui.js';

export const title = 'Heat map';
const live_period_ms = 3000;
const max_columns = 240;  // snapshots drawn: the newest
const max_rows = 1024;    // extents drawn
const svg_ns = 'http://www.w3.org/2000/svg';
const unmapped_colour = '#e6e9ee';  // style.css's --unmapped (a fill attribute takes no var())
const tier_names = { TIER_PERFORMANCE: 'SSD', TIER_CAPACITY: 'HDD', TIER_UNMAPPED: 'unmapped', TIER_UNSPECIFIED: '?' };
const since_choices = [['3600', 'the last hour'], ['21600', 'the last 6 hours'], ['86400', 'the last 24 hours'], ['0', 'all kept']];

export async function render(root, scope, path) {
  const pools = await list_all('ListPools', {}, 'pools');
  const volumes = await list_all('ListVolumes', { parent: 'pools/-' }, 'volumes');
  const targets = pools.flatMap((p) => [[p.name, `${p.name} (every volume)`],
    ...volumes.filter((v) => v.name.startsWith(`${p.name}/`)).map((v) => [v.name, v.name])]);
  const wanted = path.join('/');
  const parent = targets.some(([name]) => name === wanted) ? wanted : targets[0]?.[0] ?? '';

  const picker = h('select', { id: 'heat-target', 'aria-label': 'pool or volume' }, targets.map(([value, label]) => h('option', { value }, label)));
  picker.value = parent;
  picker.addEventListener('change', () => { location.hash = `#/heat/${picker.value}`; });
  const since = h('select', { id: 'heat-since', 'aria-label': 'since' }, since_choices.map(([value, label]) => h('option', { value }, label)));
  since.value = sessionStorage.getItem('heat-since') ?? '86400';
  const summary = h('p.hint', { id: 'heat-summary' });
  const map = h('div.heatmap', { id: 'heatmap' });
  const hottest = h('section.card', { id: 'hottest' }, h('h2', {}, 'Hottest extents now'));
  const drawn = h('details', { id: 'heat-table' }, h('summary', {}, 'Every extent drawn, as a table'));
  root.append(h('div.toolbar', {}, h('label', { for: 'heat-target' }, 'Show '), picker, h('label', { for: 'heat-since' }, ' over '), since),
    h('section.card.wide', {}, summary, map, legend()), hottest, drawn);
  if (!parent) {
    summary.textContent = 'No pool yet.';
    return;
  }
  const scoped = parent.includes('/volumes/') ? volumes.filter((v) => v.name === parent) : volumes.filter((v) => v.name.startsWith(`${parent}/`));

  let history = { snapshots: [], intervalSeconds: 0, extentsPerSnapshot: 0, extentBytes: 0, unavailable: '' };
  let history_read_ms = 0;
  const read_history = async () => {
    try {
      const snapshots = [];
      let page_token = '';
      let page;
      do {
        page = await call('ListHeatHistory', { parent, sinceUnixSeconds: since.value === '0' ? '0' : String(Math.floor(Date.now() / 1000) - Number(since.value)), pageSize: 1000, pageToken: page_token });
        snapshots.push(...page.snapshots);
        page_token = page.nextPageToken;
      } while (page_token);
      history = { snapshots: snapshots.slice(-max_columns), intervalSeconds: Number(page.intervalSeconds), extentsPerSnapshot: Number(page.extentsPerSnapshot),
        extentBytes: num(page.extentBytes), unavailable: '', kept: snapshots.length };
    } catch (e) {
      if (!(e instanceof ApiError) || e.status === 401) throw e;
      history = { snapshots: [], intervalSeconds: 0, extentsPerSnapshot: 0, extentBytes: 0, unavailable: e.message, kept: 0 };
    }
    history_read_ms = Date.now();
  };
  since.addEventListener('change', async () => {
    sessionStorage.setItem('heat-since', since.value);
    history_read_ms = 0;
  });

  await scope.every(live_period_ms, async () => {
    // The history changes once per snapshot interval: read again after one.
    const stale_ms = Math.max(10, Math.min(history.intervalSeconds || 10, 60)) * 1000;
    if (Date.now() - history_read_ms >= stale_ms) await read_history();
    const live = await Promise.all(scoped.map((v) => read_live(v.name)));
    if (!scope.alive) return;
    draw(map, summary, hottest, drawn, history, live, scoped);
  });
}

// Every extent of a volume now, in extent order.
async function read_live(volume) {
  const extents = [];
  let page_token = '';
  let page;
  do {
    page = await call('ListHeat', { volume, pageSize: 1000, pageToken: page_token, hottestFirst: false });
    extents.push(...page.extents);
    page_token = page.nextPageToken;
  } while (page_token);
  return { volume, extents, extent_bytes: num(page.extentBytes), total_extents: num(page.totalExtents) };
}

// heat_map::score, as the migrator ranks (tiering/heat.h): random I/Os.
const score_of = (e) => Number(e.reads ?? 0) + Number(e.writes ?? 0);

function draw(map, summary, hottest, drawn, history, live, volumes) {
  const order = new Map(volumes.map((v, i) => [v.name, i]));
  const key = (volume, extent) => `${volume}#${extent}`;
  // Rows: every extent some snapshot holds, and every extent mapped or
  // warm now; by volume, then index.
  const rows = new Map();
  const row = (volume, extent) => {
    const k = key(volume, extent);
    if (!rows.has(k)) rows.set(k, { volume, extent: Number(extent), cells: new Map(), now: null });
    return rows.get(k);
  };
  history.snapshots.forEach((s, column) => {
    for (const e of s.extents) if (order.has(e.volume)) row(e.volume, e.extent).cells.set(column, e);
  });
  for (const l of live) {
    for (const e of l.extents) {
      if (e.tier !== 'TIER_UNMAPPED' || score_of(e) > 0 || rows.has(key(l.volume, e.extent))) row(l.volume, e.extent).now = e;
    }
  }
  let list = [...rows.values()].sort((a, b) => order.get(a.volume) - order.get(b.volume) || a.extent - b.extent);
  const cut = list.length > max_rows ? list.length - max_rows : 0;
  if (cut) list = list.slice(0, max_rows);

  // Scale: log(1 + score) over everything drawn.
  let max_score = 0;
  for (const r of list) {
    for (const c of r.cells.values()) max_score = Math.max(max_score, Number(c.score));
    if (r.now) max_score = Math.max(max_score, score_of(r.now));
  }
  const heat = (score) => (max_score > 0 ? Math.log1p(Math.max(0, score)) / Math.log1p(max_score) : 0);

  const columns = history.snapshots.length;
  const label_w = 150;
  const plot_w = 1000;
  const gap = 14;
  const cell_w = Math.max(3, Math.min(28, Math.floor((plot_w - gap - 40) / (columns + 1))));
  const cell_h = Math.max(3, Math.min(14, Math.floor(520 / Math.max(list.length, 1))));
  const top = 8;
  const now_x = label_w + columns * cell_w + (columns ? gap : 0);
  const width = now_x + cell_w + 60;
  const height = top + list.length * cell_h + 40;
  const svg = svg_el('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': `heat map: ${list.length} extents, ${columns} snapshots and now` });

  // Volume names and extent indexes down the left.
  let migrations_up = 0;
  let migrations_down = 0;
  list.forEach((r, i) => {
    const y = top + i * cell_h;
    const first_of_volume = i === 0 || list[i - 1].volume !== r.volume;
    if (first_of_volume && volumes.length > 1) {
      svg.append(svg_el('line', { x1: 0, x2: width, y1: y, y2: y, class: 'volume-rule' }));
      svg.append(text_el(short(r.volume), { x: 2, y: y + 10, class: 'axis volume-label' }));
    }
    const every = Math.max(1, Math.ceil(12 / cell_h));
    if (i % every === 0) svg.append(text_el(String(r.extent), { x: label_w - 4, y: y + Math.min(cell_h, 10), class: 'axis', 'text-anchor': 'end' }));

    let tier_before = null;
    const place = (x, column, tier, score, when, extra) => {
      const rect = svg_el('rect', {
        x: x + 0.5, y: y + 0.5, width: cell_w - 1, height: cell_h - 1, fill: tier === 'TIER_UNMAPPED' ? unmapped_colour : ramp(heat(score)),
        class: `cell tier-${tier_names[tier] ?? '?'}`,
        'data-volume': r.volume, 'data-extent': String(r.extent), 'data-tier': String(tier).replace('TIER_', ''), 'data-column': column,
        'data-score': fixed(score, 3),
      });
      rect.append(svg_el('title', {}, `${short(r.volume)} extent ${r.extent} · ${when} · score ${fixed(score, 2)} · ${tier_names[tier] ?? tier}${extra}`));
      svg.append(rect);
      if (tier_before && tier !== tier_before && tier !== 'TIER_UNMAPPED' && tier_before !== 'TIER_UNMAPPED') {
        const up = tier === 'TIER_PERFORMANCE';
        if (up) migrations_up += 1; else migrations_down += 1;
        const s = Math.min(cell_w, cell_h, 10);
        const cx = x + cell_w / 2;
        const points = up ? `${cx - s / 2},${y + cell_h - 1} ${cx + s / 2},${y + cell_h - 1} ${cx},${y + cell_h - s}`
          : `${cx - s / 2},${y + 1} ${cx + s / 2},${y + 1} ${cx},${y + s - 1}`;
        svg.append(svg_el('polygon', { points, class: `migration ${up ? 'promoted' : 'demoted'}`, 'data-volume': r.volume, 'data-extent': String(r.extent), 'data-column': column }));
      }
      if (tier !== 'TIER_UNMAPPED') tier_before = tier;
    };
    history.snapshots.forEach((s, column) => {
      const c = r.cells.get(column);
      if (c) place(label_w + column * cell_w, String(s.sequence), c.tier, Number(c.score), time(num(s.takenUnixSeconds) * 1000), '');
    });
    if (r.now) place(now_x, 'now', r.now.tier, score_of(r.now), 'now', r.now.group ? ` (${short(r.now.group)})` : '');
  });

  // Time along the bottom: a few snapshot times, and "now".
  const base = top + list.length * cell_h;
  const label_every = Math.max(1, Math.ceil(110 / cell_w));
  history.snapshots.forEach((s, column) => {
    if (column % label_every !== 0 || label_w + column * cell_w > now_x - 60) return;  // clear of "now"
    const d = new Date(num(s.takenUnixSeconds) * 1000);
    const clock = history.intervalSeconds < 60 ? { hour: '2-digit', minute: '2-digit', second: '2-digit' } : { hour: '2-digit', minute: '2-digit' };
    svg.append(text_el(d.toLocaleTimeString([], clock), { x: label_w + column * cell_w, y: base + 14, class: 'axis' }));
  });
  svg.append(text_el('now', { x: now_x, y: base + 14, class: 'axis now-label' }));
  svg.append(text_el(columns ? 'snapshot time →' : 'no snapshot yet', { x: label_w, y: base + 30, class: 'axis' }));
  svg.append(text_el('extent', { x: 2, y: base + 14, class: 'axis' }));
  clear(map, list.length ? svg : h('p', {}, 'No extent written yet.'));

  const latest = history.snapshots[history.snapshots.length - 1];
  clear(summary,
    `${list.length} extents${cut ? ` (the first ${max_rows}; ${cut} more not drawn)` : ''} of ${volumes.length} volume(s), `,
    history.unavailable ? `no heat history (${history.unavailable}); `
      : history.intervalSeconds > 0 ? `${columns} snapshot(s)${history.kept > columns ? ` (the newest of ${history.kept})` : ''}, one every ${fixed(history.intervalSeconds, 0)} s of the ${history.extentsPerSnapshot} hottest extents; `
        : 'no heat history kept by this pool yet; ',
    latest ? `the newest ${time(num(latest.takenUnixSeconds) * 1000)}; ` : '',
    `migrations seen: ${migrations_up} ▲ promoted, ${migrations_down} ▼ demoted. `,
    `Extent size ${bytes(live[0]?.extent_bytes || history.extentBytes)}; the now column is refreshed every ${live_period_ms / 1000} s.`);

  const all_now = live.flatMap((l) => l.extents.map((e) => ({ ...e, volume: l.volume, extent_bytes: l.extent_bytes })));
  const top_now = all_now.filter((e) => score_of(e) > 0).sort((a, b) => score_of(b) - score_of(a)).slice(0, 20);
  clear(hottest, h('h2', {}, 'Hottest extents now'), table(['#', 'Volume', 'Extent', 'Offset', 'Reads', 'Writes', 'Score', 'Tier', 'Group'],
    top_now.map((e, i) => ({
      dataset: { volume: e.volume, extent: String(e.extent), tier: String(e.tier).replace('TIER_', '') },
      cells: [i + 1, short(e.volume), e.extent, bytes(e.offsetBytes), fixed(e.reads, 2), fixed(e.writes, 2), fixed(score_of(e), 2), tier_names[e.tier] ?? e.tier,
        e.group ? short(e.group) : '-'],
    })), { empty: 'no extent has heat now' }));

  const open = drawn.open;
  clear(drawn, h('summary', {}, 'Every extent drawn, as a table'), table(['Volume', 'Extent', 'Tier now', 'Score now', 'Tier in the newest snapshot holding it'],
    list.map((r) => {
      const last = [...r.cells.entries()].pop()?.[1];
      return {
        dataset: { volume: r.volume, extent: String(r.extent), tier: r.now ? String(r.now.tier).replace('TIER_', '') : '' },
        cells: [short(r.volume), r.extent, r.now ? tier_names[r.now.tier] : '-', r.now ? fixed(score_of(r.now), 2) : '-', last ? tier_names[last.tier] : '-'],
      };
    })));
  drawn.open = open;
}

// Colour for a heat from 0 to 1: dark blue, violet, orange, pale yellow.
const stops = [[38, 54, 97], [121, 60, 140], [222, 94, 64], [252, 226, 120]];
function ramp(t) {
  const x = Math.max(0, Math.min(1, t)) * (stops.length - 1);
  const i = Math.min(Math.floor(x), stops.length - 2);
  const f = x - i;
  const c = stops[i].map((a, k) => Math.round(a + (stops[i + 1][k] - a) * f));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

function legend() {
  const swatches = [0, 0.25, 0.5, 0.75, 1].map((t) => h('span.swatch', { style: { background: ramp(t) } }));
  return h('p.legend', {},
    h('span', {}, 'cold ', swatches, ' hot (log of the score)'),
    h('span', {}, h('span.swatch.tier-SSD-sample'), ' outlined: on the SSD tier'),
    h('span', {}, h('span.swatch.tier-HDD-sample'), ' plain: on the HDD tier'),
    h('span', {}, h('span.swatch.unmapped-sample'), ' unmapped'),
    h('span', {}, '▲ promoted, ▼ demoted since the snapshot before'));
}

function svg_el(name, attributes, ...children) {
  const e = document.createElementNS(svg_ns, name);
  for (const [k, v] of Object.entries(attributes)) e.setAttribute(k, String(v));
  for (const c of children) e.append(c);
  return e;
}

function text_el(content, attributes) {
  return svg_el('text', attributes, content);
}

// The web console in Debian's Chromium (playwright-core, no browser
// download), against a running stratad (run.sh starts one):
//   - every page loads with no console error, and how long each takes
//     (navigation start to the page's first data drawn);
//   - a volume created through the form appears in `strata volume list`;
//   - an invalid size shows the API's own message at the size field;
//   - a disk failed with the CLI shows as failed within 2 s; replaced
//     through the console, its rebuild's progress moves;
//   - the heat map draws the extents a workload wrote (qemu-io over iSCSI)
//     in the tier ListHeat gives, in the live column and in the history;
//     moved to the HDD tier through the console, they are drawn there;
//   - a screenshot of each page (1280x800) into SCREENSHOTS.
// Environment: CONSOLE_URL, STRATA (the CLI), STRATA_API (its --api),
// ISCSI_PORTAL, SCREENSHOTS, BROWSER_PROFILE (a fresh directory).
import { chromium } from 'playwright-core';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const env = (name, fallback) => process.env[name] ?? fallback ?? (() => { throw new Error(`${name} is not set`); })();
const base = env('CONSOLE_URL');
const strata = env('STRATA');
const api_addr = env('STRATA_API');
const portal = env('ISCSI_PORTAL');
const screenshots = env('SCREENSHOTS');
const profile = process.env.BROWSER_PROFILE ?? fs.mkdtempSync(path.join(os.tmpdir(), 'strata-chromium-'));
const pages = ['dashboard', 'disks', 'volumes', 'hosts', 'events', 'heat'];
const seed = Number(process.env.SEED ?? Date.now() % 1000000);

let failed = 0;
function check(what, ok, detail = '') {
  console.log(`${ok ? 'ok' : 'FAIL'}: ${what}${detail ? ` (${detail})` : ''}`);
  if (!ok) failed += 1;
  return ok;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const cli = (...args) => execFileSync(strata, ['--api', api_addr, ...args], { encoding: 'utf8' });

// The JSON API, as the console calls it.
async function api(method, request) {
  const response = await fetch(`${base}/strata.v1.Array/${method}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(request),
  });
  const body = await response.json();
  return { status: response.status, body };
}
async function live_heat(volume) {
  const extents = [];
  let pageToken = '';
  do {
    const { status, body } = await api('ListHeat', { volume, pageSize: 1000, pageToken, hottestFirst: false });
    if (status !== 200) throw new Error(`ListHeat: ${JSON.stringify(body)}`);
    extents.push(...body.extents);
    pageToken = body.nextPageToken;
  } while (pageToken);
  return new Map(extents.map((e) => [Number(e.extent), e]));
}

// A small seeded generator (mulberry32), so that a failing run can be
// repeated with SEED=.
function random(s) {
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

console.log(`seed ${seed} (SEED=${seed} repeats this run)`);
const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1280, height: 800 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const page = context.pages()[0] ?? await context.newPage();
page.setDefaultTimeout(20000);
page.on('dialog', (d) => d.accept());  // the console confirms destructive actions
// Console errors and uncaught exceptions, by the phase they happened in.
let phase = 'start';
const errors = [];
page.on('console', (m) => { if (m.type() === 'error') errors.push({ phase, text: m.text() }); });
page.on('pageerror', (e) => errors.push({ phase, text: `uncaught: ${e.message}` }));
const errors_in = (p) => errors.filter((e) => e.phase === p);

// open(name): a fresh load of the page, resolving to the milliseconds from
// the navigation's start to the page's first data drawn.
async function open(name, route = name) {
  await page.goto('about:blank');
  await page.goto(`${base}/#/${route}`);
  await page.waitForSelector(`main[data-ready="${name}"]`);
  const rendered = await page.evaluate(() => window.strata_rendered_ms);
  return rendered.since_navigation_ms;
}

let background = null;  // qemu-img bench, while the screenshots are taken
try {
  // A workload for the heat map: 4 KiB writes at random places in the
  // first 16 extents (4 MiB each) of LUN 0 (pools/p1/volumes/v1), 1 to 8
  // per extent, in random order (sequential streams do not count as heat).
  const rng = random(seed);
  const writes = [];
  const written = new Set();
  for (let extent = 0; extent < 16; extent += 1) {
    written.add(extent);
    const count = 1 + Math.floor(rng() * 8);
    for (let i = 0; i < count; i += 1) writes.push((extent * 4 * 1024 + Math.floor(rng() * 1023) * 4) * 1024);
  }
  writes.sort(() => rng() - 0.5);
  const lun0 = `iscsi://${portal}/iqn.2026-11.io.strata:array/0`;
  execFileSync('qemu-io', ['-f', 'raw', ...writes.flatMap((at) => ['-c', `write -P 0x5a ${at} 4k`]), lun0], { stdio: 'ignore' });
  check(`the workload: ${writes.length} writes of 4 KiB over extents 0-15 of v1 (qemu-io over iSCSI)`, true);

  // Every page, loaded fresh: no console error, and its load time.
  const load_ms = {};
  for (const name of pages) {
    phase = `load ${name}`;
    load_ms[name] = await open(name);
    await sleep(2500);  // a refresh or two after the first draw: errors of the polling count too
    check(`${name}: loads with no console error`, errors_in(phase).length === 0, errors_in(phase).map((e) => e.text).join('; '));
  }

  // A volume created through the form appears in `strata volume list`.
  phase = 'create';
  await open('volumes');
  const form = page.locator('#create-volume');
  await form.locator('[data-field="volume_id"]').fill('web1');
  await form.locator('[data-field="volume.size_bytes"]').fill('1G');
  await form.locator('button[type=submit]').click();
  await page.waitForSelector('#volumes tr[data-name="pools/p1/volumes/web1"]');
  check('a volume created through the form appears in `strata volume list`', /^pools\/p1\/volumes\/web1 +1\.0 GiB/m.test(cli('volume', 'list')));
  check('no console error while creating it', errors_in(phase).length === 0, errors_in(phase).map((e) => e.text).join('; '));

  // An invalid size: the API's message at the size field.
  phase = 'invalid size';
  const expected = await api('CreateVolume', { parent: 'pools/p1', volumeId: 'bad1', volume: { sizeBytes: '1000' } });
  check('the API refuses 1000 bytes naming volume.size_bytes', expected.status === 400 && expected.body.details?.[0]?.debug?.field === 'volume.size_bytes',
    JSON.stringify(expected.body));
  await form.locator('[data-field="volume_id"]').fill('bad1');
  await form.locator('[data-field="volume.size_bytes"]').fill('1000');
  await form.locator('button[type=submit]').click();
  const size_row = form.locator('.form-row', { has: page.locator('[data-field="volume.size_bytes"]') });
  await size_row.locator('.field-error:not(:empty)').waitFor();
  const shown = await size_row.locator('.field-error').textContent();
  const reason = expected.body.details?.[0]?.debug?.reason ?? '';
  check('an invalid size shows the API\'s message at the size field', reason !== '' && shown.includes(reason), `shown "${shown}", API "${reason}"`);
  check('the size input is marked invalid', await form.locator('[data-field="volume.size_bytes"]').getAttribute('aria-invalid') === 'true');
  check('no other field is marked', await form.locator('[aria-invalid="true"]').count() === 1);
  check('bad1 was not made', !/volumes\/bad1/.test(cli('volume', 'list')));
  // The browser logs the 400 itself ("Failed to load resource"); nothing else.
  const unexpected = errors_in(phase).filter((e) => !/status of 400/.test(e.text));
  check('no console error but the refused call\'s', unexpected.length === 0, unexpected.map((e) => e.text).join('; '));

  // Grown through the resize form.
  phase = 'resize';
  const resize = page.locator('#resize-volume');
  await resize.locator('select[name="name"]').selectOption('pools/p1/volumes/web1');
  await resize.locator('[data-field="volume.size_bytes"]').fill('2G');
  await resize.locator('button[type=submit]').click();
  await page.waitForSelector(`#volumes tr[data-name="pools/p1/volumes/web1"][data-size-bytes="${2 ** 31}"]`);
  check('a volume grown through the resize form is 2 GiB in `strata volume show`', /2\.0 GiB/.test(cli('volume', 'show', 'web1')));
  check('no console error while resizing', errors_in(phase).length === 0, errors_in(phase).map((e) => e.text).join('; '));

  // A host with CHAP, a LUN map to it, a CHAP secret too short at its
  // field, and an unmap, all through the forms.
  phase = 'hosts';
  await open('hosts');
  const host_form = page.locator('#add-host');
  await host_form.locator('[data-field="host_id"]').fill('web');
  await host_form.locator('[data-field="host.iqns"]').fill('iqn.2026-11.test:web');
  await host_form.locator('[data-field="host.chap_user"]').fill('webuser');
  await host_form.locator('[data-field="host.chap_secret"]').fill('web-secret-0123');
  await host_form.locator('button[type=submit]').click();
  await page.waitForSelector('#hosts tr[data-name="hosts/web"]');
  check('a host added with CHAP through the form is in `strata host list`, with CHAP', /^hosts\/web +iqn\.2026-11\.test:web +yes/m.test(cli('host', 'list')));
  const map_form = page.locator('#map-volume');
  await map_form.locator('select[name="volume"]').selectOption('pools/p1/volumes/web1');
  await map_form.locator('select[name="host"]').selectOption('hosts/web');
  await map_form.locator('[data-field="mapping.lun"]').fill('0');
  await map_form.locator('button[type=submit]').click();
  await page.waitForSelector('#mappings tr[data-name="mappings/web1-web"]');
  check('a volume mapped through the form is in `strata map list`', /^mappings\/web1-web +pools\/p1\/volumes\/web1 +hosts\/web +0$/m.test(cli('map', 'list')));
  const short_secret = await api('CreateHost', { hostId: 'web2', host: { iqns: ['iqn.2026-11.test:web2'], chapUser: 'u', chapSecret: 'short' } });
  await host_form.locator('[data-field="host_id"]').fill('web2');
  await host_form.locator('[data-field="host.iqns"]').fill('iqn.2026-11.test:web2');
  await host_form.locator('[data-field="host.chap_user"]').fill('u');
  await host_form.locator('[data-field="host.chap_secret"]').fill('short');
  await host_form.locator('button[type=submit]').click();
  const field = short_secret.body.details?.[0]?.debug?.field ?? '';
  const secret_error = host_form.locator('.form-row', { has: page.locator(`[data-field="${field}"]`) }).locator('.field-error');
  await secret_error.locator('text=/./').waitFor({ timeout: 5000 }).catch(() => {});
  check(`a CHAP secret too short: the API's message at its field (${field})`, short_secret.status === 400 && field !== '' &&
    (await secret_error.textContent()) === short_secret.body.details[0].debug.reason, `${JSON.stringify(short_secret.body.message)}`);
  await page.locator('#mappings tr[data-name="mappings/web1-web"] button', { hasText: 'Unmap' }).click();
  await page.waitForSelector('#mappings tr[data-name="mappings/web1-web"]', { state: 'detached' });
  check('unmapped through the console: gone from `strata map list`', !/mappings\/web1-web/.test(cli('map', 'list')));
  await map_form.locator('select[name="volume"]').selectOption('pools/p1/volumes/web1');
  await map_form.locator('select[name="host"]').selectOption('hosts/web');
  await map_form.locator('button[type=submit]').click();
  await page.waitForSelector('#mappings tr[data-name="mappings/web1-web"]');  // mapped again, for the screenshot
  const unexpected_hosts = errors_in(phase).filter((e) => !/status of 400/.test(e.text));
  check('no console error on the hosts page but the refused call\'s', unexpected_hosts.length === 0, unexpected_hosts.map((e) => e.text).join('; '));

  // A disk failed with the CLI: failed in the console within 2 s; then
  // replaced through the console (in place), its rebuild moves.
  phase = 'fail disk';
  await open('disks');
  cli('disk', 'fail', 'hdd-03');
  const failed_at = Date.now();
  let shown_failed_ms = -1;
  try {
    await page.waitForSelector('#disks tr[data-name="disks/hdd-03"][data-state="FAILED"]', { timeout: 5000 });
    shown_failed_ms = Date.now() - failed_at;
  } catch {}
  check('a disk failed with `strata disk fail` shows as failed within 2 s', shown_failed_ms >= 0 && shown_failed_ms <= 2000, `${shown_failed_ms} ms`);
  check('its group shows degraded', await page.locator('#groups tr[data-name="groups/g1"][data-state="DEGRADED"]').count() === 1);
  await page.goto('about:blank');
  await page.goto(`${base}/#/dashboard`);
  await page.waitForSelector('main[data-ready="dashboard"]');
  check('the dashboard alerts: the failed disk and the degraded group',
    (await page.locator('#alerts li', { hasText: 'disks/hdd-03 failed' }).count()) === 1 && (await page.locator('#alerts li', { hasText: 'groups/g1 is degraded' }).count()) === 1);
  await open('disks');
  const replace = page.locator('#replace-form');
  await replace.locator('select[name="name"]').selectOption('disks/hdd-03');
  await replace.locator('select[name="replacement"]').selectOption('');
  await replace.locator('button[type=submit]').click();
  const g1 = page.locator('#groups tr[data-name="groups/g1"]');
  await page.waitForSelector('#groups tr[data-name="groups/g1"][data-state="REBUILDING"]');
  const done = async () => Number(await g1.getAttribute('data-rebuild-done'));
  const first = await done();
  let later = first;
  for (let i = 0; i < 20 && later <= first; i += 1) {
    await sleep(500);
    if (await g1.getAttribute('data-state') !== 'REBUILDING') { later = Number(await g1.getAttribute('data-rebuild-total')) || Infinity; break; }
    later = await done();
  }
  check('the rebuild\'s progress moves in the console', later > first, `${first} then ${later} bytes`);
  check('the rebuild operation is listed with its progress',
    await page.locator('#group-operations tr[data-kind="group.rebuild"][data-state="RUNNING"] [role=progressbar]').count() >= 1 ||
    await g1.getAttribute('data-state') === 'OPTIMAL');
  // The disks page's screenshot shows the rebuild.
  fs.mkdirSync(screenshots, { recursive: true });
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: path.join(screenshots, 'disks.png') });
  const shot_already = new Set(['disks']);

  // The rebuild runs to its end before the heat map's move to the other
  // tier starts: the two together once failed the rebuilding member out
  // ("I/O timed out"), which is the array's matter, not the console's.
  let rebuild = null;
  for (let i = 0; i < 240; i += 1) {
    const { body } = await api('ListOperations', {});
    rebuild = (body.operations ?? []).find((o) => o.kind === 'group.rebuild' && o.resource === 'groups/g1') ?? null;
    if (rebuild && rebuild.state !== 'RUNNING') break;
    await sleep(500);
  }
  check('the rebuild succeeds', rebuild?.state === 'SUCCEEDED', JSON.stringify(rebuild));
  // Both rows, as the page's next refreshes (every second) draw them; the
  // states seen are printed if they never come.
  let healed_now = false;
  for (let i = 0; i < 20 && !healed_now; i += 1) {
    healed_now = await page.locator('#groups tr[data-name="groups/g1"][data-state="OPTIMAL"]').count() === 1 &&
      await page.locator('#disks tr[data-name="disks/hdd-03"][data-state="ONLINE"]').count() === 1;
    if (!healed_now) await sleep(500);
  }
  check('the console shows g1 optimal and hdd-03 online again', healed_now,
    `g1 ${await page.locator('#groups tr[data-name="groups/g1"]').getAttribute('data-state').catch(() => 'not drawn')}, ` +
    `hdd-03 ${await page.locator('#disks tr[data-name="disks/hdd-03"]').getAttribute('data-state').catch(() => 'not drawn')}, ` +
    `the API: g1 ${(await api('ListDiskGroups', {})).body.groups?.find((g) => g.name === 'groups/g1')?.state}, ` +
    `hdd-03 ${(await api('ListDisks', {})).body.disks?.find((d) => d.name === 'disks/hdd-03')?.state}`);
  check('no console error while failing and replacing', errors_in(phase).length === 0, errors_in(phase).map((e) => e.text).join('; '));

  // A Ceph tier through its form: a keyring that is not there is refused
  // with its path named, and nothing is made; a pool's cold cooling set
  // through its form is in the pool's record.
  phase = 'ceph tier';
  await open('disks');
  const ceph = page.locator('#ceph-form');
  await ceph.locator('[data-field="group_id"]').fill('c9');
  await ceph.locator('[data-field="group.ceph.monitors"]').fill('127.0.0.1:3300');
  await ceph.locator('[data-field="group.ceph.keyring_path"]').fill('/nonexistent/strata.keyring');
  await ceph.locator('[data-field="group.ceph.rados_pool"]').fill('rbd');
  await ceph.locator('[data-field="group.ceph.image"]').fill('cold');
  await ceph.locator('[data-field="group.ceph.size_bytes"]').fill('1G');
  await ceph.locator('button[type=submit]').click();
  await ceph.locator('.form-status.error').waitFor();
  const ceph_error = await ceph.locator('.form-status').textContent();
  check('a Ceph tier with a missing keyring: refused, naming the keyring', ceph_error.includes('/nonexistent/strata.keyring'), ceph_error);
  check('... and no group c9 was made', !/groups\/c9/.test(cli('group', 'list')));
  const cooling = page.locator('#cooling-form');
  await cooling.locator('[data-field="pool.cold_cooling_seconds"]').fill('3600');
  await cooling.locator('button[type=submit]').click();
  await cooling.locator('.form-status.ok').waitFor();
  check('a cold cooling of 3600 s set through the form: `strata pool show p1` says 1h', / 1h *$/m.test(cli('pool', 'show', 'p1')), cli('pool', 'show', 'p1'));
  const unexpected_ceph = errors_in(phase).filter((e) => !/status of 4\d\d/.test(e.text));
  check('no console error on the Ceph forms but the refused call\'s', unexpected_ceph.length === 0, unexpected_ceph.map((e) => e.text).join('; '));

  // The heat map: the written extents, in the tier ListHeat gives.
  phase = 'heat map';
  const v1 = 'pools/p1/volumes/v1';
  let snapshot = null;
  for (let i = 0; i < 40 && !snapshot; i += 1) {
    const { body } = await api('ListHeatHistory', { parent: v1 });
    snapshot = (body.snapshots ?? []).find((s) => s.extents.some((e) => written.has(Number(e.extent)))) ?? null;
    if (!snapshot) await sleep(1000);
  }
  check('the heat history has a snapshot of the written extents', snapshot !== null);
  await open('heat', `heat/${v1}`);
  // compare(): the now column's tier of every written extent against
  // ListHeat's, read around it (a move between the two reads is retried).
  const compare = async () => {
    for (let attempt = 0; attempt < 5; attempt += 1) {
      const before = await live_heat(v1);
      await sleep(3500);  // a refresh of the now column
      const drawn = await page.$$eval('#heatmap rect[data-column="now"]', (rects) => rects.map((r) => [Number(r.dataset.extent), r.dataset.tier]));
      const after = await live_heat(v1);
      const tiers = new Map(drawn);
      const wrong = [...written].filter((x) => tiers.get(x) !== String(after.get(x)?.tier).replace('TIER_', ''));
      const steady = [...written].every((x) => before.get(x)?.tier === after.get(x)?.tier);
      if (wrong.length === 0 || !steady) {
        if (wrong.length === 0) return { ok: true, tiers, after };
        continue;
      }
      return { ok: false, tiers, after, wrong };
    }
    return { ok: false, tiers: new Map(), after: new Map(), wrong: ['(never steady)'] };
  };
  let result = await compare();
  check('the heat map draws every written extent in the tier ListHeat gives (now column)', result.ok,
    result.wrong ? `wrong: ${result.wrong.join(',')}` : [...written].map((x) => `${x}:${result.tiers.get(x)}`).join(' '));
  const tier_now = String(result.after.get(0)?.tier);
  const history_cells = await page.$$eval('#heatmap rect:not([data-column="now"])', (rects) => rects.map((r) => [r.dataset.column, Number(r.dataset.extent), r.dataset.tier]));
  const in_snapshot = snapshot ? snapshot.extents.filter((e) => e.volume === v1) : [];
  const drawn_history = new Map(history_cells.filter(([column]) => column === String(snapshot?.sequence)).map(([, x, tier]) => [x, tier]));
  check('the snapshot\'s extents are drawn in its column, in the tier it gives',
    in_snapshot.length > 0 && in_snapshot.every((e) => drawn_history.get(Number(e.extent)) === e.tier.replace('TIER_', '')),
    `${in_snapshot.length} in snapshot ${snapshot?.sequence}, ${drawn_history.size} drawn`);
  // The first of the hottest list: an extent of the highest score
  // ListHeat gives (ties in any order), with its tier.
  const heat_now = await live_heat(v1);
  const score = (e) => Number(e?.reads ?? 0) + Number(e?.writes ?? 0);
  const best = Math.max(...[...heat_now.values()].map(score));
  const listed = page.locator('#hottest tbody tr').first();
  const listed_extent = heat_now.get(Number(await listed.getAttribute('data-extent')));
  check('the hottest extent is listed first, with its tier', Math.abs(score(listed_extent) - best) < 0.05 * best &&
    await listed.getAttribute('data-tier') === String(listed_extent?.tier).replace('TIER_', ''),
    `listed extent ${await listed.getAttribute('data-extent')} in ${await listed.getAttribute('data-tier')}, best score ${best.toFixed(2)}`);

  // Moved to the other tier through the console: drawn there, and a
  // migration marked once a snapshot has it.
  const target = tier_now === 'TIER_PERFORMANCE' ? 'CAPACITY' : 'PERFORMANCE';
  await open('volumes');
  await page.locator(`#volumes tr[data-name="${v1}"] button`, { hasText: target === 'CAPACITY' ? 'To HDD' : 'To SSD' }).click();
  let moved = false;
  for (let i = 0; i < 60 && !moved; i += 1) {
    await sleep(1000);
    const heat = await live_heat(v1);
    moved = [...written].every((x) => heat.get(x)?.tier === `TIER_${target}`);
  }
  check(`v1 moved to ${target} through the console (MoveVolume)`, moved);
  await open('heat', `heat/${v1}`);
  result = await compare();
  check(`after the move, the heat map draws the written extents in ${target}, as ListHeat does`, result.ok &&
    [...written].every((x) => result.tiers.get(x) === target), result.wrong ? `wrong: ${result.wrong.join(',')}` : '');
  let marked = 0;
  for (let i = 0; i < 30 && marked === 0; i += 1) {
    await sleep(1000);
    marked = await page.locator(`#heatmap polygon.migration.${target === 'CAPACITY' ? 'demoted' : 'promoted'}`).count();
  }
  check('the migration is marked on the heat map', marked > 0, `${marked} markers`);
  // Before the move back, a heat snapshot (every 10 s) must hold the
  // extents in ${target}: until one does, the move shows only in the now
  // column, against the last snapshot, and the move back would leave no
  // trace in any column (the two moves once fell between two snapshots).
  let recorded = null;
  for (let i = 0; i < 40 && !recorded; i += 1) {
    const { body } = await api('ListHeatHistory', { parent: v1 });
    recorded = (body.snapshots ?? []).find((s) => {
      const ours = s.extents.filter((e) => written.has(Number(e.extent)));
      return ours.length > 0 && ours.every((e) => e.tier === `TIER_${target}`);
    }) ?? null;
    if (!recorded) await sleep(1000);
  }
  check(`a heat snapshot records the written extents in ${target}`, recorded !== null, `snapshot ${recorded?.sequence}`);
  // Live: moved back with the CLI while the page stays open, the now
  // column follows without a reload, and the history marks the move once
  // a snapshot has it.
  const back = target === 'CAPACITY' ? 'PERFORMANCE' : 'CAPACITY';
  cli('volume', 'move', 'v1', '--to', back.toLowerCase());
  const moved_at = Date.now();
  let followed_ms = -1;
  for (let i = 0; i < 120 && followed_ms < 0; i += 1) {
    await sleep(500);
    const drawn = new Map(await page.$$eval('#heatmap rect[data-column="now"]', (rects) => rects.map((r) => [Number(r.dataset.extent), r.dataset.tier])));
    if ([...written].every((x) => drawn.get(x) === back)) followed_ms = Date.now() - moved_at;
  }
  check(`moved back to ${back} with the CLI: the open heat map's now column follows, no reload`, followed_ms >= 0, `${followed_ms} ms after the command`);
  let marked_back = 0;
  for (let i = 0; i < 40 && marked_back === 0; i += 1) {
    await sleep(1000);
    marked_back = await page.locator(`#heatmap polygon.migration.${back === 'CAPACITY' ? 'demoted' : 'promoted'}`).count();
  }
  check('and the history marks that move too, no reload', marked_back > 0, `${marked_back} markers`);
  check('no console error on the heat map', errors_in(phase).length === 0, errors_in(phase).map((e) => e.text).join('; '));

  // Screenshots of every page, as an admin sees them now.
  phase = 'screenshots';
  fs.mkdirSync(screenshots, { recursive: true });
  // Reads going on meanwhile, so that the live figures show I/O.
  background = spawn('qemu-img', ['bench', '-f', 'raw', '-c', '100000000', '-d', '4', '-s', '4096', lun0], { stdio: 'ignore' });
  for (const name of pages.filter((n) => !shot_already.has(n))) {
    await open(name, name === 'heat' ? `heat/${v1}` : name);
    await sleep(name === 'dashboard' ? 9000 : 1000);  // the dashboard's live figures: a few samples
    await page.screenshot({ path: path.join(screenshots, `${name}.png`) });
  }
  background.kill();
  check(`screenshots of ${pages.length} pages in ${screenshots}`, pages.every((n) => fs.existsSync(path.join(screenshots, `${n}.png`))));
  check('no console error on the second loads', errors_in(phase).length === 0, errors_in(phase).map((e) => e.text).join('; '));

  console.log('page load, navigation start to the first data drawn (ms):');
  for (const name of pages) console.log(`  ${name.padEnd(10)} ${load_ms[name].toFixed(0)}`);
} catch (e) {
  check(`the test ran to its end (phase "${phase}")`, false, e.stack);
} finally {
  background?.kill();
  await context.close();
  if (!process.env.BROWSER_PROFILE) fs.rmSync(profile, { recursive: true, force: true });
}
console.log(failed ? `${failed} check(s) failed` : 'all checks passed');
process.exit(failed ? 1 : 0);

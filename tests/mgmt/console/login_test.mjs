// The console's login, against a stratad with TLS and a bearer token
// (run.sh starts one): a call answered 401 opens the login form; a wrong
// token is refused in the form; the right one (POST /login, the session
// cookie) lets the page render; signing out brings the form back.
// Environment: CONSOLE_URL (https://…), TOKEN, BROWSER_PROFILE.
import { chromium } from 'playwright-core';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const base = process.env.CONSOLE_URL;
const token = process.env.TOKEN;
const profile = process.env.BROWSER_PROFILE ?? fs.mkdtempSync(path.join(os.tmpdir(), 'strata-chromium-'));

let failed = 0;
function check(what, ok, detail = '') {
  console.log(`${ok ? 'ok' : 'FAIL'}: ${what}${detail ? ` (${detail})` : ''}`);
  if (!ok) failed += 1;
}

const context = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1280, height: 800 },
  ignoreHTTPSErrors: true,  // the test's self-signed certificate
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const page = context.pages()[0] ?? await context.newPage();
page.setDefaultTimeout(15000);
const errors = [];
page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
page.on('pageerror', (e) => errors.push(`uncaught: ${e.message}`));
try {
  await page.goto(`${base}/#/dashboard`);
  await page.waitForSelector('dialog#login[open]');
  check('a call answered 401 opens the login form', true);
  check('the page is not drawn meanwhile', await page.locator('main[data-ready]').count() === 0);
  await page.fill('#login-token', 'not-the-token');
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#login-error:not(:empty)');
  check('a wrong token is refused in the form', /token/.test(await page.textContent('#login-error')), await page.textContent('#login-error'));
  await page.fill('#login-token', token);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('main[data-ready="dashboard"]');
  check('the right token: the form closes and the page renders', !(await page.locator('dialog#login[open]').count()) &&
    await page.locator('#pools article[data-name="pools/p1"]').count() === 1);
  const cookies = await context.cookies();
  check('the session is an HttpOnly cookie', cookies.some((c) => c.name === 'strata_session' && c.httpOnly));
  await page.goto('about:blank');
  await page.goto(`${base}/#/volumes`);
  await page.waitForSelector('main[data-ready="volumes"]');
  check('a new load keeps the session', await page.locator('dialog#login[open]').count() === 0 &&
    await page.locator('#volumes tr[data-name="pools/p1/volumes/v1"]').count() === 1);
  await page.click('#sign-out');
  await page.waitForSelector('dialog#login[open]');
  check('signing out brings the login form back', true);
  const unexpected = errors.filter((e) => !/status of 401/.test(e));
  check('no console error but the refused calls\'', unexpected.length === 0, unexpected.join('; '));
} catch (e) {
  check('the login test ran to its end', false, e.stack);
} finally {
  await context.close();
  if (!process.env.BROWSER_PROFILE) fs.rmSync(profile, { recursive: true, force: true });
}
console.log(failed ? `${failed} login check(s) failed` : 'all login checks passed');
process.exit(failed ? 1 : 0);

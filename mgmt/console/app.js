// The console's shell: hash routing to one module per page, the login
// form a 401 opens, and the mark a page sets once it has drawn its first
// data (main[data-ready], and window.strata_rendered_ms: milliseconds from
// the navigation's start, for the page-load figures).
import { call, login, logout, on_unauthenticated, ApiError } from './api.js';
import { clear, h, page_scope, show_error } from './ui.js';
import * as dashboard from './dashboard.js';
import * as disks from './disks.js';
import * as volumes from './volumes.js';
import * as hosts from './hosts.js';
import * as events from './events.js';
import * as heat from './heat.js';

const pages = { dashboard, disks, volumes, hosts, events, heat };
const main = document.getElementById('page');
let scope = null;
let generation = 0;

async function route() {
  const [, name = 'dashboard', ...rest] = location.hash.replace(/^#/, '').split('/');
  const page = pages[name] ?? dashboard;
  const page_name = pages[name] ? name : 'dashboard';
  scope?.end();
  scope = new page_scope();
  const mine = ++generation;
  const started_ms = performance.now();
  for (const a of document.querySelectorAll('nav a')) a.toggleAttribute('aria-current', a.getAttribute('href') === `#/${page_name}`);
  document.title = `${page.title} · Strata`;
  main.removeAttribute('data-ready');
  clear(main, h('h1', {}, page.title));
  try {
    await page.render(main, scope, rest.map(decodeURIComponent));
  } catch (e) {
    // Not drawn (a 401 waits for the login, which routes again).
    if (mine === generation) show_error(e);
    return;
  }
  if (mine !== generation) return;
  main.dataset.ready = page_name;
  window.strata_rendered_ms = { page: page_name, since_navigation_ms: performance.now(), since_route_ms: performance.now() - started_ms };
}

// Who answered, in the header: the controller and its firmware version,
// and a sign-out button once this tab signed in (arrays with a token).
async function identify() {
  try {
    const v = await call('GetVersion', {});
    const signed_in = sessionStorage.getItem('strata-signed-in') === '1';
    clear(document.getElementById('identity'), `controller ${v.controller} · ${v.version}`,
      signed_in ? h('button.link.sign-out', { type: 'button', id: 'sign-out', onclick: sign_out }, 'Sign out') : null);
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) show_error(e);
  }
}

async function sign_out() {
  await logout();
  sessionStorage.removeItem('strata-signed-in');
  location.reload();
}

const dialog = document.getElementById('login');
const login_form = document.getElementById('login-form');
on_unauthenticated(() => {
  if (!dialog.open) dialog.showModal();
});
login_form.addEventListener('submit', async (event) => {
  event.preventDefault();
  const error = document.getElementById('login-error');
  error.textContent = '';
  try {
    await login(document.getElementById('login-token').value);
    sessionStorage.setItem('strata-signed-in', '1');
    dialog.close();
    document.getElementById('login-token').value = '';
    identify();
    route();
  } catch (e) {
    error.textContent = e.message;
  }
});

window.addEventListener('hashchange', route);
if (!location.hash) history.replaceState(null, '', '#/dashboard');
identify();
route();
